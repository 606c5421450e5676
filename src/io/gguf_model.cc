#include "io/gguf_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numbers>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "io/gguf_deepseek.h"
#include "io/gguf_repack.h"

namespace lowbit {
namespace {

// The general.architecture values lowbit runs (llama with or without experts).
constexpr std::string_view kGgufArchitectures[] = {
    "llama",   "qwen2",     "qwen3",   "qwen2moe", "qwen3moe", "gemma",   "gemma2",  "gemma3",
    "phi3",    "deepseek2", "gpt-oss", "granite",  "smollm3",  "olmo2",   "ernie4_5", "glm4",
    "glm4moe", "chatglm",   "command-r", "cohere2", "exaone4", "seed_oss", "ernie4_5-moe", "llama4",
    "qwen2vl", "qwen3vl", "qwen3vlmoe", "granitemoe", "hunyuan-dense", "hunyuan-moe", "mistral3", "mistral4",
    "minimax-m2", "olmoe"};



std::vector<uint64_t> WithoutTrailingOnes(std::vector<uint64_t> dims) {
  while (!dims.empty() && dims.back() == 1) dims.pop_back();
  return dims;
}

std::string DimsString(const std::vector<uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Llama 3.x rope scaling is stored as per-frequency divisors (rope_freqs.weight, formats.md 2.5)
// rather than as keys. Every released Llama 3.x converts with low_freq_factor 1, high_freq_factor 4 and
// original context 8192 (Llama 4 Scout: 1, 1, 8192) and differs only in `factor`, so recover the factor from
// the divisors under each of those, then require the whole tensor to match what it implies; anything else
// would be silently mis-rotated, so it is an error.
std::optional<RopeScaling> Llama3Scaling(const std::vector<float>& divisors, const ModelConfig& c, float low_freq,
                                         float high_freq) {
  RopeScaling s;
  s.low_freq_factor = low_freq;
  s.high_freq_factor = high_freq;
  s.original_max_position = 8192;
  const double orig = s.original_max_position;
  const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
  auto wavelen = [&](size_t i) {
    return 2 * std::numbers::pi * std::pow(double{c.rope_theta}, 2.0 * i / c.head_dim);
  };
  auto smooth = [&](size_t i) {  // only between the two wavelengths (none when they are equal)
    return (orig / wavelen(i) - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  };
  // Prefer a dimension divided by the factor itself; otherwise invert the smooth blend on the
  // dimension furthest from 1 (the best conditioned).
  double factor = 0, best_smooth = 2;
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double w = wavelen(i), f = divisors[i];
    if (w > low_wavelen) {
      factor = f;
      break;
    }
    if (w >= high_wavelen && smooth(i) < best_smooth && 1 / f - smooth(i) > 0) {
      best_smooth = smooth(i);
      factor = (1 - smooth(i)) / (1 / f - smooth(i));
    }
  }
  bool match = factor >= 1;
  for (size_t i = 0; match && i < divisors.size(); ++i) {
    const double w = wavelen(i);
    const double want = w < high_wavelen ? 1.0
                        : w > low_wavelen ? factor
                                          : 1 / ((1 - smooth(i)) / factor + smooth(i));
    match = std::abs(divisors[i] - want) <= 1e-3 * want;
  }
  if (!match) return std::nullopt;
  s.type = RopeScalingType::kLlama3;
  s.factor = static_cast<float>(factor);
  return s;
}

RopeScaling Llama3ScalingFromFreqs(const std::vector<float>& divisors, const ModelConfig& c,
                                   const std::string& source) {
  if (std::ranges::all_of(divisors, [](float f) { return f == 1.0f; })) return RopeScaling{};
  for (const auto [low, high] : {std::pair{1.0f, 4.0f}, std::pair{1.0f, 1.0f}})
    if (const std::optional<RopeScaling> s = Llama3Scaling(divisors, c, low, high)) return *s;
  Fail("{}: tensor 'rope_freqs.weight' does not match Llama 3 rope scaling (low_freq_factor 1, high_freq_factor 4 "
       "or 1, original context 8192); other rope scaling is not supported",
       source);
}

// Finds, shape-checks and decodes tensors, remembering which were used so leftovers can be
// reported.
class TensorLoader {
 public:
  TensorLoader(const GgufFile& file, const LoadOptions& options)
      : file_(file), source_(file.path().string()), options_(options) {}

  // Each tensor's mapped pages are dropped as it is copied out, slice by slice, so the peak is the loaded
  // model, not the model plus the file (a BF16 file peaked at 1.96x its size, an F32 one at 2x) nor plus
  // its largest tensor (an F32 file at 1.12x).
  std::vector<float> Vector(const std::string& name, uint64_t n) {
    const GgufTensorInfo& t = Get(name, {n});
    std::vector<float> v = Decode(t);
    ReleasePages(t.data);
    return v;
  }

  // A matrix the engine multiplies by: block types stay in their codes (gguf_repack.h), 16-bit
  // floats stay 16-bit with keep_16bit, other float types become dense fp32.
  Linear Weight(const std::string& name, uint64_t rows, uint64_t cols) {
    return WeightOf(Get(name, {cols, rows}), rows, cols);
  }

  Linear WeightOf(const GgufTensorInfo& t, uint64_t rows, uint64_t cols) {
    Linear l;
    std::optional<QuantizedTensor> q;
    try {
      q = RepackGgufMatrix(t, rows, cols, ReleasePages);
    } catch (const Error& e) {
      Fail("{}: {}", source_, e.what());
    }
    const bool sixteen = t.ggml_type == kGgmlBF16 || t.ggml_type == kGgmlF16;
    if (q && !options_.allow_nonfinite) CheckScalesFinite(*q, t.name, source_);
    if (q) l.weight = std::move(*q);
    else if (options_.keep_16bit && sixteen) l.weight = SixteenBit(t, rows, cols);
    else l.weight = DenseMatrix{rows, cols, Decode(t)};
    ReleasePages(t.data);
    return l;
  }

  // Consecutive row ranges of one matrix as separate linears (Phi-3's fused attn_qkv and ffn_up): each
  // range is a view of the tensor's rows, repacked on its own.
  std::vector<Linear> Weights(const std::string& name, const std::vector<uint64_t>& rows, uint64_t cols) {
    uint64_t total = 0;
    for (const uint64_t r : rows) total += r;
    return Split(Get(name, {cols, total}), rows, cols);
  }

  // A MoE layer's ffn_*_exps [cols, rows, experts] as one linear per expert.
  std::vector<Linear> Experts(const std::string& name, uint64_t experts, uint64_t rows, uint64_t cols) {
    return Split(Get(name, {cols, rows, experts}), std::vector<uint64_t>(experts, rows), cols);
  }

  // A MoE layer's experts' gate and up linears: ffn_gate_exps and ffn_up_exps, or one ffn_gate_up_exps [cols,
  // 2 rows, experts] with each expert's gate rows before its up rows (as llama.cpp's converter writes stacked
  // checkpoints, Mistral 4's, for deepseek2 and a few others, and llama.cpp splits it).
  std::pair<std::vector<Linear>, std::vector<Linear>> GateUpExperts(const std::string& prefix, uint64_t experts,
                                                                    uint64_t rows, uint64_t cols) {
    if (!file_.FindTensor(prefix + "ffn_gate_up_exps.weight"))
      return {Experts(prefix + "ffn_gate_exps.weight", experts, rows, cols),
              Experts(prefix + "ffn_up_exps.weight", experts, rows, cols)};
    std::vector<Linear> parts = Split(Get(prefix + "ffn_gate_up_exps.weight", {cols, 2 * rows, experts}),
                                      std::vector<uint64_t>(2 * experts, rows), cols);
    std::pair<std::vector<Linear>, std::vector<Linear>> out;
    for (uint64_t e = 0; e < experts; ++e) {
      out.first.push_back(std::move(parts[2 * e]));
      out.second.push_back(std::move(parts[2 * e + 1]));
    }
    return out;
  }

  // A full-precision matrix's values (MoE routers), shape-checked in ggml's ne order.
  std::vector<float> Values(const std::string& name, std::vector<uint64_t> ne) {
    const GgufTensorInfo& t = Get(name, std::move(ne));
    std::vector<float> v = Decode(t);
    ReleasePages(t.data);
    return v;
  }

  std::vector<Linear> Split(const GgufTensorInfo& t, const std::vector<uint64_t>& rows, uint64_t cols) {
    const std::string& name = t.name;
    uint64_t total = 0;
    for (const uint64_t r : rows) total += r;
    const uint64_t row_bytes = total ? t.data.size() / total : 0;
    if (row_bytes * total != t.data.size())
      Fail("{}: tensor '{}' holds {} bytes, not a whole number of its {} rows", source_, name, t.data.size(), total);
    std::vector<Linear> out;
    uint64_t first = 0;
    for (const uint64_t r : rows) {
      GgufTensorInfo part = t;
      part.dims = {cols, r};
      part.n_elements = cols * r;
      part.data = t.data.subspan(first * row_bytes, r * row_bytes);
      out.push_back(WeightOf(part, r, cols));
      first += r;
    }
    return out;
  }

  // The token embeddings in the file's type (Embedding::packed: 16-bit floats, or a block type
  // repacked as the linears are; each looked-up row is decoded alone), F32 as fp32.
  Embedding EmbeddingTable(const std::string& name, uint64_t rows, uint64_t cols) {
    const GgufTensorInfo& t = Get(name, {cols, rows});
    Embedding e;
    try {
      e.packed = RepackGgufMatrix(t, rows, cols, ReleasePages);
    } catch (const Error& error) {
      Fail("{}: {}", source_, error.what());
    }
    if (e.packed && !options_.allow_nonfinite) CheckScalesFinite(*e.packed, t.name, source_);
    if (!e.packed && (t.ggml_type == kGgmlBF16 || t.ggml_type == kGgmlF16)) e.packed = SixteenBit(t, rows, cols);
    if (!e.packed) e.values = Decode(t);
    ReleasePages(t.data);
    return e;
  }

  // Throws naming the first tensor of the file that no Vector/Matrix call asked for.
  void CheckAllUsed() const {
    for (const GgufTensorInfo& t : file_.tensors())
      if (!used_.count(t.name))
        Fail("{}: unexpected tensor '{}' for a {} model (not supported)", source_, t.name,
             file_.GetString("general.architecture"));
  }

  void MarkUsed(const std::string& name) { used_.insert(name); }

 private:
  const GgufTensorInfo& Get(const std::string& name, std::vector<uint64_t> ne) {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (!t) Fail("{}: missing tensor '{}'", source_, name);
    if (WithoutTrailingOnes(t->dims) != WithoutTrailingOnes(ne))
      Fail("{}: tensor '{}' has shape {} (ne order), expected {}", source_, name,
           DimsString(t->dims), DimsString(ne));
    used_.insert(name);
    return *t;
  }

  QuantizedTensor SixteenBit(const GgufTensorInfo& t, uint64_t rows, uint64_t cols) {
    if (t.data.size() != rows * cols * 2)
      Fail("{}: tensor '{}' holds {} bytes, expected {}", source_, t.name, t.data.size(), rows * cols * 2);
    return SixteenBitMatrix(t.data, t.ggml_type == kGgmlBF16, rows, cols, options_.allow_nonfinite, t.name, source_,
                            ReleasePages);
  }

  std::vector<float> Decode(const GgufTensorInfo& t) {
    std::vector<float> values;
    try {
      values = DequantizeGgufTensor(t, ReleasePages);
    } catch (const Error& e) {
      Fail("{}: {}", source_, e.what());
    }
    if (!options_.allow_nonfinite) CheckFinite(values, 0, t.name, source_);
    return values;
  }

  const GgufFile& file_;
  const std::string source_;
  const LoadOptions options_;
  std::set<std::string, std::less<>> used_;
};

int32_t TokenId(const GgufFile& f, std::string_view key, int32_t fallback) {
  const uint32_t id = f.GetU32Or(key, static_cast<uint32_t>(fallback));
  if (id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
    Fail("{}: key '{}' = {} is not a valid token id", f.path().string(), key, id);
  return static_cast<int32_t>(id);
}

// Which layers slide, as llama.cpp's load_swa_pattern reads key `pattern`: an array of booleans (or integers) per
// layer, or n, every n-th layer global (`n` when the key is absent; 0: every layer slides).
std::vector<uint8_t> SlidingLayers(const GgufFile& f, const std::string& pattern, uint32_t n_layers, uint32_t n) {
  std::vector<uint8_t> layers;
  if (const GgufValue* v = f.Find(pattern); v && std::holds_alternative<GgufArray>(*v)) {
    const GgufArray& a = f.GetArray(pattern);
    if (a.size() != n_layers)
      Fail("{}: key '{}' has {} entries for {} layers", f.path().string(), pattern, a.size(), n_layers);
    std::visit([&](const auto& values) {
      using Values = std::decay_t<decltype(values)>;
      if constexpr (std::is_same_v<Values, std::vector<bool>> || std::is_same_v<Values, std::vector<uint32_t>> ||
                    std::is_same_v<Values, std::vector<int32_t>>) {
        for (const auto slides : values) layers.push_back(slides != 0);
      } else {
        Fail("{}: key '{}' must be an array of booleans or integers", f.path().string(), pattern);
      }
    }, a.values);
  } else {
    n = f.GetU32Or(pattern, n);
    for (uint32_t i = 0; i < n_layers; ++i) layers.push_back(n == 0 || i % n < n - 1);
  }
  return layers;
}

// Gemma's hyperparameters as llama.cpp reads them, defaults included (models/gemma*.cpp): the file
// stores norms as the 1 + w they multiply by, and no query_pre_attn_scalar.
void ReadGemmaKeys(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string p = arch + ".";
  c.norm_plus_one = true;
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  c.activation = FfnActivation::kGeluTanh;
  c.sandwich_norms = arch != "gemma";
  if (arch == "gemma") return;
  const bool gemma2 = arch == "gemma2";
  if (gemma2) c.attn_softcap = f.GetF32Or(p + "attn_logit_softcapping", 50.0f);
  c.final_softcap = f.GetF32Or(p + "final_logit_softcapping", gemma2 ? 30.0f : 0.0f);
  c.query_scale = LlamaCppGemmaAttentionScale(arch, c);
  c.sliding_window = f.GetU32Or(p + "attention.sliding_window", gemma2 ? 4096 : 0);
  if (c.sliding_window == 0) return;
  if (!gemma2) c.local_rope_theta = f.GetF32Or(p + "rope.freq_base_swa", 10000.0f);
  c.sliding_layers = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, gemma2 ? 2 : 6);
}

// granite and granitemoe (models/granite.cpp, granite-moe.cpp): logits divided by logit_scale (required);
// residual_scale, embedding_scale and attention.scale optional, absent or 0 meaning none (the attention scale then
// 1 / sqrt(head size)).
void ReadGraniteKeys(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const auto scale = [&](const std::string& key, bool required) {
    const float v = required ? f.GetF32(arch + key) : f.GetF32Or(arch + key, 0.0f);
    if (v < 0 || (required && v == 0) || !std::isfinite(v))
      Fail("{}: key '{}{}' ({}) must be positive", f.path().string(), arch, key, v);
    return v;
  };
  c.logit_scale = scale(".logit_scale", true);
  if (const float v = scale(".residual_scale", false); v > 0) c.residual_scale = v;
  if (const float v = scale(".embedding_scale", false); v > 0) c.embed_scale = v;
  if (const float v = scale(".attention.scale", false); v > 0) c.query_scale = v;
}

// command-r and cohere2 (models/command-r.cpp, cohere2.cpp): LayerNorm without a bias, attention and MLP in
// parallel on one input norm, logits times logit_scale (command-r: absent or 0 meaning none), token_embd always
// the output matrix; command-r's q/k norms per head, each with its own weights (Command R+); cohere2's sliding
// layers (a pattern of 4 by default), the only ones with RoPE, at rope.freq_base_swa where given.
void ReadCohereKeys(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string p = arch + ".", source = f.path().string();
  const bool cohere2 = arch == "cohere2";
  c.norm = NormKind::kLayer;
  c.norm_eps = f.GetF32(p + "attention.layer_norm_epsilon");
  c.parallel_block = true;
  c.tie_embeddings = true;  // an output.weight is left unread, and reported so
  const float scale = cohere2 ? f.GetF32(p + "logit_scale") : f.GetF32Or(p + "logit_scale", 0.0f);
  if (scale < 0 || !std::isfinite(scale) || (cohere2 && scale == 0))
    Fail("{}: key '{}logit_scale' ({}) must be positive", source, p, scale);
  if (scale > 0) c.logit_multiplier = scale;
  c.qk_norm = c.qk_norm_per_head = f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  if (!cohere2) return;
  c.sliding_window = f.GetU32(p + "attention.sliding_window");
  if (c.sliding_window == 0) Fail("{}: key '{}attention.sliding_window' must be positive", source, p);
  c.sliding_layers = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, 4);
  c.rope_theta = f.GetF32Or(p + "rope.freq_base_swa", c.rope_theta);  // only the sliding layers rotate
  c.nope_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = !c.sliding(i);
}

// Phi-3's longrope as the converter stores it: per-frequency divisors in rope_factors_long/short, the
// attention factor and the original context as keys. llama.cpp picks the long factors for contexts past
// the original one, as lowbit does by KV cache capacity. The sliding window applies as in transformers
// (llama.cpp currently ignores Phi-3's window).
void ReadPhi3Keys(const GgufFile& f, ModelConfig& c) {
  const std::string source = f.path().string();
  const GgufTensorInfo* longer = f.FindTensor("rope_factors_long.weight");
  const GgufTensorInfo* shorter = f.FindTensor("rope_factors_short.weight");
  c.sliding_window = f.GetU32Or("phi3.attention.sliding_window", 0);
  if (!longer && !shorter) return;
  if (!longer || !shorter) Fail("{}: phi3 rope factors need both rope_factors_long and rope_factors_short", source);
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScalingType::kLongRope;
  s.original_max_position = f.GetU32Or("phi3.rope.scaling.original_context_length", c.max_position);
  if (s.original_max_position == 0) Fail("{}: key 'phi3.rope.scaling.original_context_length' must be positive", source);
  s.factor = static_cast<float>(c.max_position) / static_cast<float>(s.original_max_position);
  s.attention_factor = f.GetF32Or("phi3.rope.scaling.attn_factor", 1.0f);
  for (const auto& [t, out] : {std::pair{longer, &s.long_factor}, std::pair{shorter, &s.short_factor}}) {
    if (WithoutTrailingOnes(t->dims) != std::vector<uint64_t>{c.rope_dims() / 2})
      Fail("{}: tensor '{}' has shape {} (ne order), expected [{}]", source, t->name, DimsString(t->dims),
           c.rope_dims() / 2);
    try {
      *out = DequantizeGgufTensor(*t);
    } catch (const Error& e) {
      Fail("{}: {}", source, e.what());
    }
    for (const float v : *out)
      if (!(v > 0 && std::isfinite(v))) Fail("{}: tensor '{}' holds a factor that is not positive: {}", source, t->name, v);
  }
}

// Mixtures of experts as llama.cpp reads them (models/llama.cpp, qwen2moe.cpp, qwen3moe.cpp): experts in
// every layer, of expert_feed_forward_length (llama: feed_forward_length; qwen: n_ff / n_expert_used when
// absent), weights renormalized in llama and qwen3moe, and qwen2moe's shared expert of
// expert_shared_feed_forward_length (n_ff when absent).
void ReadExpertKeys(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string p = arch + ".", source = f.path().string();
  c.n_experts = f.GetU32Or(p + "expert_count", 0);
  if (c.n_experts == 0) {
    if (arch != "llama") Fail("{}: key '{}expert_count' must be positive for {}", source, p, arch);
    return;
  }
  c.experts_per_token = f.GetU32(p + "expert_used_count");
  if (c.experts_per_token == 0) Fail("{}: key '{}expert_used_count' must be positive", source, p);
  // granitemoe's, hunyuan-moe's and olmoe's experts are feed_forward_length wide too, their shared experts ungated
  const bool hunyuan = arch == "hunyuan-moe";
  c.expert_ffn_dim = arch == "llama" || arch == "granitemoe" || hunyuan || arch == "olmoe"
                         ? c.ffn_dim
                         : f.GetU32Or(p + "expert_feed_forward_length", c.ffn_dim / c.experts_per_token);
  c.norm_expert_weights = arch != "qwen2moe" && arch != "olmoe";  // (models/olmoe.cpp never renormalizes)
  if (arch == "qwen2moe" || hunyuan)
    c.shared_expert_ffn_dim = f.GetU32Or(p + "expert_shared_feed_forward_length", c.ffn_dim);
  if (hunyuan) c.shared_expert_gated = false;
  if (arch == "granitemoe") {
    c.shared_expert_ffn_dim = f.GetU32Or(p + "expert_shared_feed_forward_length", 0);
    c.shared_expert_gated = false;
  }
  if (arch != "ernie4_5-moe") return;
  // models/ernie4-5-moe.cpp: experts in the layers from leading_dense_block_count on, every
  // interleave_moe_layer_step-th; an ungated shared expert of expert_shared_feed_forward_length; exp_probs_b
  // (where present) biases the softmax scores that choose
  c.shared_expert_ffn_dim = f.GetU32Or(p + "expert_shared_feed_forward_length", 0);
  c.shared_expert_gated = false;
  const uint32_t lead = f.GetU32Or(p + "leading_dense_block_count", 0), step = f.GetU32(p + "interleave_moe_layer_step");
  if (step == 0) Fail("{}: key '{}interleave_moe_layer_step' must be positive", source, p);
  c.sparse_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = i >= lead && (i + 1) % step == 0;
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
  const uint32_t first = lead + (step - (lead + 1) % step) % step;  // the first sparse layer
  c.router_bias = first < c.n_layers && f.FindTensor(fmt::format("blk.{}.exp_probs_b.bias", first)) != nullptr;
  if (const float scale = f.GetF32Or(p + "expert_weights_scale", 0.0f); scale != 0) c.routed_scale = scale;
}

// YaRN's keys as llama.cpp reads them (llama-model.cpp, llama-context.cpp): the ramp always truncated to whole
// dimensions, the attention factor 0.1 ln(factor) + 1, or, where the architecture reads yarn_log_multiplier L != 0,
// that over 0.1 L ln(factor) + 1 (transformers' mscale 1 over mscale_all_dim L), times rope.scaling.attn_factor.
void ReadYarnKeys(const GgufFile& f, ModelConfig& c, bool reads_log_multiplier) {
  if (c.rope_scaling.type != RopeScalingType::kYarn) return;
  const std::string p = c.architecture.substr(std::string_view("gguf:").size()) + ".";
  RopeScaling& s = c.rope_scaling;
  s.original_max_position = f.GetU32Or(p + "rope.scaling.original_context_length", c.max_position);
  s.beta_fast = f.GetF32Or(p + "rope.scaling.yarn_beta_fast", 32.0f);
  s.beta_slow = f.GetF32Or(p + "rope.scaling.yarn_beta_slow", 1.0f);
  s.truncate = true;
  const float log_multiplier = reads_log_multiplier ? f.GetF32Or(p + "rope.scaling.yarn_log_multiplier", 0.0f) : 0.0f;
  const double all_dims = log_multiplier != 0 ? YarnMscale(s.factor, log_multiplier) : 1.0;
  if (!(all_dims > 0))
    Fail("{}: key '{}rope.scaling.yarn_log_multiplier' ({}) gives no positive attention factor", f.path().string(), p,
         log_multiplier);
  s.attention_factor =
      static_cast<float>(YarnMscale(s.factor, 1.0) / all_dims * f.GetF32Or(p + "rope.scaling.attn_factor", 1.0f));
}

// gpt-oss as llama.cpp runs it (models/openai-moe.cpp): biased experts with the clamped SwiGLU at llama.cpp's
// alpha 1.702 and limit 7 (it reads no key for them), the biased router's softmax over its top-k, attention sinks,
// the even layers sliding (pattern 2), and YaRN with the ramp truncated, as ggml computes it.
void ReadGptOssKeys(const GgufFile& f, ModelConfig& c) {
  const std::string p = "gpt-oss.", source = f.path().string();
  c.n_experts = f.GetU32(p + "expert_count");
  c.experts_per_token = f.GetU32(p + "expert_used_count");
  if (c.n_experts == 0 || c.experts_per_token == 0)
    Fail("{}: keys '{}expert_count' and '{}expert_used_count' must be positive", source, p, p);
  c.expert_ffn_dim = f.GetU32(p + "expert_feed_forward_length");
  c.norm_expert_weights = true;
  c.router_logit_bias = c.expert_bias = c.attention_sinks = true;
  c.activation = FfnActivation::kSwigluClamped;
  c.swiglu_alpha = 1.702f;
  c.swiglu_limit = 7.0f;
  c.sliding_window = f.GetU32(p + "attention.sliding_window");
  c.sliding_layers = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, 2);
  ReadYarnKeys(f, c, false);
}

// mistral3 as llama.cpp runs it (models/mistral3.cpp): llama with YaRN, whose attention factor comes from
// yarn_log_multiplier (transformers' mscale_all_dim, mscale taken as 1), and each query scaled after RoPE by
// 1 + temperature_scale * log(1 + floor(position / YaRN's original context)) (Ministral 3's llama_4_scaling_beta).
void ReadMistral3Keys(const GgufFile& f, ModelConfig& c) {
  const std::string p = "mistral3.";
  ReadYarnKeys(f, c, true);
  if (const float beta = f.GetF32Or(p + "attention.temperature_scale", 0.0f); beta != 0) {
    c.attn_temperature_scale = beta;
    c.attn_temperature_floor = f.GetU32Or(p + "rope.scaling.original_context_length", c.max_position);
    c.attn_temperature_every_layer = true;
    if (c.attn_temperature_floor == 0)
      Fail("{}: key '{}rope.scaling.original_context_length' must be positive: the query temperature's floor",
           f.path().string(), p);
  }
}

// llama4 as llama.cpp runs it (models/llama4.cpp): expert_count experts of expert_feed_forward_length, and a shared
// expert as wide, in every interleave_moe_layer_step-th layer, each token's best by router logit weighted by its
// sigmoid on the expert's input; dense layers of feed_forward_length; q and k heads RMS-normed after RoPE unless the
// model has 128 experts (Maverick). With a sliding_window key of 0 no layer is chunked and every layer but the
// last takes RoPE (n_no_rope_layer_step = n_layer there); otherwise every fourth layer takes none and has its
// query's temperature tuned (floor 8192, scale 0.1: constants), and the others (sliding_window_pattern, 4 by
// default) attend in chunks of 8192 positions, whatever the key says.
void ReadLlama4Keys(const GgufFile& f, ModelConfig& c) {
  const std::string p = "llama4.", source = f.path().string();
  c.n_experts = f.GetU32(p + "expert_count");
  c.experts_per_token = f.GetU32(p + "expert_used_count");
  if (c.n_experts == 0 || c.experts_per_token == 0)
    Fail("{}: keys '{}expert_count' and '{}expert_used_count' must be positive (llama.cpp's llama4 has experts)",
         source, p, p);
  c.expert_ffn_dim = c.shared_expert_ffn_dim = f.GetU32(p + "expert_feed_forward_length");
  c.shared_expert_gated = false;
  c.router_scoring = RouterScoring::kSigmoid;
  c.expert_weight_on_input = true;
  const uint32_t step = f.GetU32(p + "interleave_moe_layer_step");
  if (step == 0) Fail("{}: key '{}interleave_moe_layer_step' must be positive", source, p);
  c.sparse_layers.assign(c.n_layers, 0);
  for (uint32_t i = 0; i < c.n_layers; ++i) c.sparse_layers[i] = (i + 1) % step == 0;
  if (std::ranges::all_of(c.sparse_layers, [](uint8_t s) { return s != 0; })) c.sparse_layers.clear();
  c.qk_norm_unweighted = c.n_experts != 128;
  c.nope_layers.assign(c.n_layers, 0);
  if (f.Find(p + "attention.sliding_window") && f.GetU32(p + "attention.sliding_window") == 0) {
    c.nope_layers.back() = 1;
    return;
  }
  constexpr uint32_t kChunk = 8192, kNopeStep = 4;
  for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = (i + 1) % kNopeStep == 0;
  const std::vector<uint8_t> chunked = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, kNopeStep);
  for (uint32_t i = 0; i < c.n_layers; ++i)
    if ((chunked[i] != 0) != (c.nope_layers[i] == 0))
      Fail("{}: key '{}attention.sliding_window_pattern' makes layer {} {}chunked, but llama.cpp's llama4 takes RoPE "
           "in {}: lowbit chunks exactly the RoPE layers", source, p, i, chunked[i] ? "" : "not ", i);
  if (f.GetF32Or(p + "rope.freq_base_swa", c.rope_theta) != c.rope_theta)
    Fail("{}: key '{}rope.freq_base_swa' differs from '{}rope.freq_base': not supported", source, p, p);
  c.attention_chunk = kChunk;
  c.attn_temperature_floor = kChunk;
  c.attn_temperature_scale = 0.1f;
}

