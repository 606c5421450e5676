#include "plan/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {

uint64_t ModelSpec::TotalParams() const {
  if (bare) return bare_total;
  uint64_t n = other_params;
  for (const TensorGroup& t : tensors) n += t.count * t.rows * t.cols;
  return n;
}

uint64_t ModelSpec::ActiveParams() const {
  if (bare) return bare_active;
  uint64_t n = other_params - inactive_other;
  for (const TensorGroup& t : tensors) n += t.active * t.rows * t.cols;
  return n;
}

ModelSpec SpecFromArch(const ModelArch& a) {
  if (a.n_layers == 0 || a.hidden == 0 || a.n_heads == 0 || a.vocab == 0)
    Fail("model '{}': layers, hidden size, heads and vocabulary must be positive", a.name);
  ModelSpec s;
  s.name = a.name;
  s.n_layers = a.n_layers;
  s.vocab = a.vocab;
  const uint64_t L = a.n_layers, h = a.hidden, heads = a.n_heads;
  auto add = [&](std::string name, TensorRole role, uint64_t rows, uint64_t cols, uint64_t count, uint64_t active) {
    if (count > 0) s.tensors.push_back({std::move(name), role, rows, cols, count, active});
  };
  uint64_t attn_width = 0;
  if (a.mla()) {
    const uint64_t qk = a.nope_head_dim + a.rope_head_dim, latent = a.kv_lora_rank + a.rope_head_dim;
    if (a.q_lora_rank > 0) {
      add("attn.q_a_proj", TensorRole::kLinear, a.q_lora_rank, h, L, L);
      add("attn.q_b_proj", TensorRole::kLinear, heads * qk, a.q_lora_rank, L, L);
      s.other_params += a.q_lora_rank * L;  // q_a_layernorm
    } else {
      add("attn.q_proj", TensorRole::kLinear, heads * qk, h, L, L);
    }
    add("attn.kv_a_proj_with_mqa", TensorRole::kLinear, latent, h, L, L);
    add("attn.kv_b_proj", TensorRole::kLinear, heads * (a.nope_head_dim + a.v_head_dim), a.kv_lora_rank, L, L);
    add("attn.o_proj", TensorRole::kLinear, h, heads * a.v_head_dim, L, L);
    s.other_params += a.kv_lora_rank * L;  // kv_a_layernorm
    // MLA caches only the latent (plus the shared rope key): one [1 x latent] row per layer.
    s.kv_rows = 1;
    s.kv_cols = latent;
    // Decode with the up-projections absorbed: scores over latent+rope, values over the latent.
    s.attn_flops_per_cached_token = L * (2 * heads * latent + 2 * heads * a.kv_lora_rank);
    attn_width = a.q_lora_rank + latent + 2 * heads * qk + 2 * heads * a.v_head_dim;
  } else {
    if (a.n_kv_heads == 0 || a.head_dim == 0) Fail("model '{}': kv heads and head_dim must be positive", a.name);
    const uint64_t q_dim = heads * a.head_dim, kv_dim = uint64_t{a.n_kv_heads} * a.head_dim;
    add("attn.q_proj", TensorRole::kLinear, q_dim, h, L, L);
    add("attn.k_proj", TensorRole::kLinear, kv_dim, h, L, L);
    add("attn.v_proj", TensorRole::kLinear, kv_dim, h, L, L);
    add("attn.o_proj", TensorRole::kLinear, h, q_dim, L, L);
    if (a.qkv_bias) s.other_params += (q_dim + 2 * kv_dim) * L;
    if (a.qk_norm) s.other_params += (a.qk_norm_whole ? q_dim + kv_dim : uint64_t{2} * a.head_dim) * L;
    if (a.o_bias) s.other_params += h * L;
    if (a.attention_sinks) s.other_params += heads * L;
    s.kv_rows = 2 * uint64_t{a.n_kv_heads};  // K and V, one row per KV head
    s.kv_cols = a.head_dim;
    if (a.sliding_window > 0) {
      s.kv_window = a.sliding_window;
      s.window_layers = std::min(a.window_layers, a.n_layers);
    }
    s.attn_flops_per_cached_token = L * 4 * q_dim;  // q.k and p.v, 2 FLOPs per multiply-add
    attn_width = 2 * q_dim + 2 * kv_dim;
  }
  const uint64_t dense_layers = a.moe() ? std::min(a.dense_layers, a.n_layers) : L;
  const uint64_t moe_layers = L - dense_layers;
  add("mlp.gate_proj", TensorRole::kLinear, a.ffn, h, dense_layers, dense_layers);
  add("mlp.up_proj", TensorRole::kLinear, a.ffn, h, dense_layers, dense_layers);
  add("mlp.down_proj", TensorRole::kLinear, h, a.ffn, dense_layers, dense_layers);
  uint64_t mlp_width = dense_layers > 0 ? a.ffn : 0;
  if (moe_layers > 0) {
    const uint64_t e = a.n_experts, k = a.experts_per_token, f = a.expert_ffn;
    // The shared experts as one MLP of their whole width.
    const uint64_t shared = a.shared_experts > 0 ? 1 : 0;
    const uint64_t sf = a.shared_expert_ffn ? a.shared_expert_ffn : a.shared_experts * f;
    if (k == 0 || k > e || f == 0) Fail("model '{}': invalid mixture-of-experts shape", a.name);
    s.moe_layers = static_cast<uint32_t>(moe_layers);
    s.n_experts = a.n_experts;
    s.experts_per_token = a.experts_per_token;
    add("mlp.router", TensorRole::kRouter, e, h, moe_layers, moe_layers);
    add("mlp.experts.gate_proj", TensorRole::kRoutedExpert, f, h, moe_layers * e, moe_layers * k);
    add("mlp.experts.up_proj", TensorRole::kRoutedExpert, f, h, moe_layers * e, moe_layers * k);
    add("mlp.experts.down_proj", TensorRole::kRoutedExpert, h, f, moe_layers * e, moe_layers * k);
    add("mlp.shared_experts.gate_proj", TensorRole::kLinear, sf, h, moe_layers * shared, moe_layers * shared);
    add("mlp.shared_experts.up_proj", TensorRole::kLinear, sf, h, moe_layers * shared, moe_layers * shared);
    add("mlp.shared_experts.down_proj", TensorRole::kLinear, h, sf, moe_layers * shared, moe_layers * shared);
    mlp_width = std::max(mlp_width, k * f + shared * sf);
    if (a.expert_bias) {  // the router's logits, each expert's gate/up and down
      s.other_params += moe_layers * (e + e * (2 * f + h));
      s.inactive_other = moe_layers * (e - k) * (2 * f + h);
    }
    if (a.router_bias) s.other_params += moe_layers * e;
    if (a.shared_expert_gate) s.other_params += moe_layers * h;  // Qwen2-MoE's sigmoid gate on the shared expert
  }
  s.other_params += a.layer_norms * h * L + h;  // the layers' norms, the final norm
  if (a.tied) {
    // One matrix serves both: read in full every step as the lm_head.
    add("embed_tokens (tied lm_head)", TensorRole::kLmHead, a.vocab, h, 1, 1);
  } else {
    add("embed_tokens", TensorRole::kEmbedding, a.vocab, h, 1, 1);
    add("lm_head", TensorRole::kLmHead, a.vocab, h, 1, 1);
  }
  s.activation_width = 2 * h + attn_width + 3 * mlp_width;
  return s;
}

