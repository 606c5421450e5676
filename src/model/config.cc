#include "model/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

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
  need(norm_eps > 0, "rms_norm_eps must be positive");
  need(rope_theta > 0, "rope_theta must be positive");
  need(bos_id < static_cast<int32_t>(vocab_size) && eos_id < static_cast<int32_t>(vocab_size),
       "bos/eos token ids must be inside the vocabulary");
}

namespace {

constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";

template <class T>
T Required(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) Fail("{}: missing field '{}'", source, key);
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    Fail("{}: field '{}' has the wrong type ({})", source, key, j[key].type_name());
  }
}

template <class T>
T Optional(const nlohmann::json& j, const char* key, T fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return Required<T>(j, key, source);
}

}  // namespace

ModelConfig ReadHfConfig(const std::filesystem::path& config_json) {
  const std::string source = config_json.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ReadTextFile(config_json));
  } catch (const nlohmann::json::parse_error& e) {
    Fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!j.is_object()) Fail("{}: expected a JSON object", source);
  ModelConfig c;
  const auto archs = Optional<std::vector<std::string>>(j, "architectures", {}, source);
  if (archs.empty()) Fail("{}: missing field 'architectures' (supported: {})", source, kSupported);
  c.architecture = archs[0];
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM" &&
      c.architecture != "Qwen2ForCausalLM")
    Fail("{}: unsupported architecture '{}' (supported: {})", source, c.architecture, kSupported);
  c.vocab_size = Required<uint32_t>(j, "vocab_size", source);
  c.dim = Required<uint32_t>(j, "hidden_size", source);
  c.n_layers = Required<uint32_t>(j, "num_hidden_layers", source);
  c.n_heads = Required<uint32_t>(j, "num_attention_heads", source);
  c.n_kv_heads = Optional<uint32_t>(j, "num_key_value_heads", c.n_heads, source);
  c.head_dim = Optional<uint32_t>(j, "head_dim", c.n_heads ? c.dim / c.n_heads : 0, source);
  c.ffn_dim = Required<uint32_t>(j, "intermediate_size", source);
  c.max_position = Optional<uint32_t>(j, "max_position_embeddings", 2048, source);
  c.rope_theta = Optional<float>(j, "rope_theta", 10000.0f, source);
  c.norm_eps = Optional<float>(j, "rms_norm_eps", 1e-6f, source);
  c.tie_embeddings = Optional<bool>(j, "tie_word_embeddings", false, source);
  c.qkv_bias = c.architecture == "Qwen2ForCausalLM" || Optional<bool>(j, "attention_bias", false, source);
  c.bos_id = Optional<int32_t>(j, "bos_token_id", 1, source);
  c.eos_id = j.contains("eos_token_id") && j["eos_token_id"].is_array()
                 ? j["eos_token_id"][0].get<int32_t>()
                 : Optional<int32_t>(j, "eos_token_id", 2, source);
  const std::string hidden_act = Optional<std::string>(j, "hidden_act", "silu", source);
  if (hidden_act != "silu") Fail("{}: hidden_act '{}' is not supported (only silu)", source, hidden_act);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const auto& rs = j["rope_scaling"];
    const std::string type = rs.contains("rope_type") ? Required<std::string>(rs, "rope_type", source + " rope_scaling")
                                                      : Optional<std::string>(rs, "type", "", source + " rope_scaling");
    if (type != "llama3") Fail("{}: rope_scaling type '{}' is not supported (only llama3)", source, type);
    c.rope_scaling.factor = Required<float>(rs, "factor", source + " rope_scaling");
    c.rope_scaling.low_freq_factor = Optional<float>(rs, "low_freq_factor", 1.0f, source);
    c.rope_scaling.high_freq_factor = Optional<float>(rs, "high_freq_factor", 4.0f, source);
    c.rope_scaling.original_max_position =
        Optional<uint32_t>(rs, "original_max_position_embeddings", 8192, source);
  }
  c.Validate(source);
  return c;
}

}  // namespace lowbit