// A deepseek2 block's latent attention (gguf_deepseek.h): kv_b_proj from the split attn_k_b / attn_v_b in fp32
// (the engine widens it to fp32 anyway), or an older file's unsplit attn_kv_b in its own type.
void LoadLatentAttention(const GgufFile& f, TensorLoader& t, const ModelConfig& c, const std::string& p,
                         LayerWeights& l) {
  const uint64_t heads = c.n_heads, q_rows = heads * c.qk_head_dim();
  if (c.q_lora_rank > 0) {
    l.wq_a = t.Weight(p + "attn_q_a.weight", c.q_lora_rank, c.dim);
    l.q_a_norm = t.Vector(p + "attn_q_a_norm.weight", c.q_lora_rank);
    l.wq = t.Weight(p + "attn_q_b.weight", q_rows, c.q_lora_rank);
  } else {
    l.wq = t.Weight(p + "attn_q.weight", q_rows, c.dim);
  }
  l.wkv_a = t.Weight(p + "attn_kv_a_mqa.weight", c.head_dim, c.dim);
  l.kv_a_norm = t.Vector(p + "attn_kv_a_norm.weight", c.kv_lora_rank);
  if (f.FindTensor(p + "attn_kv_b.weight")) {
    l.wkv_b = t.Weight(p + "attn_kv_b.weight", heads * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank);
    return;
  }
  l.wkv_b.weight = LatentKvFromGguf(c, t.Values(p + "attn_k_b.weight", {c.qk_nope_dim, c.kv_lora_rank, heads}),
                                    t.Values(p + "attn_v_b.weight", {c.kv_lora_rank, c.v_head_dim, heads}));
}

}  // namespace