ModelSpec SpecFromParams(uint64_t total, uint64_t active, std::string name) {
  if (total == 0) Fail("--params must be positive");
  if (active == 0) active = total;
  if (active > total) Fail("--active-params ({}) exceeds --params ({})", active, total);
  ModelSpec s;
  s.name = std::move(name);
  s.source = "params";
  s.bare = true;
  s.bare_total = total;
  s.bare_active = active;
  return s;
}

uint64_t ParseParamCount(std::string_view text) {
  std::string t(text);
  double mult = 1;
  if (!t.empty()) {
    switch (std::tolower(static_cast<unsigned char>(t.back()))) {
      case 'k': mult = 1e3; break;
      case 'm': mult = 1e6; break;
      case 'b': mult = 1e9; break;
      case 't': mult = 1e12; break;
      default: break;
    }
    if (mult != 1) t.pop_back();
  }
  char* end = nullptr;
  const double v = t.empty() ? NAN : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v <= 0 || v * mult > 1e16)
    Fail("parameter count '{}' is not a positive number like 70B, 1.5B, 500M or 7e9", text);
  return static_cast<uint64_t>(std::llround(v * mult));
}

QuantScheme ParseKvCacheDtype(std::string_view text) {
  QuantScheme s = ParseScheme(text);
  // Serving engines keep one scale per layer for an fp8 cache (vLLM's k_scale / v_scale).
  if (text.find(':') == std::string_view::npos && (s.preset == "fp8_e4m3" || s.preset == "fp8_e5m2"))
    s.granularity = {GranularityKind::kTensor};
  return s;
}

