#include "plan/kernel_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <sstream>

#include "core/error.h"

namespace lowbit {
namespace {

constexpr int kMarlinGroups[] = {-1, 32, 64, 128};
constexpr int kMacheteGroups[] = {-1, 128};

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

int Cc(const Hardware& hw) { return hw.is_nvidia() ? hw.cc_major * 10 + hw.cc_minor : 0; }
bool IsAmd(const Hardware& hw) { return hw.vendor == "AMD"; }

template <size_t N>
bool In(int v, const int (&list)[N]) {
  return std::find(std::begin(list), std::end(list), v) != std::end(list);
}

std::string GroupText(int g) {
  return g == -1 ? "per-channel (-1)" : g == 0 ? "per-tensor" : fmt::format("group {}", g);
}

// Marlin's own check (marlin_utils.check_marlin_supported): 4/8-bit, its four group sizes, >= 8.0.
bool MarlinTakes(const LinearVariant& v, int cc) {
  return cc >= 80 && (v.bits == 4 || v.bits == 8) && In(v.group, kMarlinGroups);
}

// Why Marlin does not take a variant ("" when it does), for the reason column and the traps.
std::string MarlinRefusal(const LinearVariant& v, int cc) {
  if (cc < 80) return fmt::format("Marlin needs compute capability >= 8.0");
  if (v.bits != 4 && v.bits != 8) return fmt::format("{}-bit: Marlin takes 4- and 8-bit weights", v.bits);
  if (!In(v.group, kMarlinGroups)) return fmt::format("group {}: Marlin takes -1/32/64/128", v.group);
  return "";
}

// vLLM converts a GPTQ/AWQ checkpoint to its Marlin method at start-up when the whole config fits
// (is_gptq_marlin_compatible / is_awq_marlin_compatible); CUDA only.
std::string MarlinConversionRefusal(const QuantSummary& q, const Hardware& hw) {
  if (!hw.is_nvidia()) return fmt::format("{} (ROCm): no Marlin kernels", hw.name);
  if (q.method == "gptq" && !q.gptq_symmetric) return "sym=false: gptq_marlin takes symmetric GPTQ only";
  for (const LinearVariant& v : q.variants)
    if (std::string why = MarlinRefusal(v, Cc(hw)); !why.empty()) return why;
  return "";
}

struct Resolved {
  std::string method;
  bool forced_original = false;  // --quantization gptq/awq where the Marlin method would have run
  std::string error;             // non-empty: the engine refuses to start

