#include "model/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"

namespace lowbit {

void ModelConfig::Validate(const std::string& source) const {
  auto need = [&](bool ok, const char* what) {
    if (!ok) Fail("{}: invalid model config: {}", source, what);
  };
  need(vocab_size > 0, "vocab_size must be positive");
  need(dim > 0, "hidden_size must be positive");
  need(n_layers > 0, "num_hidden_layers must be positive");
  need(n_heads > 0 && n_kv_heads > 0, "attention head counts must be positive");
  if (n_heads % n_kv_heads != 0)
    Fail("{}: invalid model config: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
         n_heads, n_kv_heads);
  need(head_dim > 0 && head_dim % 2 == 0, "head_dim must be positive and even");
  need(ffn_dim > 0, "intermediate_size must be positive");
  // Far above any real model, and low enough that no product of two of them overflows 64 bits.
  auto at_most = [&](uint64_t value, uint64_t limit, const char* field) {
    if (value > limit) Fail("{}: invalid model config: {} is {}, more than the {} lowbit supports", source, field, value, limit);
  };
  at_most(vocab_size, 1u << 24, "vocab_size");
  at_most(dim, 1u << 18, "hidden_size");
  at_most(ffn_dim, 1u << 20, "intermediate_size");
  at_most(n_layers, 1u << 12, "num_hidden_layers");
  at_most(n_heads, 1u << 12, "num_attention_heads");
  at_most(head_dim, 1u << 12, "head_dim");
  need(norm_eps > 0, "rms_norm_eps must be positive");
  need(rope_theta > 0, "rope_theta must be positive");
  need(bos_id < static_cast<int32_t>(vocab_size) && eos_id < static_cast<int32_t>(vocab_size),
       "bos/eos token ids must be inside the vocabulary");
}

namespace {

constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

}  // namespace

ModelConfig ReadHfConfig(const std::filesystem::path& config_json) {
  const std::string source = config_json.string();
  const nlohmann::json parsed = ReadJsonFile(config_json);
  const JsonView j = JsonView(parsed, source).ExpectObject();
  ModelConfig c;
  const auto archs = j.Get<std::vector<std::string>>("architectures", {});
  if (archs.empty()) Fail("{}: missing field 'architectures' (supported: {})", source, kSupported);
  c.architecture = archs[0];
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM" &&
      c.architecture != "Qwen2ForCausalLM" && c.architecture != "Qwen3ForCausalLM")
    Fail("{}: unsupported architecture '{}' (supported: {})", source, c.architecture, kSupported);
  c.vocab_size = j.Get<uint32_t>("vocab_size");
  c.dim = j.Get<uint32_t>("hidden_size");
  c.n_layers = j.Get<uint32_t>("num_hidden_layers");
  c.n_heads = j.Get<uint32_t>("num_attention_heads");
  c.n_kv_heads = j.Get<uint32_t>("num_key_value_heads", c.n_heads);
  c.head_dim = j.Get<uint32_t>("head_dim", c.n_heads ? c.dim / c.n_heads : 0);
  c.ffn_dim = j.Get<uint32_t>("intermediate_size");
  c.max_position = j.Get<uint32_t>("max_position_embeddings", 2048);
  c.rope_theta = j.Get<float>("rope_theta", 10000.0f);
  c.norm_eps = j.Get<float>("rms_norm_eps", 1e-6f);
  c.tie_embeddings = j.Get<bool>("tie_word_embeddings", false);
  c.qkv_bias = c.architecture == "Qwen2ForCausalLM" || j.Get<bool>("attention_bias", false);
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  c.bos_id = j.Get<int32_t>("bos_token_id", 1);
  // Llama 3 lists several end tokens; generation stops at the first.
  if (j.Has("eos_token_id") && j["eos_token_id"].value().is_array()) {
    const auto eos = j["eos_token_id"].Items();
    if (eos.empty()) j["eos_token_id"].Fail("is an empty list");
    c.eos_id = eos[0].As<int32_t>();
  } else {
    c.eos_id = j.Get<int32_t>("eos_token_id", 2);
  }
  const std::string hidden_act = j.Get<std::string>("hidden_act", "silu");
  if (hidden_act != "silu") Fail("{}: hidden_act '{}' is not supported (only silu)", source, hidden_act);
  // transformers >= 5 writes rope_parameters {rope_theta, rope_type, ...}; older files have
  // rope_theta beside an optional rope_scaling {rope_type or type, ...}.
  const bool v5 = j.Has("rope_parameters");
  const std::string scaling_key = v5 ? "rope_parameters" : "rope_scaling";
  if (v5) c.rope_theta = j["rope_parameters"].ExpectObject().Get<float>("rope_theta", c.rope_theta);
  if (j.Has(scaling_key)) {
    const JsonView rs = j[scaling_key].ExpectObject();
    const std::string type = rs.Has("rope_type") ? rs.Get<std::string>("rope_type") : rs.Get<std::string>("type", "");
    if (type == "llama3") {
      c.rope_scaling.factor = rs.Get<float>("factor");
      c.rope_scaling.low_freq_factor = rs.Get<float>("low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = rs.Get<float>("high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position = rs.Get<uint32_t>("original_max_position_embeddings", 8192);
    } else if (!(v5 && type == "default")) {
      Fail("{}: {} type '{}' is not supported (only llama3{})", source, scaling_key, type, v5 ? " and default" : "");
    }
  }
  c.Validate(source);
  return c;
}

}  // namespace lowbit