ByteSplit SplitStorage(const QuantScheme& s, uint64_t rows, uint64_t cols) {
  s.ValidateShape(rows, cols, "plan");
  const uint64_t total = s.StorageBytes(rows, cols);
  ByteSplit b;
  b.codes = CheckedMul(rows, PackedBytes(cols, s.element->bits), "codes");
  if (s.granularity.kind != GranularityKind::kNone) {
    const ScaleGrid g = s.Grid(rows, cols);
    b.zeros = s.zero_type == ZeroType::kInt ? g.grid_rows * PackedBytes(g.grid_cols, s.element->bits)
                                            : g.cells() * s.zero_bits() / 8;
  }
  LOWBIT_CHECK(total >= b.codes + b.zeros);
  b.scales = total - b.codes - b.zeros;  // per-cell scales and the fp32 tensor scale
  return b;
}

namespace {
// One cached token in one layer.
uint64_t KvBytesPerLayerToken(const ModelSpec& spec, const QuantScheme& kv) {
  if (spec.bare) return 0;  // no architecture, no KV shape
  ByteSplit b = SplitStorage(kv, spec.kv_rows, spec.kv_cols);
  // Per-tensor scales (and NVFP4's tensor scale) are stored once per layer, not once per token.
  if (kv.granularity.kind == GranularityKind::kTensor) b.scales = b.zeros = 0;
  else if (kv.tensor_scale) b.scales -= 4;
  return b.total();
}
}  // namespace

uint64_t KvBytesPerToken(const ModelSpec& spec, const QuantScheme& kv) {
  return spec.n_layers * KvBytesPerLayerToken(spec, kv);
}

uint64_t KvLayerTokens(const ModelSpec& spec, uint64_t ctx) {
  const uint64_t windowed = spec.kv_window ? spec.window_layers : 0;
  return CheckedMul(spec.n_layers - windowed, ctx, "KV tokens") +
         CheckedMul(windowed, std::min<uint64_t>(ctx, spec.kv_window), "KV tokens");
}

double RoundTo(double v, int decimals) {
  const double p = std::pow(10.0, decimals);
  return std::round(v * p) / p;
}

namespace {

constexpr uint64_t kNominalRows = 4096, kNominalCols = 4096;  // as `lowbit formats`

bool IsPlain(const QuantScheme& s) { return s.granularity.kind == GranularityKind::kNone; }

// Which matrix units a format's matmuls can use on `hw` (weight-only kernels compute in bf16).
double PeakFor(const QuantScheme& s, const Hardware& hw, std::string* path) {
  const ElementFormat& e = *s.element;
  if (e.kind == ElementKind::kFloat && e.bits == 8 && hw.fp8_native()) {
    *path = "fp8";
    return hw.fp8_flops;
  }
  if (e.kind == ElementKind::kFloat && e.bits == 4 && hw.fp4_native()) {
    *path = "fp4";
    return hw.fp4_flops;
  }
  *path = "bf16";
  return hw.bf16_flops;
}

// Weight bytes one decode step reads at `batch`, and matmul parameters per token.
struct StepModel {
  struct Group {
    TensorRole role;
    uint64_t rows, count, active;
    uint64_t matrix_bytes;
  };
  std::vector<Group> groups;
  uint64_t other_bytes = 0;
  double bare_step_bytes = -1;  // >= 0 for --params
  const ModelSpec* spec = nullptr;