  static Resolved Use(std::string m, bool forced = false) {
    Resolved r;
    r.method = std::move(m);
    r.forced_original = forced;
    return r;
  }
  static Resolved Refuse(std::string why) {
    Resolved r;
    r.error = std::move(why);
    return r;
  }
};

std::string Mismatch(std::string_view config, std::string_view flag) {
  return fmt::format(
      "the quantization method in the model config ({}) does not match the one in the `quantization` argument ({})",
      config, flag);
}

bool IsCheckpointMethod(std::string_view m) {
  static const std::set<std::string, std::less<>> kMethods = {
      "gptq",     "gptq_marlin",  "awq",  "awq_marlin", "marlin", "compressed-tensors",
      "modelopt", "modelopt_fp4", "gguf", "fp8"};
  return kMethods.contains(m);
}

// The method the engine loads with: the checkpoint's own, its Marlin conversion, or what the
// --quantization flag forces; mirrors the override_quantization_method chain and the config check.
Resolved Resolve(const QuantSummary& q, const Hardware& hw, const EngineFlags& flags) {
  const std::string flag = Lower(flags.quantization);
  const std::string& m = q.method;
  if (m == "gptq" || m == "awq") {
    const std::string marlin = m + "_marlin";
    const bool convertible = MarlinConversionRefusal(q, hw).empty();
    if (flag.empty() || flag == "marlin" || flag == marlin) {
      if (convertible) return Resolved::Use(marlin);
      if (flag.empty()) return Resolved::Use(m);
      return Resolved::Refuse(Mismatch(m, flag) + "; " + MarlinConversionRefusal(q, hw));
    }
    if (flag == m) return Resolved::Use(m, convertible);
    return Resolved::Refuse(Mismatch(m, flag));
  }
  if (m == "lowbit") {
    if (flag.empty()) return Resolved::Use(m);
    return Resolved::Refuse(
        fmt::format("--quantization {}: this is a lowbit-packed checkpoint, which no engine method "
                    "reads",
                    flag));
  }
  if (m.empty()) {
    if (flag.empty()) return Resolved::Use("");
    if (flag == "fp8" || flag == "ptpc_fp8") return Resolved::Use(flag);  // online quantization of a 16-bit checkpoint
    if (IsCheckpointMethod(flag))
      return Resolved::Refuse(
          fmt::format("--quantization {} needs a quantized checkpoint, and this one has no "
                      "quantization config",
                      flag));
    return Resolved::Use(flag);  // other in-flight methods (bitsandbytes, ...): outside these rules
  }
  // compressed-tensors, fp8, modelopt, modelopt_fp4, gguf: no conversion, the flag must agree.
  const bool modelopt_alias = m.starts_with("modelopt") && flag == "modelopt";
  if (flag.empty() || flag == m || modelopt_alias) return Resolved::Use(m);
  return Resolved::Refuse(Mismatch(m, flag));
}

// vLLM's config check, on every platform: a g_idx that is not column / group_size (GPTQ desc_act:
// true, compressed-tensors actorder "group") is refused at start-up. Static act-order ("weight")
// stores its codes in column order and loads as any other checkpoint. Empty when none applies.
std::string GroupActOrderRefusal(const QuantSummary& q) {
  const auto it = std::ranges::find_if(q.variants, [](const LinearVariant& v) { return v.act_order && v.group > 0; });
  if (it == q.variants.end()) return {};
  return fmt::format("group activation ordering ({} linears: {}) is no longer supported by vLLM (0.32 refuses "
                     "it); quantize again with static act-order (lowbit --act-order=static, llm-compressor "
                     "actorder \"weight\") or without act-order",
                     it->layers, q.method == "gptq" ? "desc_act: true" : "actorder \"group\" / weight_g_idx");
}

// Integer weight-only: Machete, Marlin or an original kernel.
void WeightIntKernel(const QuantSummary& q, const Hardware& hw, const Resolved& r, KernelPath& k) {
  const int cc = Cc(hw);
  if (IsAmd(hw)) {
    k.status = PathStatus::kSlow;
    if (r.method == "awq") {
      k.kernel = "AWQ Triton";
      k.reason = "ROCm: no Marlin/Machete; AWQ runs the Triton port of the original kernel";
    } else if (r.method == "gptq") {
      k.kernel = "GPTQ exllama";
      k.reason = "ROCm: no Marlin/Machete; GPTQ runs the original exllama kernel";
    } else {
      k.kernel = "Triton mixed-precision";
      k.reason = "ROCm: no Marlin/Machete; a Triton W4A16 kernel";
    }
    return;
  }
  if (r.method == "gptq" || r.method == "awq") {
    k.kernel = r.method == "gptq" ? "GPTQ exllama (original)" : "AWQ GEMM (original)";
    k.status = PathStatus::kSlow;
    k.reason = r.forced_original
                   ? fmt::format("--quantization {} forces the original kernel ({}_marlin would take this checkpoint)",
                                 r.method, r.method)
                   : MarlinConversionRefusal(q, hw);
    return;
  }
  // gptq_marlin, awq_marlin, compressed-tensors: per variant, best kernel first (choose_mp_linear_kernel).
  std::vector<std::string> kernels, reasons;
  PathStatus status = PathStatus::kFast;
  for (const LinearVariant& v : q.variants) {
    std::string kernel, reason;
    const bool machete_shape = (v.bits == 4 || v.bits == 8) && In(v.group, kMacheteGroups);
    if (cc == 90 && machete_shape && !v.zero_points && r.method != "awq_marlin") {
      kernel = "Machete";
      reason = "Hopper mixed-input GEMM";
    } else if (MarlinTakes(v, cc)) {
      kernel = "Marlin";
      if (cc == 90)
        reason = v.zero_points              ? "zero points: Machete takes none"
                 : r.method == "awq_marlin" ? "AWQ runs Marlin"
                                            : fmt::format("{}: Machete takes -1/128", GroupText(v.group));
      else if (cc > 90)
        reason = "Machete is sm90-only";
      else
        reason = "capability >= 8.0";
    } else {
      kernel = "exllama (original)";
      reason = MarlinRefusal(v, cc);
      status = PathStatus::kSlow;
    }
    if (std::find(kernels.begin(), kernels.end(), kernel) == kernels.end()) {
      kernels.push_back(kernel);
      reasons.push_back(q.variants.size() > 1 ? fmt::format("{}: {}", kernel, reason) : reason);
    }
  }
  k.kernel = fmt::format("{}", fmt::join(kernels, " / "));
  k.reason = fmt::format("{}", fmt::join(reasons, "; "));
  k.status = status;
}

// Integer weights: W4A16 / W8A16, and compressed-tensors' W4A8 (int8 inputs) / W4AFP8 (FP8 inputs).
void WeightIntPath(const QuantSummary& q, const Hardware& hw, const Resolved& r, KernelPath& k) {
  const int cc = Cc(hw);
  if (q.fp8_activations) {  // W4AFP8: compressed-tensors' W4A8 FP8 scheme, Hopper only
    const bool shape = std::all_of(q.variants.begin(), q.variants.end(),
                                   [](const LinearVariant& v) { return v.bits == 4 && v.group == 128 && !v.zero_points; });
    if (cc == 90 && shape) {
      k.kernel = "CUTLASS W4A8 (FP8 activations)";
      k.reason = "Hopper mixed-input GEMM, int4 weights against FP8 activations";
    } else {
      k.kernel = "-";
      k.status = PathStatus::kUnsupported;
      k.reason = cc == 90 ? "CUTLASS W4A8 takes int4, group 128, symmetric weights only"
                          : "int weights with FP8 inputs (W4AFP8) run only on capability 9.0 (CUTLASS W4A8)";
    }
    return;
  }
  WeightIntKernel(q, hw, r, k);
  if (q.activations_quantized) {  // W4A8 (int8 inputs): the WnA8 scheme picks this kernel with 16-bit activations
    if (k.status == PathStatus::kFast) k.status = PathStatus::kWeightOnly;
    k.reason += "; vLLM's WnA8 scheme runs it on 16-bit activations (only its Humming kernel quantizes them to int8)";
  }
}

void Fp8Path(const QuantSummary& q, const Hardware& hw, KernelPath& k) {
  const int cc = Cc(hw);
  const std::string acts = q.activations_quantized ? "" : " (activations quantized per token at run time)";
  if (IsAmd(hw)) {
    k.kernel = q.fp8_block ? "block FP8 W8A8 (Triton/AITER)" : "FP8 W8A8 (hipBLASLt)";
    k.reason = "CDNA3 FP8 is e4m3fnuz: e4m3fn weights are converted at load (scales doubled)" + acts;
  } else if (cc >= 89) {
    k.kernel = !q.fp8_block ? "CUTLASS FP8 W8A8"
               : cc >= 90   ? "block FP8 W8A8 (DeepGEMM/CUTLASS)"
                            : "block FP8 W8A8 (Triton)";
    k.reason = "native FP8 tensor cores (capability >= 8.9)" + acts;
  } else if (cc >= 80) {
    k.kernel = "FP8 Marlin (W8A16)";
    k.status = PathStatus::kWeightOnly;
    k.reason = "no FP8 tensor cores below 8.9: FP8 weights are dequantized to 16-bit inside the kernel";
  } else {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = "FP8 needs compute capability >= 8.0";
  }
}

void Int8Path(const Hardware& hw, KernelPath& k) {
  const int cc = Cc(hw);
  if (IsAmd(hw)) {
    k.kernel = "INT8 W8A8 (Triton scaled_mm)";
    k.reason = "ROCm INT8 scaled GEMM";
  } else if (cc >= 100) {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = "no INT8 W8A8 kernel for compute capability >= 10.0 (Blackwell scaled GEMMs are FP8/FP4)";
  } else if (cc >= 75) {
    k.kernel = "CUTLASS INT8 W8A8";
    k.reason = "INT8 tensor cores";
  } else {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = "INT8 W8A8 needs compute capability >= 7.5";
  }
}

// quant_method "mxfp4" (GPT-OSS): only the fused MoE is MXFP4 (Mxfp4MoEMethod; every other linear must be
// in modules_to_not_convert), its backend picked by get_mxfp4_backend: FlashInfer on Blackwell, the
// triton_kernels MoE on Hopper and ROCm, MXFP4 Marlin below. Activations stay bf16 by default everywhere.
void Mxfp4MoePath(const Hardware& hw, KernelPath& k) {
  const int cc = Cc(hw);
  k.status = PathStatus::kWeightOnly;
  if (IsAmd(hw)) {
    k.kernel = "Triton MXFP4 MoE (triton_kernels)";
    k.reason = "ROCm takes OpenAI's triton_kernels MoE; weights dequantized in the kernel, bf16 activations";
  } else if (cc >= 100) {
    k.kernel = "FlashInfer TRT-LLM MXFP4 MoE (bf16 inputs)";
    k.reason = "Blackwell's default; FP4 x FP8 compute only with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (the inputs "
               "then quantized to MXFP8)";
  } else if (cc >= 90) {
    k.kernel = "Triton MXFP4 MoE (triton_kernels)";
    k.reason = "Hopper with triton_kernels and torch >= 2.8 (else MXFP4 Marlin); bf16 activations";
  } else if (cc >= 80) {
    k.kernel = "MXFP4 Marlin MoE (W4A16)";
    k.reason = "below Hopper; intermediate size padded to 128 and hidden to 256, bf16 activations";
  } else {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = "quant_method mxfp4 needs compute capability >= 8.0";
  }
}

void Fp4Path(const QuantSummary& q, const Hardware& hw, KernelPath& k) {
  if (q.method == "mxfp4") return Mxfp4MoePath(hw, k);
  const int cc = Cc(hw);
  const std::string name = q.family == QuantFamily::kNvfp4 ? "NVFP4" : "MXFP4";
  if (IsAmd(hw)) {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = fmt::format("no {} kernel on {} (no FP4 units before CDNA4)", name, hw.name);
  } else if (cc >= 100 && q.activations_quantized) {
    k.kernel = fmt::format("{} W4A4 (CUTLASS/FlashInfer FP4 GEMM)", name);
    k.reason = q.fp8_activations ? "native FP4 tensor cores, but the checkpoint's FP8 inputs are quantized to MXFP4 "
                                   "instead (only vLLM's Humming kernel takes FP8 activations)"
                                 : "native FP4 tensor cores (Blackwell, capability >= 10.0)";
  } else if (cc >= 80) {
    k.kernel = "FP4 Marlin (W4A16)";
    k.status = PathStatus::kWeightOnly;
    k.reason = cc >= 100 ? fmt::format("{} weights only (activations are not quantized in this checkpoint)", name)
                         : fmt::format("native {} needs Blackwell (capability >= 10.0); weights are dequantized", name);
  } else {
    k.kernel = "-";
    k.status = PathStatus::kUnsupported;
    k.reason = "FP4 Marlin needs compute capability >= 8.0";
  }
}

std::string Join(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, ", ")); }

}  // namespace