ErnieMoeLayers ErnieMoeLayout(const ModelConfig& c) {
  std::vector<uint32_t> sparse;
  for (uint32_t i = 0; i < c.n_layers && sparse.size() < 2; ++i)
    if (c.moe(i)) sparse.push_back(i);
  return {sparse.empty() ? c.n_layers : sparse[0], sparse.size() < 2 ? 1 : sparse[1] - sparse[0]};
}

bool GgufFusesGateUp(std::string_view arch) { return arch == "phi3" || arch == "glm4" || arch == "chatglm"; }

bool RunsGgufArchitecture(std::string_view arch) {
  return std::find(std::begin(kGgufArchitectures), std::end(kGgufArchitectures), arch) != std::end(kGgufArchitectures);
}

const char* GgufFfnNormName(std::string_view arch) {
  return arch == "gpt-oss" || arch == "glm4moe" || arch == "seed_oss" ? "post_attention_norm.weight" : "ffn_norm.weight";
}

float LlamaCppGemmaAttentionScale(std::string_view arch, const ModelConfig& c) {
  const bool wide = (arch == "gemma2" && c.n_layers == 46) || (arch == "gemma3" && c.n_layers == 62);
  return 1.0f / std::sqrt(static_cast<float>(wide ? c.dim / c.n_heads : c.head_dim));
}