  double WeightBytes(uint64_t batch) const {
    if (bare_step_bytes >= 0) return bare_step_bytes;
    // Expected share of a layer's experts that `batch` tokens, each routed to k of E, touch.
    const double touched = spec->n_experts == 0 ? 1.0
        : 1.0 - std::pow(1.0 - double(spec->experts_per_token) / spec->n_experts, double(batch));
    double bytes = static_cast<double>(other_bytes);
    for (const Group& g : groups) {
      switch (g.role) {
        case TensorRole::kRoutedExpert: bytes += touched * g.count * g.matrix_bytes; break;
        case TensorRole::kEmbedding:
          bytes += double(std::min(batch, g.rows)) * g.matrix_bytes / g.rows;
          break;
        default: bytes += double(g.active) * g.matrix_bytes; break;
      }
    }
    return bytes;
  }
};

// Smallest batch whose intensity reaches `ridge`; intensity grows with the batch (weights are
// shared by the batch, each sequence's KV is not), so a doubling then bisection search finds it.
std::optional<uint64_t> RidgeBatch(const std::function<double(uint64_t)>& intensity, double ridge) {
  constexpr uint64_t kMaxBatch = uint64_t{1} << 40;
  if (intensity(kMaxBatch) < ridge) return std::nullopt;
  uint64_t lo = 0, hi = 1;  // intensity(lo) < ridge <= intensity(hi); lo == 0 stands for "none"
  while (intensity(hi) < ridge) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (intensity(mid) >= ridge ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

FormatPlan PlanFormat(const ModelSpec& spec, const Hardware& hw, std::string_view format,
                      const PlanOptions& o) {
  if (o.batch == 0) Fail("--batch must be at least 1");
  if (!(o.memory_utilization > 0 && o.memory_utilization <= 1))
    Fail("--memory-utilization must be in (0, 1], got {}", o.memory_utilization);
  FormatPlan p;
  const QuantScheme scheme = ParseScheme(format);
  const QuantScheme kept = IsPlain(scheme) ? scheme : ParseScheme("fp16");
  const QuantScheme kv = ParseKvCacheDtype(o.kv_cache_dtype);
  p.format = std::string(format);
  p.scheme = scheme.ToString();
  p.kv_scheme = kv.ToString();
  p.total_params = spec.TotalParams();
  p.active_params = spec.ActiveParams();
  p.embeddings_quantized = o.quantize_embeddings && !IsPlain(scheme);

  StepModel step;
  step.spec = &spec;
  double matmul_params = 0;  // per token, for FLOPs
  uint64_t quantized_params = 0;
  if (spec.bare) {
    const double numel = double(kNominalRows) * kNominalCols;
    const ByteSplit nominal = SplitStorage(scheme, kNominalRows, kNominalCols);
    p.quantized.codes = CeilDiv(CheckedMul(spec.bare_total, scheme.element->bits, "--params"), 8);
    p.quantized.scales = static_cast<uint64_t>(std::llround(nominal.scales / numel * double(spec.bare_total)));
    p.quantized.zeros = static_cast<uint64_t>(std::llround(nominal.zeros / numel * double(spec.bare_total)));
    quantized_params = spec.bare_total;
    matmul_params = double(spec.bare_active);
    step.bare_step_bytes = double(p.quantized.total()) * spec.bare_active / spec.bare_total;
  } else {
    for (const TensorGroup& t : spec.tensors) {
      const bool quantize = t.role == TensorRole::kLinear || t.role == TensorRole::kRoutedExpert ||
                            (p.embeddings_quantized && (t.role == TensorRole::kEmbedding || t.role == TensorRole::kLmHead));
      uint64_t matrix_bytes;
      if (quantize) {
        const ByteSplit b = SplitStorage(scheme, t.rows, t.cols);
        p.quantized.codes += t.count * b.codes;
        p.quantized.scales += t.count * b.scales;
        p.quantized.zeros += t.count * b.zeros;
        quantized_params += t.count * t.rows * t.cols;
        matrix_bytes = b.total();
      } else {
        matrix_bytes = kept.StorageBytes(t.rows, t.cols);
        p.unquantized_bytes += t.count * matrix_bytes;
      }
      step.groups.push_back({t.role, t.rows, t.count, t.active, matrix_bytes});
      if (t.role != TensorRole::kEmbedding) matmul_params += double(t.active) * t.rows * t.cols;
    }
    if (spec.other_params > 0) {
      step.other_bytes = kept.StorageBytes(1, spec.other_params);
      p.unquantized_bytes += step.other_bytes;
    }
  }
  p.weight_bytes = p.quantized.total() + p.unquantized_bytes;
  p.bits_per_weight = 8.0 * p.weight_bytes / p.total_params;
  p.linear_bits_per_weight = quantized_params ? 8.0 * p.quantized.total() / quantized_params : 0;

  // KV cache and activations.
  p.kv_bytes_per_token = KvBytesPerToken(spec, kv);
  const uint64_t kv_tokens = CheckedMul(o.ctx, o.batch, "ctx x batch");
  // Per sequence: sliding-window layers keep at most their window.
  const uint64_t kv_layer_tokens = KvLayerTokens(spec, o.ctx);
  const uint64_t kv_seq_bytes = CheckedMul(KvBytesPerLayerToken(spec, kv), kv_layer_tokens, "KV bytes");
  p.kv_bytes = CheckedMul(kv_seq_bytes, o.batch, "KV bytes");
  if (!spec.bare) {
    const uint64_t prefill_tokens = std::max<uint64_t>(1, std::min(o.prefill_chunk, kv_tokens));
    p.activation_bytes = prefill_tokens * spec.activation_width * 2 + o.batch * spec.vocab * 4 +
                         (hw.is_cpu() ? 0 : kRuntimeReserveBytes);
  }
  p.total_bytes = p.weight_bytes + p.kv_bytes + p.activation_bytes;

  // Devices: weights and KV shard, activations replicate.
  p.device_memory_bytes = hw.memory_bytes;
  p.usable_bytes_per_device = static_cast<uint64_t>(double(hw.memory_bytes) * o.memory_utilization);
  if (p.usable_bytes_per_device > p.activation_bytes) {
    const uint64_t room = p.usable_bytes_per_device - p.activation_bytes;
    p.devices_needed = static_cast<uint32_t>(std::max<uint64_t>(1, CeilDiv(p.weight_bytes + p.kv_bytes, room)));
  }

  // Roofline for one decode step at `batch` with `ctx` cached tokens per sequence.
  p.peak_flops = PeakFor(scheme, hw, &p.compute_path);
  p.ridge_point = p.peak_flops / hw.bandwidth;
  const double kv_seq = double(kv_seq_bytes);
  const double flops_per_token =
      2 * matmul_params + double(spec.attn_flops_per_cached_token) * kv_layer_tokens / std::max<uint32_t>(1, spec.n_layers);
  auto bytes_at = [&](uint64_t b) { return step.WeightBytes(b) + kv_seq * b; };
  auto intensity = [&](uint64_t b) { return flops_per_token * b / bytes_at(b); };
  p.step_bytes = static_cast<uint64_t>(std::llround(bytes_at(o.batch)));
  p.step_flops = flops_per_token * o.batch;
  p.memory_ms = bytes_at(o.batch) / hw.bandwidth * 1e3;
  p.compute_ms = p.step_flops / p.peak_flops * 1e3;
  p.decode_ms_per_token_lower_bound = std::max(p.memory_ms, p.compute_ms);
  p.tokens_per_s_per_sequence = 1e3 / p.decode_ms_per_token_lower_bound;
  p.tokens_per_s_total = p.tokens_per_s_per_sequence * o.batch;
  p.tensor_parallel_ms_per_token = p.decode_ms_per_token_lower_bound / std::max<uint32_t>(1, p.devices_needed);
  p.arithmetic_intensity_batch1 = intensity(1);
  // The weight GEMMs alone (what batching amortizes; the classic ridge batch) and the whole step
  // with the KV reads of every sequence, which batching does not amortize.
  p.ridge_batch = RidgeBatch([&](uint64_t b) { return 2 * matmul_params * b / step.WeightBytes(b); }, p.ridge_point);
  p.ridge_batch_at_ctx = RidgeBatch(intensity, p.ridge_point);
  return p;
}

nlohmann::json PlanToJson(const FormatPlan& p) {
  return {{"format", p.format},
          {"scheme", p.scheme},
          {"kv_cache_dtype", p.kv_scheme},
          {"weight_bytes", p.weight_bytes},
          {"codes_bytes", p.quantized.codes},
          {"scales_bytes", p.quantized.scales},
          {"zeros_bytes", p.quantized.zeros},
          {"unquantized_bytes", p.unquantized_bytes},
          {"embeddings_quantized", p.embeddings_quantized},
          {"bits_per_weight", RoundTo(p.bits_per_weight, 3)},
          {"linear_bits_per_weight", RoundTo(p.linear_bits_per_weight, 3)},
          {"kv_bytes_per_token", p.kv_bytes_per_token},
          {"kv_bytes", p.kv_bytes},
          {"activation_bytes", p.activation_bytes},
          {"total_bytes", p.total_bytes},
          {"device_memory_bytes", p.device_memory_bytes},
          {"usable_bytes_per_device", p.usable_bytes_per_device},
          {"devices_needed", p.devices_needed},
          {"step_bytes", p.step_bytes},
          {"compute_path", p.compute_path},
          {"decode_ms_per_token_lower_bound", p.decode_ms_per_token_lower_bound},
          {"memory_ms", p.memory_ms},
          {"compute_ms", p.compute_ms},
          {"tokens_per_s", p.tokens_per_s_per_sequence},
          {"tokens_per_s_total", p.tokens_per_s_total},
          {"tensor_parallel_ms_per_token", p.tensor_parallel_ms_per_token},
          {"arithmetic_intensity_batch1", p.arithmetic_intensity_batch1},
          {"ridge_point", p.ridge_point},
          {"ridge_batch", p.ridge_batch ? nlohmann::json(*p.ridge_batch) : nlohmann::json(nullptr)},
          {"ridge_batch_at_ctx", p.ridge_batch_at_ctx ? nlohmann::json(*p.ridge_batch_at_ctx) : nlohmann::json(nullptr)}};
}

nlohmann::json ModelToJson(const ModelSpec& s) {
  nlohmann::json j = {{"name", s.name},          {"source", s.source},
                      {"total_params", s.TotalParams()}, {"active_params", s.ActiveParams()}};
  if (!s.bare) {
    j["layers"] = s.n_layers;
    j["kv_elements_per_token_per_layer"] = s.kv_rows * s.kv_cols;
    if (s.kv_window) {
      j["sliding_window"] = s.kv_window;
      j["sliding_window_layers"] = s.window_layers;
    }
    if (s.n_experts) {
      j["experts"] = s.n_experts;
      j["experts_per_token"] = s.experts_per_token;
    }
  }
  return j;
}

nlohmann::json HardwareToJson(const Hardware& hw) {
  return {{"name", hw.name},
          {"vendor", hw.vendor},
          {"memory_bytes", hw.memory_bytes},
          {"bandwidth_bytes_per_s", hw.bandwidth},
          {"bf16_tflops", hw.bf16_flops / 1e12},
          {"fp8_tflops", hw.fp8_flops / 1e12},
          {"int8_tops", hw.int8_ops / 1e12},
          {"fp4_tflops", hw.fp4_flops / 1e12},
          {"compute_capability", hw.compute_capability()},
          {"source", hw.source}};
}

nlohmann::json PlanReportJson(const ModelSpec& spec, const Hardware& hw, const PlanOptions& options,
                              const std::vector<FormatPlan>& plans) {
  nlohmann::json list = nlohmann::json::array();
  for (const FormatPlan& p : plans) list.push_back(PlanToJson(p));
  return {{"model", ModelToJson(spec)}, {"hardware", HardwareToJson(hw)},
          {"ctx", options.ctx},         {"batch", options.batch},
          {"kv_cache_dtype", plans.empty() ? std::string() : plans.front().kv_scheme},
          {"memory_utilization", options.memory_utilization},
          {"formats", list}};
}

}  // namespace lowbit