std::string_view QuantFamilyName(QuantFamily f) {
  switch (f) {
    case QuantFamily::kDense: return "dense";
    case QuantFamily::kWeightInt: return "integer weight-only";
    case QuantFamily::kFp8: return "fp8";
    case QuantFamily::kInt8W8A8: return "int8 w8a8";
    case QuantFamily::kNvfp4: return "nvfp4";
    case QuantFamily::kMxfp4: return "mxfp4";
    case QuantFamily::kMxFloat: return "mxfp6/mxfp8";
    case QuantFamily::kGguf: return "gguf";
    case QuantFamily::kLowbit: return "lowbit";
  }
  return "?";
}

std::string_view PathStatusName(PathStatus s) {
  switch (s) {
    case PathStatus::kFast: return "fast";
    case PathStatus::kWeightOnly: return "weight-only";
    case PathStatus::kSlow: return "slow";
    case PathStatus::kError: return "start-up error";
    case PathStatus::kUnsupported: return "unsupported";
    case PathStatus::kNotCovered: return "not covered";
  }
  return "?";
}

EngineFlags ParseEngineFlags(const std::vector<std::string>& texts) {
  std::vector<std::string> tokens;
  for (const std::string& text : texts) {
    std::istringstream in(text);
    for (std::string t; in >> t;) tokens.push_back(t);
  }
  EngineFlags f;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string name = tokens[i], value;
    bool has_value = false;
    if (const size_t eq = name.find('='); name.starts_with("-") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= tokens.size() || tokens[i + 1].starts_with("-")) Fail("--engine-flag: {} needs a value", name);
      return tokens[++i];
    };
    if (name == "--quantization" || name == "-q") {
      f.quantization = Lower(take());
    } else if (name == "--kv-cache-dtype") {
      f.kv_cache_dtype = Lower(take());
    } else if (name == "--tensor-parallel-size" || name == "-tp") {
      const std::string v = take();
      int n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1)
        Fail("--engine-flag: {} '{}' is not a positive integer", name, v);
      f.tensor_parallel = n;
    } else {
      // Not one that changes the kernel choice; keep it (with its value) to say it was ignored.
      std::string ignored = tokens[i];
      if (!has_value && name.starts_with("-") && i + 1 < tokens.size() && !tokens[i + 1].starts_with("-"))
        ignored += " " + tokens[++i];
      f.ignored.push_back(ignored);
    }
  }
  if (f.kv_cache_dtype == "auto") f.kv_cache_dtype.clear();
  return f;
}

