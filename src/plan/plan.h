// `lowbit plan` arithmetic: for a model (a preset, a config, or a bare parameter count), a format
// and a hardware target, how many bytes the weights, KV cache and activations take, how many
// devices that needs, and the roofline bounds on decode speed.
//
// Conventions (all figures are decimal GB = 1e9 bytes unless labelled GiB/KiB):
// - Weight bytes come from QuantScheme::StorageBytes on every weight matrix's real shape, split into
//   codes, scales (+ the fp32 tensor scale of NVFP4) and zero-points. Embeddings, lm_head, MoE
//   routers, norms and biases stay 16-bit ("unquantized") unless --quantize-embeddings quantizes
//   the embedding and lm_head matrices too; with a plain float format (fp32/fp16/bf16) they take
//   that format. A bare --params count applies the format to every parameter at the ratio the
//   scheme has on a 4096 x 4096 weight (the shape `lowbit formats` quotes).
// - KV bytes per token = layers x 2 (K and V) x kv_heads x head_dim x element bytes, plus the
//   scales and zero-points of a scaled KV dtype (per token and head for int8 = int8:channel, per
//   group for int4:gN). A per-tensor scale (the default for fp8 KV) is one number per layer, not
//   per token, and counts as 0. MLA (DeepSeek) caches kv_lora_rank + rope_head_dim per layer.
// - Activation/workspace = prefill_chunk tokens x activation_width x 2 bytes (one layer's live
//   bf16 tensors: residual and normed stream, q/k/v and attention output, MLP gate/up/product;
//   FlashAttention never materializes the ctx x ctx scores) + batch x vocab x 4 (fp32 logits) +
//   a 1 GiB runtime reserve on accelerators (CUDA/ROCm context, GEMM and collective workspaces).
// - Devices needed: weights and KV split over N devices (tensor parallel), activations do not:
//   smallest N with (weights + KV) / N + activations <= memory x memory_utilization.
// - Decode lower bound for one step (every sequence of the batch gets one token) =
//   max(bytes read / bandwidth, FLOPs / peak). Bytes read = the weights one step touches (all
//   dense weights; for MoE the experts the batch's tokens route to, in expectation) + KV of
//   batch x ctx tokens. At batch 1 it is bytes / bandwidth: 140 GB / 3.35 TB/s = 41.8 ms.
// - Peak FLOPs: FP8 formats on hardware with FP8 matrix units use the FP8 peak (W8A8), FP4 formats
//   on FP4 hardware the FP4 peak; every other format is a weight-only kernel that computes in
//   BF16. Arithmetic intensity = FLOPs / bytes of one decode step; the ridge batch is the smallest
//   batch whose weight GEMMs reach the hardware's ridge point peak / bandwidth (compute-bound from
//   there on); ridge_batch_at_ctx counts the KV reads too, which grow with the batch, so with a
//   long context it may never be reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/arch.h"
#include "plan/hardware.h"
#include "quant/scheme.h"

namespace lowbit {

enum class TensorRole : uint8_t {
  kLinear,        // quantized; every copy a token uses is read each decode step
  kRoutedExpert,  // quantized; a batch touches a growing subset of the experts
  kEmbedding,     // token embeddings: a lookup reads one row per token
  kLmHead,        // output projection (or the tied embedding): read in full each step
  kRouter,        // MoE gate: kept 16-bit (tiny, and routing decisions are precision-sensitive)
};

struct TensorGroup {
  std::string name;
  TensorRole role = TensorRole::kLinear;
  uint64_t rows = 0, cols = 0;
  uint64_t count = 0;   // matrices of this shape in the model
  uint64_t active = 0;  // how many of them one token uses (MoE: top-k routed experts)
};

struct ModelSpec {
  std::string name;
  std::string source;  // "preset", "model", "params"
  bool bare = false;   // --params: a parameter count without shapes
  uint64_t bare_total = 0, bare_active = 0;
  std::vector<TensorGroup> tensors;
  uint64_t other_params = 0;     // norms and biases: 16-bit, never quantized
  uint64_t inactive_other = 0;   // of those, the biases of the experts a token is not routed to
  uint32_t n_layers = 0;
  uint32_t moe_layers = 0, n_experts = 0, experts_per_token = 0;
  uint64_t vocab = 0;
  uint64_t kv_rows = 0, kv_cols = 0;         // cached elements per token and layer, as [rows x cols]
  uint32_t kv_window = 0, window_layers = 0;  // sliding-window layers cache at most kv_window tokens
  uint64_t attn_flops_per_cached_token = 0;  // decode FLOPs per new token per cached token, all layers
  uint64_t activation_width = 0;             // bf16 values alive per token inside one layer