ModelConfig ReadGgufConfig(const GgufFile& f) {
  const std::string source = f.path().string();
  const std::string& arch = f.GetString("general.architecture");
  const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
  const bool qwen_moe = arch == "qwen2moe" || arch == "qwen3moe" || arch == "qwen3vlmoe",
             deepseek = arch == "deepseek2" || arch == "mistral4",  // (mistral4: Mistral 4, loaded as deepseek2)
             gpt_oss = arch == "gpt-oss", granite = arch == "granite" || arch == "granitemoe",
             smollm3 = arch == "smollm3",
             olmo2 = arch == "olmo2", ernie = arch == "ernie4_5" || arch == "ernie4_5-moe", glm = arch == "glm4" || arch == "chatglm",
             cohere = arch == "command-r" || arch == "cohere2", glm4moe = arch == "glm4moe",
             exaone4 = arch == "exaone4", llama4 = arch == "llama4";
  if (!RunsGgufArchitecture(arch))
    Fail("{}: unsupported general.architecture '{}' (supported: {})", source, arch, fmt::join(kGgufArchitectures, ", "));
  const std::string p = arch + ".";  // the hyperparameter keys' prefix
  // (llama.cpp's hunyuan-dense reads an expert_count of 1 as none)
  if (f.GetU32Or(p + "expert_count", 0) > (arch == "hunyuan-dense" ? 1 : 0) && arch != "llama" && !qwen_moe &&
      !deepseek && !gpt_oss && !glm4moe && arch != "ernie4_5-moe" && !llama4 && arch != "granitemoe" &&
      arch != "hunyuan-moe" && arch != "minimax-m2" && arch != "olmoe")
    Fail("{}: mixture-of-experts {} models ({}expert_count) are not supported", source, arch, p);
  // llama.cpp reads an absent type as linear, and a factor of 0 or 1 as none.
  const std::string scaling = f.Find(p + "rope.scaling.type") ? f.GetString(p + "rope.scaling.type") : "none";
  const float scaling_factor = f.GetF32Or(p + "rope.scaling.factor", 0.0f);
  const bool linear_scaling = (scaling == "linear" || !f.Find(p + "rope.scaling.type")) && scaling_factor != 0 &&
                              scaling_factor != 1;
  const bool yarn = (deepseek || gpt_oss || arch == "mistral3") && scaling == "yarn";
  if (scaling != "none" && !(scaling == "linear" && (arch == "gemma3" || !linear_scaling)) && !yarn)
    Fail("{}: {}rope.scaling.type '{}' is not supported (only 'none', Llama 3 scaling through rope_freqs.weight, "
         "gemma3's linear scaling, deepseek2's, gpt-oss's and mistral3's yarn)",
         source, p, scaling);

  ModelConfig c;
  c.architecture = "gguf:" + arch;
  // llama and mistral3: Q/K rows stay as llama.cpp's converter permuted them (adjacent pairs); qwen2 and qwen3
  // are converted without the permutation and run NEOX (rotate-half) RoPE in llama.cpp.
  // glm4, chatglm, command-r, cohere2 and llama4: NORM RoPE on their checkpoints' own (adjacent) rows, as ernie4_5.
  const bool adjacent = arch == "llama" || arch == "mistral3" || granite || smollm3 || ernie || glm || cohere || llama4;
  c.rope_style = adjacent ? RopeStyle::kAdjacent : RopeStyle::kHalf;
  if (linear_scaling || yarn) {
    c.rope_scaling.type = yarn ? RopeScalingType::kYarn : RopeScalingType::kLinear;
    c.rope_scaling.factor = yarn && scaling_factor == 0 ? 1 : scaling_factor;
  }
  c.dim = f.GetU32(p + "embedding_length");
  c.n_layers = f.GetU32(p + "block_count");
  // glm4moe and deepseek2 (GLM-4.7-Flash): the multi-token-prediction blocks counted in block_count, after the last
  // (not run, as llama.cpp by default and transformers do not run them)
  if (glm4moe || deepseek) {
    c.nextn_layers = f.GetU32Or(p + "nextn_predict_layers", 0);
    if (c.nextn_layers >= c.n_layers)
      Fail("{}: key '{}nextn_predict_layers' ({}) leaves no layers of the {} blocks", source, p, c.nextn_layers,
           c.n_layers);
    c.n_layers -= c.nextn_layers;
  }
  c.ffn_dim = f.GetU32(p + "feed_forward_length");
  c.n_heads = f.GetU32(p + "attention.head_count");
  if (c.n_heads == 0) Fail("{}: key '{}attention.head_count' must be positive", source, p);
  c.n_kv_heads = f.GetU32Or(p + "attention.head_count_kv", c.n_heads);
  // llama.cpp: head size = key_length, defaulting to n_embd / n_head; the rotary dimension count
  // (n_rot) defaults to it and may be smaller (partial rotary).
  c.head_dim = f.GetU32Or(p + "attention.key_length", c.dim / c.n_heads);
  if (!deepseek && f.GetU32Or(p + "attention.value_length", c.head_dim) != c.head_dim)
    Fail("{}: key '{}attention.value_length' ({}) differs from the key head size {}; not supported",
         source, p, f.GetU32(p + "attention.value_length"), c.head_dim);
  if (const uint32_t rot = f.GetU32Or(p + "rope.dimension_count", c.head_dim); rot != c.head_dim) {
    if (rot == 0 || rot > c.head_dim || rot % 2 != 0)
      Fail("{}: key '{}rope.dimension_count' ({}) must be even and at most the head size {}", source, p, rot,
           c.head_dim);
    c.rotary_dim = rot;  // partial rotary embeddings (Phi-4-mini)
  }
  c.max_position = f.GetU32Or(p + "context_length", c.max_position);
  c.rope_theta = f.GetF32Or(p + "rope.freq_base", 10000.0f);
  if (!cohere) c.norm_eps = f.GetF32(p + "attention.layer_norm_rms_epsilon");  // (LayerNorm's: ReadCohereKeys)
  c.bos_id = TokenId(f, "tokenizer.ggml.bos_token_id", 1);  // SPM defaults (formats.md 2.5)
  c.eos_id = TokenId(f, "tokenizer.ggml.eos_token_id", 2);

  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (!embd) Fail("{}: missing tensor 'token_embd.weight'", source);
  const std::vector<uint64_t>& ne = embd->dims;
  if (ne.size() < 2 || ne[0] != c.dim || ne[1] > std::numeric_limits<uint32_t>::max() ||
      (ne.size() > 2 && WithoutTrailingOnes(ne).size() > 2))
    Fail("{}: tensor 'token_embd.weight' has shape {} (ne order), expected [{}, n_vocab]", source,
         DimsString(embd->dims), c.dim);
  c.vocab_size = static_cast<uint32_t>(embd->dims[1]);
  if (f.GetU32Or(p + "vocab_size", c.vocab_size) != c.vocab_size)
    Fail("{}: key '{}vocab_size' ({}) differs from token_embd.weight's {} rows", source, p,
         f.GetU32(p + "vocab_size"), c.vocab_size);
  if (f.Find("tokenizer.ggml.tokens")) {
    const size_t n_tokens = f.GetArray("tokenizer.ggml.tokens").size();
    if (n_tokens != c.vocab_size)
      Fail("{}: key 'tokenizer.ggml.tokens' has {} entries but token_embd.weight has {} rows", source,
           n_tokens, c.vocab_size);
  }
  c.tie_embeddings = f.FindTensor("output.weight") == nullptr;  // (command-r, cohere2: ReadCohereKeys)
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr || f.FindTensor("blk.0.attn_qkv.bias") != nullptr;
  c.o_bias = f.FindTensor("blk.0.attn_output.bias") != nullptr;
  // qwen2vl, qwen3vl and qwen3vlmoe (Qwen2-VL / 2.5-VL, Qwen3-VL): qwen2, qwen3 and qwen3moe whose multimodal RoPE
  // (rope.dimension_sections) is NEOX RoPE on text, where every section takes the same position; Qwen3-VL's
  // DeepStack inputs are zero there.
  if ((arch == "qwen2" || arch == "qwen2vl") && !c.qkv_bias)
    Fail("{}: a {} model without 'blk.0.attn_q.bias'", source, arch);
  // kept, with Qwen3-VL's DeepStack depth, so the file goes out again as what it is
  if ((arch == "qwen2vl" || arch == "qwen3vl" || arch == "qwen3vlmoe") && f.Find(p + "rope.dimension_sections")) {
    c.deepstack_layers = f.GetU32Or(p + "n_deepstack_layers", 0);
    uint32_t pairs = 0;
    for (const int32_t s : f.GetArrayOf<int32_t>(p + "rope.dimension_sections")) {
      if (s < 0) Fail("{}: key '{}rope.dimension_sections' has a negative section", source, p);
      if (s > 0) c.mrope_sections.push_back(static_cast<uint32_t>(s));
      pairs += static_cast<uint32_t>(s);
    }
    if (pairs * 2 != c.head_dim)
      Fail("{}: key '{}rope.dimension_sections' covers {} rotary pairs; the heads have {}", source, p, pairs,
           c.head_dim / 2);
  }
  c.qk_norm = arch == "qwen3" || arch == "qwen3vl" || arch == "qwen3moe" || arch == "qwen3vlmoe" || arch == "gemma3" ||
              olmo2;
  if (arch == "olmoe") c.qk_norm = c.qk_norm_full = true;  // models/olmoe.cpp: q and k normed whole, pre-norms
  if (olmo2) {  // models/olmo2.cpp: norms on the attention and MLP outputs only, q and k normed whole
    c.pre_norms = false;
    c.sandwich_norms = c.qk_norm_full = true;
    // OLMo 3: sliding layers (every fourth full by default), at rope.freq_base_swa where given
    if ((c.sliding_window = f.GetU32Or(p + "attention.sliding_window", 0)) > 0) {
      c.sliding_layers = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, 4);
      if (const float swa = f.GetF32Or(p + "rope.freq_base_swa", c.rope_theta); swa != c.rope_theta)
        c.local_rope_theta = swa;
    }
  }
  if (arch == "glm4") {  // models/glm4.cpp: Gemma 2's four norms, RMS without (1 + w)
    if (f.Find(p + "rope.dimension_sections"))
      Fail("{}: key '{}rope.dimension_sections': GLM-4V's multimodal RoPE is not supported", source, p);
    c.sandwich_norms = true;
  }
  if (cohere) ReadCohereKeys(f, arch, c);
  if (arch == "hunyuan-dense" || arch == "hunyuan-moe") {
    // models/hunyuan-vl.cpp, hunyuan-moe.cpp: per-head q/k norms after NEOX RoPE, an optional NTK alpha
    c.qk_norm = c.qk_norm_after_rope = true;
    if (const float alpha = f.GetF32Or(p + "rope.scaling.alpha", 0.0f); alpha > 0)
      c.rope_theta = static_cast<float>(NtkAlphaRopeBase(c.rope_theta, alpha, c.head_dim));
  }
  if (exaone4) {  // models/exaone4.cpp: OLMo 2's output norms, per-head q/k norms; a window in 64-layer models only,
                  // 4096 by default, a pattern of 4, RoPE on the sliding layers alone
    c.pre_norms = false;
    c.sandwich_norms = c.qk_norm = true;
    if (c.n_layers == 64) {
      c.sliding_window = f.GetU32Or(p + "attention.sliding_window", 4096);
      if (c.sliding_window == 0) Fail("{}: key '{}attention.sliding_window' must be positive", source, p);
      c.sliding_layers = SlidingLayers(f, p + "attention.sliding_window_pattern", c.n_layers, 4);
      c.rope_theta = f.GetF32Or(p + "rope.freq_base_swa", c.rope_theta);  // only the sliding layers rotate
      c.nope_layers.assign(c.n_layers, 0);
      for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = !c.sliding(i);
    }
  }
  if (glm4moe) {  // models/glm4-moe.cpp: DeepSeek-V3's routing without groups, per-head q/k norms where present
    if (f.Find(p + "rope.dimension_sections"))
      Fail("{}: key '{}rope.dimension_sections': GLM-4.5V's multimodal RoPE is not supported", source, p);
    c.qk_norm = f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
    ReadDeepSeekRoutingKeys(f, arch, RouterScoring::kSigmoid, c);
    if (c.n_experts == 0) Fail("{}: key '{}expert_count' must be positive", source, p);
  }
  if (gemma) ReadGemmaKeys(f, arch, c);
  if (arch == "llama" || qwen_moe || arch == "ernie4_5-moe" || arch == "granitemoe" || arch == "hunyuan-moe" ||
      arch == "minimax-m2" || arch == "olmoe")
    ReadExpertKeys(f, arch, c);
  if (arch == "minimax-m2") {  // models/minimax-m2.cpp: q/k normed whole, exp_probs_b required, the file's gating
    if (!f.Find(p + "expert_gating_func"))
      Fail("{}: missing key '{}expert_gating_func' (llama.cpp's minimax-m2 has no default)", source, p);
    c.qk_norm = c.qk_norm_full = true;
    c.router_bias = true;
    c.router_scoring = ReadGatingFunc(f, arch, RouterScoring::kSigmoid);
  }
  if (arch == "phi3") ReadPhi3Keys(f, c);
  if (deepseek) ReadDeepSeek2Keys(f, c, arch);
  if (gpt_oss) ReadGptOssKeys(f, c);
  if (llama4) ReadLlama4Keys(f, c);
  if (arch == "mistral3") ReadMistral3Keys(f, c);
  if (granite) ReadGraniteKeys(f, arch, c);
  if (smollm3) {  // models/smollm3.cpp: every fourth layer without RoPE, a constant (no key)
    c.nope_layers.assign(c.n_layers, 0);
    for (uint32_t i = 0; i < c.n_layers; ++i) c.nope_layers[i] = (i + 1) % kSmolLM3NopeStep == 0;
  }
  c.Validate(source);

  if (const GgufTensorInfo* freqs = f.FindTensor("rope_freqs.weight")) {
    if (WithoutTrailingOnes(freqs->dims) != std::vector<uint64_t>{c.head_dim / 2})
      Fail("{}: tensor 'rope_freqs.weight' has shape {} (ne order), expected [{}]", source,
           DimsString(freqs->dims), c.head_dim / 2);
    std::vector<float> divisors;
    try {
      divisors = DequantizeGgufTensor(*freqs);
    } catch (const Error& e) {
      Fail("{}: {}", source, e.what());
    }
    c.rope_scaling = Llama3ScalingFromFreqs(divisors, c, source);
  }
  return c;
}