KernelPath ChooseKernel(const QuantSummary& q, const Hardware& hw, const EngineFlags& flags) {
  KernelPath k;
  k.gpu = hw.name;
  k.compute_capability = hw.compute_capability();
  const Resolved r = Resolve(q, hw, flags);
  k.method = r.method.empty() ? "none" : r.method;
  const std::string refusal = r.error.empty() ? GroupActOrderRefusal(q) : r.error;
  if (!refusal.empty()) {
    k.kernel = "-";
    k.status = PathStatus::kError;
    k.reason = refusal;
    return k;
  }
  if (!hw.is_nvidia() && !IsAmd(hw)) {
    k.kernel = "-";
    k.status = PathStatus::kNotCovered;
    k.reason = fmt::format("these are vLLM's CUDA/ROCm rules; {} ({}) runs its own stack", hw.name, hw.vendor);
    return k;
  }
  QuantFamily family = q.family;
  if (q.method.empty() && (r.method == "fp8" || r.method == "ptpc_fp8")) family = QuantFamily::kFp8;
  if (q.method.empty() && !r.method.empty() && family == QuantFamily::kDense) {
    k.kernel = "-";
    k.status = PathStatus::kNotCovered;
    k.reason = fmt::format("in-flight method {} is outside these rules", r.method);
    return k;
  }
  switch (family) {
    case QuantFamily::kDense:
      k.kernel = IsAmd(hw) ? "dense BF16 GEMM (hipBLASLt)" : "dense BF16 GEMM (cuBLAS)";
      k.reason = "unquantized weights run in bf16/fp16 (fp32 checkpoints are cast at load)";
      break;
    case QuantFamily::kWeightInt: WeightIntPath(q, hw, r, k); break;
    case QuantFamily::kFp8:
      Fp8Path(q, hw, k);
      if (q.method.empty()) k.reason = "online FP8 (--quantization " + r.method + "): " + k.reason;
      break;
    case QuantFamily::kInt8W8A8: Int8Path(hw, k); break;
    case QuantFamily::kNvfp4:
    case QuantFamily::kMxfp4: Fp4Path(q, hw, k); break;
    case QuantFamily::kGguf:
      k.kernel = "GGUF dequant + MMVQ/MMQ";
      k.reason = "llama.cpp's block-format kernels (vLLM's GGUF loader is experimental)";
      break;
    case QuantFamily::kMxFloat:
      k.kernel = "-";
      k.status = PathStatus::kNotCovered;
      k.reason = "compressed-tensors MXFP6 / MXFP8 (E8M0 scales per 32) are outside these rules";
      break;
    case QuantFamily::kLowbit:
      k.kernel = "-";
      k.status = PathStatus::kUnsupported;
      k.reason = "lowbit-packed codes load only in lowbit (no engine reads format 'lowbit-packed')";
      break;
  }
  return k;
}

