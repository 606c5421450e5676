// Which kernel a serving engine (vLLM, the reference; SGLang shares its quantization layer) runs
// for a quantized checkpoint on a given GPU, and the traps on the way. These are the published
// selection rules, restated from the engines' own support checks:
//
// - Integer weight-only (W4A16 / W8A16: GPTQ, AWQ, compressed-tensors pack-quantized):
//     Machete (Hopper mixed-input CUTLASS GEMM): compute capability exactly 9.0 (it uses sm90
//       wgmma; Blackwell does not take it), 4/8-bit, group -1 or 128, no zero points.
//     Marlin: capability >= 8.0, 4/8-bit, group -1/32/64/128. GPTQ's Marlin path needs sym=true
//       (uint4b8 / uint8b128); AWQ's takes its zero points (uint4 / uint8).
//     Otherwise the original kernels: GPTQ exllama (2/3/4/8-bit, any group), AWQ GEMM.
//     Group act-order (GPTQ desc_act: true, compressed-tensors actorder "group": a g_idx out of
//       column order) is a start-up error since vLLM 0.32, whatever the GPU.
//     An explicit `--quantization gptq` / `awq` skips the automatic Marlin conversion and forces
//     the original kernel; a `--quantization` that names another method than the checkpoint's
//     config is a start-up error.
// - FP8 weights: native W8A8 on capability >= 8.9 (CUTLASS; block-scaled FP8 via DeepGEMM/CUTLASS
//   on >= 9.0, Triton on 8.9); on 8.0-8.6 FP8 runs weight-only through FP8 Marlin (W8A16).
// - INT8 W8A8: CUTLASS INT8 on 7.5 <= capability < 10.0; there is no INT8 W8A8 kernel on >= 10.0.
// - Packed integer weights with quantized inputs (compressed-tensors' W4A8 / W4AFP8): int8 inputs
//   take the WnA8 scheme, whose mixed-precision kernel (Machete / Marlin, as W4A16) is chosen with
//   16-bit activations (only its Humming kernel, last in the order, quantizes them); FP8 inputs run
//   the CUTLASS W4A8 kernel on capability 9.0 only (int4, group 128, symmetric), nowhere else.
// - MXFP4 weights with FP8 inputs (MXFP4xFP8): only vLLM's Humming kernel takes FP8 activations;
//   otherwise it falls back to MXFP4 activations (FlashInfer's FP4 GEMM on Blackwell) or to
//   weight-only FP4 Marlin.
// - NVFP4: native FP4 GEMM only on Blackwell (>= 10.0); 8.x/9.0 run it weight-only (FP4 Marlin).
// - AMD (ROCm): no Marlin/Machete/NVFP4; FP8 and INT8 W8A8 run natively (FP8 as e4m3fnuz).
// - KV cache: an FP8 KV cache without k_scale / v_scale in the checkpoint uses scale 1.0.
// Other vendors (Gaudi, Ascend, CPUs) are outside these rules and reported as "not covered".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "plan/hardware.h"

namespace lowbit {

// What a checkpoint's linears store, as far as the kernel choice cares.
enum class QuantFamily : uint8_t {
  kDense,      // fp32/fp16/bf16 weights: dense 16-bit GEMM
  kWeightInt,  // integer weights, 16-bit activations (W4A16 / W8A16)
  kFp8,        // FP8 E4M3 weights (W8A8 where the GPU has FP8 tensor cores)
  kInt8W8A8,   // INT8 weights and INT8 activations
  kNvfp4,      // FP4 E2M1 weights, E4M3 scales per 16 (W4A4 when activations are FP4 too)
  kMxfp4,      // FP4 E2M1 weights, E8M0 scales per 32
  kMxFloat,    // MXFP6 / MXFP8 weights (E8M0 scales per 32): no published vLLM rule here
  kGguf,       // llama.cpp block formats
  kLowbit,     // lowbit-packed: no serving engine reads it
};
std::string_view QuantFamilyName(QuantFamily f);

// One distinct quantization variant among a checkpoint's linears (a uniform checkpoint has one).
struct LinearVariant {
  int bits = 16;
  int group = 0;  // -1 per-channel, 0 per-tensor / none, > 0 group size along the input
  bool zero_points = false;
  bool act_order = false;
  size_t layers = 0;  // how many linears use it
};

struct QuantSummary {
  QuantFamily family = QuantFamily::kDense;
  std::string method;                  // the quant_method the engine reads ("gptq", "awq", "compressed-tensors",
                                       // "fp8", "modelopt", "modelopt_fp4", "mxfp4", "gguf", "lowbit"); "" = unquantized
  bool gptq_symmetric = true;          // GPTQ sym (gptq_marlin needs true)
  bool activations_quantized = false;  // W8A8 / W4A4 / W4A8: the checkpoint quantizes activations too
  bool fp8_activations = false;        // FP8 inputs on integer (W4AFP8) or MXFP4 (MXFP4xFP8) weights
  bool fp8_block = false;              // block-scaled FP8 (weight_block_size / strategy block)
  bool fp8_block_token_inputs = false; // block FP8 weights whose config quantizes inputs per token
  bool kv_fp8_declared = false;        // the config declares an FP8 KV cache
  bool kv_scales = false;              // k_scale / v_scale tensors are present
  std::vector<LinearVariant> variants;
};

// The engine flags that change the kernel choice, parsed from --engine-flag texts such as
// "--quantization gptq", "-q=awq", "--kv-cache-dtype fp8 --tensor-parallel-size 4".
struct EngineFlags {
  std::string quantization;    // "" = let the engine pick from the checkpoint's config
  std::string kv_cache_dtype;  // "" = auto
  int tensor_parallel = 1;
  std::vector<std::string> ignored;  // flags that do not bear on the kernel choice
};
// Throws Error for a known flag without its value or with a bad number.
EngineFlags ParseEngineFlags(const std::vector<std::string>& texts);

enum class PathStatus : uint8_t {
  kFast,         // the fast kernel for this format on this GPU
  kWeightOnly,   // runs, but dequantizes to 16-bit compute (memory savings only)
  kSlow,         // an original / fallback kernel, several times slower at batch > 1
  kError,        // the engine refuses to start
  kUnsupported,  // no kernel for this format on this GPU
  kNotCovered,   // outside these rules (non-NVIDIA/AMD hardware)
};
std::string_view PathStatusName(PathStatus s);

struct KernelPath {
  std::string gpu, compute_capability;
  std::string method;  // the quantization method the engine ends up loading with ("gptq_marlin", ...)
  std::string kernel;
  PathStatus status = PathStatus::kFast;
  std::string reason;
};

struct Trap {
  std::string id;        // stable identifier, e.g. "forced-original-kernel"
  std::string severity;  // "error", "warning", "info"
  std::string message;
  std::vector<std::string> gpus;  // where it applies; empty = everywhere
};

KernelPath ChooseKernel(const QuantSummary& q, const Hardware& hw, const EngineFlags& flags);
std::vector<Trap> FindTraps(const QuantSummary& q, const std::vector<Hardware>& gpus, const EngineFlags& flags);

// The GPUs inspect reports when --gpu is not given: one of each generation and vendor.
std::vector<std::string> DefaultInspectGpus();

nlohmann::json KernelPathToJson(const KernelPath& k);
nlohmann::json TrapToJson(const Trap& t);

}  // namespace lowbit