  uint64_t TotalParams() const;
  uint64_t ActiveParams() const;  // per token (embedding table included, as published counts do)
};

ModelSpec SpecFromArch(const ModelArch& arch);
ModelSpec SpecFromParams(uint64_t total, uint64_t active, std::string name);

// "70B", "1.5b", "500M", "7e9", "70000000000" (K/M/B/T are decimal). Throws Error otherwise.
uint64_t ParseParamCount(std::string_view text);

// --kv-cache-dtype: any lowbit format; the bare names fp8 / fp8_e4m3 / fp8_e5m2 mean one
// per-tensor scale (what serving engines store), other bare names take their preset granularity.
QuantScheme ParseKvCacheDtype(std::string_view text);
// One cached token in every layer (what a context of full-attention layers costs per token).
uint64_t KvBytesPerToken(const ModelSpec& spec, const QuantScheme& kv);
// The (layer, token) pairs a sequence of `ctx` tokens keeps cached: every layer holds all of them, a
// sliding-window layer at most its window (as vLLM's sliding-window cache and lowbit's own do).
uint64_t KvLayerTokens(const ModelSpec& spec, uint64_t ctx);

struct ByteSplit {
  uint64_t codes = 0, scales = 0, zeros = 0;
  uint64_t total() const { return codes + scales + zeros; }
};
// StorageBytes(rows, cols) split into its parts (scales include an fp32 tensor scale).
ByteSplit SplitStorage(const QuantScheme& scheme, uint64_t rows, uint64_t cols);

struct PlanOptions {
  uint64_t ctx = 4096;
  uint64_t batch = 1;
  std::string kv_cache_dtype = "fp16";
  bool quantize_embeddings = false;
  uint64_t prefill_chunk = 2048;   // tokens per prefill step (vLLM's chunked-prefill default)
  double memory_utilization = 0.9;  // share of device memory an engine may use (vLLM's default)
};

inline constexpr uint64_t kRuntimeReserveBytes = uint64_t{1} << 30;

struct FormatPlan {
  std::string format;     // as given
  std::string scheme;     // canonical QuantScheme spelling
  std::string kv_scheme;  // canonical KV dtype spelling
  ByteSplit quantized;    // the quantized matrices
  uint64_t unquantized_bytes = 0;  // embeddings/lm_head/routers/norms/biases kept in 16 bits
  bool embeddings_quantized = false;
  uint64_t weight_bytes = 0;
  uint64_t total_params = 0, active_params = 0;
  double bits_per_weight = 0;         // weight bits / all parameters
  double linear_bits_per_weight = 0;  // over the quantized matrices only
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_bytes = 0;  // ctx x batch tokens
  uint64_t activation_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t device_memory_bytes = 0;
  uint64_t usable_bytes_per_device = 0;
  uint32_t devices_needed = 0;  // 0: activations alone exceed one device
  uint64_t step_bytes = 0;      // bytes one decode step reads at --batch
  double step_flops = 0;
  std::string compute_path;  // "bf16", "fp8", "fp4"
  double peak_flops = 0;
  double memory_ms = 0, compute_ms = 0;
  double decode_ms_per_token_lower_bound = 0;
  double tokens_per_s_per_sequence = 0, tokens_per_s_total = 0;
  double tensor_parallel_ms_per_token = 0;  // over devices_needed devices, communication ignored
  double arithmetic_intensity_batch1 = 0;
  double ridge_point = 0;  // FLOP per byte
  // Smallest batch at which the weight GEMMs turn compute-bound (the classic ridge batch), and at
  // which the whole decode step does once every sequence's KV reads at --ctx are counted
  // (nullopt: never; attention over a long grouped-query cache stays memory-bound).
  std::optional<uint64_t> ridge_batch, ridge_batch_at_ctx;
};

FormatPlan PlanFormat(const ModelSpec& spec, const Hardware& hw, std::string_view format,
                      const PlanOptions& options);

double RoundTo(double v, int decimals);  // 4.15625 -> 4.156 at 3 decimals
nlohmann::json PlanToJson(const FormatPlan& plan);
nlohmann::json ModelToJson(const ModelSpec& spec);
// What `lowbit plan --json` and `lowbit.plan()` return: the model, the hardware and one plan per format.
nlohmann::json PlanReportJson(const ModelSpec& spec, const Hardware& hw, const PlanOptions& options,
                              const std::vector<FormatPlan>& plans);
nlohmann::json HardwareToJson(const Hardware& hw);

}  // namespace lowbit