std::vector<Trap> FindTraps(const QuantSummary& q, const std::vector<Hardware>& gpus, const EngineFlags& flags) {
  std::vector<Trap> traps;
  std::vector<KernelPath> paths;
  for (const Hardware& hw : gpus) paths.push_back(ChooseKernel(q, hw, flags));
  auto where = [&](auto&& pred) {
    std::vector<std::string> names;
    for (size_t i = 0; i < gpus.size(); ++i)
      if (pred(gpus[i], paths[i])) names.push_back(gpus[i].name);
    return names;
  };

  // Contradicting flag: vLLM's ValueError at start-up. Grouped by message (it may differ per GPU).
  std::vector<std::pair<std::string, std::vector<std::string>>> errors;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (paths[i].status != PathStatus::kError) continue;
    auto it = std::find_if(errors.begin(), errors.end(), [&](const auto& e) { return e.first == paths[i].reason; });
    if (it == errors.end()) it = errors.insert(errors.end(), {paths[i].reason, {}});
    it->second.push_back(gpus[i].name);
  }
  const std::string act_order_refusal = GroupActOrderRefusal(q);
  for (auto& [message, names] : errors)
    traps.push_back({message == act_order_refusal ? "group-act-order" : "flag-contradicts-config", "error",
                     "the engine refuses to start: " + message, names});

  const std::string flag = Lower(flags.quantization);
  if ((q.method == "gptq" || q.method == "awq") && flag == q.method) {
    std::vector<std::string> names =
        where([&](const Hardware& hw, const KernelPath&) { return MarlinConversionRefusal(q, hw).empty(); });
    if (!names.empty())
      traps.push_back({"forced-original-kernel", "warning",
                       fmt::format("--quantization {0} forces the original {0} kernel, skipping the automatic "
                                   "conversion to {0}_marlin (Marlin/Machete, several times faster at batch > 1); "
                                   "drop the flag or pass --quantization {0}_marlin",
                                   q.method),
                       names});
  }

  if (q.family == QuantFamily::kWeightInt) {
    for (const LinearVariant& v : q.variants) {
      if (v.group > 0 && !In(v.group, kMarlinGroups))
        traps.push_back({"group-no-fast-kernel",
                         "warning",
                         fmt::format("group_size {} ({} linears): no fast kernel takes it (Marlin -1/32/64/128, "
                                     "Machete -1/128); the engine falls back to the original {} kernel",
                                     v.group, v.layers, q.method == "awq" ? "AWQ" : "GPTQ/exllama"),
                         {}});
      if (v.bits != 4 && v.bits != 8)
        traps.push_back({"bits-no-fast-kernel",
                         "warning",
                         fmt::format("{}-bit weights ({} linears): Marlin and Machete take 4- and 8-bit only; the "
                                     "original kernel runs",
                                     v.bits, v.layers),
                         {}});
    }
    if (q.method == "gptq" && !q.gptq_symmetric)
      traps.push_back({"gptq-asymmetric",
                       "warning",
                       "sym=false: gptq_marlin takes symmetric GPTQ only, so the original exllama kernel runs",
                       {}});
  }

  const bool fp8_kv = flags.kv_cache_dtype.starts_with("fp8") || q.kv_fp8_declared;
  if (fp8_kv && !q.kv_scales)
    traps.push_back(
        {"fp8-kv-without-scales",
         "warning",
         fmt::format("FP8 KV cache ({}) but the checkpoint has no k_scale/v_scale tensors: the engine "
                     "uses scale 1.0, so keys/values beyond +-448 saturate and small ones lose precision; "
                     "calibrate KV scales (kv_cache_scheme) or compute them at start-up",
                     q.kv_fp8_declared ? "declared by the checkpoint" : "--kv-cache-dtype " + flags.kv_cache_dtype),
         {}});
  if (!fp8_kv && q.kv_scales)
    traps.push_back({"kv-scales-unused",
                     "info",
                     "the checkpoint carries k_scale/v_scale but the KV cache stays 16-bit unless --kv-cache-dtype fp8 "
                     "is passed",
                     {}});

  auto weight_only_on = [&](const char* id, const std::string& message) {
    std::vector<std::string> names =
        where([](const Hardware&, const KernelPath& p) { return p.status == PathStatus::kWeightOnly; });
    if (!names.empty()) traps.push_back({id, "info", message, names});
  };
  if (q.family == QuantFamily::kFp8 || (q.method.empty() && (flag == "fp8" || flag == "ptpc_fp8")))
    weight_only_on("fp8-weight-only",
                   "FP8 runs weight-only (FP8 Marlin) below compute capability 8.9: memory "
                   "savings, no FP8 compute");
  if (q.method == "mxfp4")
    weight_only_on("mxfp4-moe-bf16-inputs",
                   "vLLM's MXFP4 MoE kernels take bf16 activations (the weights dequantized inside the kernel): "
                   "memory savings on the experts; the attention, router and lm_head run in bf16");
  else if (q.family == QuantFamily::kNvfp4 || q.family == QuantFamily::kMxfp4)
    weight_only_on("fp4-weight-only",
                   "FP4 runs weight-only (FP4 Marlin) where native FP4 is missing (before "
                   "Blackwell) or the checkpoint leaves activations unquantized");
  if (q.family == QuantFamily::kMxfp4 && q.fp8_activations) {
    std::vector<std::string> names =
        where([](const Hardware&, const KernelPath& p) { return p.status == PathStatus::kFast; });
    if (!names.empty())
      traps.push_back({"mxfp4-fp8-inputs-as-mxfp4", "warning",
                       "the checkpoint's FP8 inputs run as MXFP4 inputs on " + Join(names) +
                           " (vLLM falls back to MXFP4 activations where only FlashInfer's FP4 GEMM is there): more "
                           "error than the FP8 inputs the checkpoint was measured with",
                       names});
  }
  if (q.fp8_block_token_inputs) {
    std::vector<std::string> names =  // every fast path of block FP8 is a block W8A8 kernel
        where([](const Hardware&, const KernelPath& p) { return p.status == PathStatus::kFast; });
    if (!names.empty())
      traps.push_back({"fp8-block-inputs-per-group", "warning",
                       "input_activations say per token, but vLLM's block FP8 kernels quantize the inputs of block "
                       "weights per group of a block's columns (1 x 128) on " + Join(names) + ": export with "
                       "--act-format fp8_e4m3:g128:scale=f32 (llm-compressor's FP8_BLOCK) to measure what they run",
                       names});
  }
  if (q.family == QuantFamily::kInt8W8A8) {
    std::vector<std::string> names =
        where([](const Hardware&, const KernelPath& p) { return p.status == PathStatus::kUnsupported; });
    if (!names.empty())
      traps.push_back({"int8-w8a8-unsupported", "error",
                       "INT8 W8A8 has no kernel on compute capability >= 10.0 (" + Join(names) +
                           "): requantize to FP8 (W8A8) or NVFP4 for Blackwell",
                       names});
  }
  if (q.family == QuantFamily::kLowbit)
    traps.push_back({"lowbit-only",
                     "info",
                     "lowbit-packed checkpoint: serving engines cannot load it; quantize to an engine format "
                     "(GPTQ / compressed-tensors) to deploy",
                     {}});
  return traps;
}

std::vector<std::string> DefaultInspectGpus() { return {"H100-SXM", "A100-80G", "L40S", "RTX-3090", "B200", "MI300X"}; }

nlohmann::json KernelPathToJson(const KernelPath& k) {
  return {{"gpu", k.gpu},       {"compute_capability", k.compute_capability}, {"method", k.method},
          {"kernel", k.kernel}, {"status", PathStatusName(k.status)},         {"reason", k.reason}};
}

nlohmann::json TrapToJson(const Trap& t) {
  return {{"id", t.id}, {"severity", t.severity}, {"message", t.message}, {"gpus", t.gpus}};
}

}  // namespace lowbit
