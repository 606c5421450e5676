// DeepSeek-V2/V3 (multi-head latent attention, DeepSeek routing) in GGUF: llama.cpp's `deepseek2`
// architecture, written as its converter writes it (convert_hf_to_gguf's DeepseekV2Model) and read as
// llama.cpp runs it (models/deepseek2.cpp, llama-graph's build_moe_ffn).
//
// kv_b_proj is stored split per head, for the absorbed attention: attn_k_b holds each head's key rows
// transposed, ne [qk_nope, kv_lora_rank, heads]; attn_v_b its value rows, ne [kv_lora_rank, v_head, heads].
// Older files hold the unsplit attn_kv_b (no key_length_mla): read too.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/weights.h"

namespace lowbit {

// `arch`.expert_gating_func (llama.cpp's 1 softmax, 2 sigmoid): written from the model's router scoring, and read
// (`default_scoring` where absent; another value is an error naming the key).
void SetGatingFunc(GgufWriter& out, const ModelConfig& c, const std::string& arch);
RouterScoring ReadGatingFunc(const GgufFile& f, const std::string& arch, RouterScoring default_scoring);

// What llama.cpp's deepseek2 cannot express is an error naming `source` and the setting (RoPE on halves,
// YaRN with mscale != mscale_all_dim, MoE layers other than after a dense prefix, experts without a shared
// expert); a routing llama.cpp runs differently (DeepSeek-V2's groups chosen by their best expert, which
// llama.cpp scores by their best two) is a warning on stderr.
void CheckDeepSeek2Exportable(const ModelConfig& c, const std::string& source);

// DeepSeek's routing keys under `arch` (deepseek2, and glm4moe, which routes as DeepSeek-V3 without groups):
// leading_dense_block_count, expert_shared_count, expert_weights_scale / norm, expert_gating_func. Reading them
// back (the experts' counts and widths too, router_bias where the first sparse layer has exp_probs_b), an absent
// gating function is `default_scoring`, as llama.cpp defaults it per architecture.
void SetDeepSeekRoutingMetadata(GgufWriter& out, const ModelConfig& c, const std::string& arch);
void ReadDeepSeekRoutingKeys(const GgufFile& f, const std::string& arch, RouterScoring default_scoring,
                             ModelConfig& c);

// The `arch`.* keys (deepseek2, or mistral4: llama.cpp's deepseek2 under Mistral 4's name) of a latent-attention
// model (after the generic ones: context, embedding, heads, RoPE base, norm epsilon, expert counts).
void SetDeepSeek2Metadata(GgufWriter& out, const ModelConfig& c, const std::string& arch);

// attn_k_b / attn_v_b's values (ggml order) from kv_b_proj, and kv_b_proj's rows back from them.
std::vector<float> GgufLatentKeys(const ModelConfig& c, const Linear& kv_b);
std::vector<float> GgufLatentValues(const ModelConfig& c, const Linear& kv_b);
DenseMatrix LatentKvFromGguf(const ModelConfig& c, const std::vector<float>& keys, const std::vector<float>& values);

// The DeepseekV2ForCausalLM (softmax gating), DeepseekV3ForCausalLM (sigmoid gating, exp_probs_b) or
// Mistral4ForCausalLM (a mistral4 file, or a query temperature; its RoPE object is HfConfigOfGguf's) fields of the
// config.json of a model read from a deepseek2 file, over `j`'s generic ones: latent attention, YaRN's
// mscale = mscale_all_dim, experts and routing. What transformers' classes cannot express is an error naming
// `source` and the key (V2 renormalising the chosen weights, V3 without its score bias, YaRN without a log
// multiplier); V2's groups, which llama.cpp scores by their best two experts and transformers by the best one,
// are a warning.
void WriteDeepSeekHfConfig(nlohmann::ordered_json& j, const ModelConfig& c, const std::string& source);

// GLM-4.5 (Glm4MoeForCausalLM) as llama.cpp's glm4moe computes it (models/glm4-moe.cpp): DeepSeek-V3's routing
// without expert groups after a dense prefix, rotate-half RoPE, no o_proj bias. The export check names what it
// cannot express; the config writer adds Glm4MoeConfig's fields over `j`'s generic ones.
void CheckGlm4MoeExportable(const ModelConfig& c, const std::string& source);
void WriteGlm4MoeHfConfig(nlohmann::ordered_json& j, const ModelConfig& c, const std::string& source);

// A deepseek2 (or mistral4: `arch`) file's latent attention, YaRN, routing, query temperature and layer layout into
// `c` (the generic keys already read: dim, layers, heads, key_length as head_dim, rope.dimension_count as rotary_dim,
// ffn_dim).
void ReadDeepSeek2Keys(const GgufFile& f, ModelConfig& c, const std::string& arch);

}  // namespace lowbit