Model LoadGgufModel(const std::filesystem::path& path, const LoadOptions& options) {
  const GgufFile f = GgufFile::Open(path);
  Model m;
  m.source = path.string();
  m.config = ReadGgufConfig(f);
  const ModelConfig& c = m.config;
  ModelWeights& w = m.weights;
  TensorLoader t(f, options);
  for (const char* read_by_config : {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"})
    if (f.FindTensor(read_by_config)) t.MarkUsed(read_by_config);
  for (const GgufTensorInfo& info : f.tensors())  // the multi-token-prediction blocks, not run
    for (uint32_t k = 0; k < c.nextn_layers; ++k)
      if (info.name.starts_with(fmt::format("blk.{}.", c.n_layers + k))) t.MarkUsed(info.name);

  w.embed = t.EmbeddingTable("token_embd.weight", c.vocab_size, c.dim);
  // No reserve(n_layers): the count comes from the file, and a hostile one would allocate before
  // the first missing tensor is reported.
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights l = EmptyLayer(c, i);
    if (c.pre_norms) l.attn_norm = t.Vector(p + "attn_norm.weight", c.dim);
    if (c.mla()) {
      LoadLatentAttention(f, t, c, p, l);
    } else if (f.FindTensor(p + "attn_qkv.weight")) {  // Phi-3, ChatGLM: q, k and v rows in one matrix
      std::vector<Linear> qkv = t.Weights(p + "attn_qkv.weight", {c.q_dim(), c.kv_dim(), c.kv_dim()}, c.dim);
      l.wq = std::move(qkv[0]);
      l.wk = std::move(qkv[1]);
      l.wv = std::move(qkv[2]);
      if (c.qkv_bias) {
        const std::vector<float> b = t.Vector(p + "attn_qkv.bias", uint64_t{c.q_dim()} + 2 * c.kv_dim());
        const auto part = [&](uint64_t begin, uint64_t n) {
          return std::vector<float>(b.begin() + static_cast<ptrdiff_t>(begin), b.begin() + static_cast<ptrdiff_t>(begin + n));
        };
        l.wq.bias = part(0, c.q_dim());
        l.wk.bias = part(c.q_dim(), c.kv_dim());
        l.wv.bias = part(uint64_t{c.q_dim()} + c.kv_dim(), c.kv_dim());
      }
    } else {
      l.wq = t.Weight(p + "attn_q.weight", c.q_dim(), c.dim);
      l.wk = t.Weight(p + "attn_k.weight", c.kv_dim(), c.dim);
      l.wv = t.Weight(p + "attn_v.weight", c.kv_dim(), c.dim);
    }
    if (c.qkv_bias && l.wq.bias.empty()) {
      l.wq.bias = t.Vector(p + "attn_q.bias", c.q_dim());
      l.wk.bias = t.Vector(p + "attn_k.bias", c.kv_dim());
      l.wv.bias = t.Vector(p + "attn_v.bias", c.kv_dim());
    }
    if (c.qk_norm_per_head) {  // ne [head_dim, heads]
      l.q_norm = t.Values(p + "attn_q_norm.weight", {c.head_dim, c.n_heads});
      l.k_norm = t.Values(p + "attn_k_norm.weight", {c.head_dim, c.n_kv_heads});
    } else if (c.qk_norm) {
      l.q_norm = t.Vector(p + "attn_q_norm.weight", c.q_norm_dim());
      l.k_norm = t.Vector(p + "attn_k_norm.weight", c.k_norm_dim());
    }
    l.wo = t.Weight(p + "attn_output.weight", c.dim, c.attn_out_dim());
    if (c.o_bias) l.wo.bias = t.Vector(p + "attn_output.bias", c.dim);
    if (c.attention_sinks) l.attn_sinks = t.Vector(p + "attn_sinks.weight", c.n_heads);
    if (c.sandwich_norms) {
      l.attn_out_norm = t.Vector(p + "post_attention_norm.weight", c.dim);
      l.ffn_out_norm = t.Vector(p + "post_ffw_norm.weight", c.dim);
    }
    // gpt-oss names the MLP's input norm post_attention_norm (not a sandwich norm there).
    if (c.pre_norms && !c.parallel_block)
      l.ffn_norm = t.Vector(p + GgufFfnNormName(std::string_view(c.architecture).substr(5)), c.dim);  // "gguf:"
    if (c.moe(i)) {
      l.router = t.Values(p + "ffn_gate_inp.weight", {c.dim, c.n_experts});
      if (c.router_bias) l.router_bias = t.Vector(p + "exp_probs_b.bias", c.n_experts);
      if (c.router_logit_bias) l.router_logit_bias = t.Vector(p + "ffn_gate_inp.bias", c.n_experts);
      auto [gate, up] = t.GateUpExperts(p, c.n_experts, c.expert_ffn_dim, c.dim);
      std::vector<Linear> down = t.Experts(p + "ffn_down_exps.weight", c.n_experts, c.dim, c.expert_ffn_dim);
      for (uint32_t e = 0; e < c.n_experts; ++e)
        l.experts[e] = {std::move(gate[e]), std::move(up[e]), std::move(down[e])};
      if (c.expert_bias) {  // ne [rows, n_experts]: one row of biases per expert
        const std::vector<float> g = t.Values(p + "ffn_gate_exps.bias", {c.expert_ffn_dim, c.n_experts});
        const std::vector<float> u = t.Values(p + "ffn_up_exps.bias", {c.expert_ffn_dim, c.n_experts});
        const std::vector<float> d = t.Values(p + "ffn_down_exps.bias", {c.dim, c.n_experts});
        for (uint32_t e = 0; e < c.n_experts; ++e) {
          const auto at = [](const std::vector<float>& v, uint64_t begin, uint64_t n) {
            return std::vector<float>(v.begin() + static_cast<ptrdiff_t>(begin), v.begin() + static_cast<ptrdiff_t>(begin + n));
          };
          l.experts[e].gate.bias = at(g, uint64_t{e} * c.expert_ffn_dim, c.expert_ffn_dim);
          l.experts[e].up.bias = at(u, uint64_t{e} * c.expert_ffn_dim, c.expert_ffn_dim);
          l.experts[e].down.bias = at(d, uint64_t{e} * c.dim, c.dim);
        }
      }
      if (c.shared_expert_ffn_dim > 0) {
        const uint32_t ffn = c.shared_expert_ffn_dim;
        if (c.shared_expert_gated) l.shared_gate = t.Vector(p + "ffn_gate_inp_shexp.weight", c.dim);
        l.w_gate = t.Weight(p + "ffn_gate_shexp.weight", ffn, c.dim);
        l.w_up = t.Weight(p + "ffn_up_shexp.weight", ffn, c.dim);
        l.w_down = t.Weight(p + "ffn_down_shexp.weight", c.dim, ffn);
      }
    } else if (GgufFusesGateUp(std::string_view(c.architecture).substr(5))) {  // after "gguf:"  // gate rows, then up rows, in one ffn_up (llama.cpp's swiglu split)
      std::vector<Linear> gate_up = t.Weights(p + "ffn_up.weight", {c.ffn_dim, c.ffn_dim}, c.dim);
      l.w_gate = std::move(gate_up[0]);
      l.w_up = std::move(gate_up[1]);
    } else {
      l.w_gate = t.Weight(p + "ffn_gate.weight", c.ffn_dim, c.dim);
      l.w_up = t.Weight(p + "ffn_up.weight", c.ffn_dim, c.dim);
    }
    if (!c.moe(i)) l.w_down = t.Weight(p + "ffn_down.weight", c.dim, c.ffn_dim);
    w.layers.push_back(std::move(l));
  }
  w.final_norm = t.Vector("output_norm.weight", c.dim);
  if (c.tie_embeddings) {
    // Tied: the output matrix is the table in its own type, as llama.cpp runs it (16-bit floats only
    // with keep_16bit; widened otherwise, as every full-precision linear is).
    if (w.embed.packed && (!IsPlainFloat(*w.embed.packed) || options.keep_16bit)) w.lm_head.weight = *w.embed.packed;
    else w.lm_head.weight = DenseMatrix{c.vocab_size, c.dim, w.embed.Widened()};
  } else {
    w.lm_head = t.Weight("output.weight", c.vocab_size, c.dim);
  }
  t.CheckAllUsed();
  ValidateWeights(c, w, m.source);
  return m;
}

}  // namespace lowbit
