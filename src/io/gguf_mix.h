// Which ggml type each tensor of an exported GGUF gets: the file types llama.cpp users ask for by
// name ("Q4_K_M", "q8_0", ...) with llama-quantize's per-tensor choices (more bits for attn_v,
// ffn_down in some layers, the output matrix), or one type for every matrix ("pure").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

struct GgufFileType {
  std::string_view name;  // llama.cpp's spelling: "Q4_K_M"
  uint32_t ftype;         // general.file_type (llama_ftype)
  uint32_t base_type;     // the ggml type most matrices get
  bool mix;               // llama-quantize's per-tensor rules apply (false: every matrix is base_type)
};

// Case-insensitive. Mixes: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S
// Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS TQ1_0 TQ2_0 MXFP4_MOE; single tensor types: Q3_K Q4_K Q5_K MXFP4.
// Throws Error listing them for any other name.
const GgufFileType& FindGgufFileType(std::string_view name);
std::vector<std::string_view> GgufFileTypeNames();

// The model-level facts llama-quantize's rules look at.
struct GgufMixModel {
  uint32_t n_layers = 0;
  uint32_t n_gqa = 1;      // n_head / n_head_kv
  bool has_output = true;  // false when the embeddings are tied (token_embd is the output)
  uint32_t n_experts = 0;  // llama-quantize gives 8-expert models (Mixtral) more bits in attention
};

// llama-quantize's --token-embedding-type and --output-tensor-type: the two vocabulary tables' types,
// past the mix and --pure. With tied embeddings token_embd is the output, and the embedding's
// type wins, as in llama-quantize.
struct GgufTableTypes {
  std::optional<uint32_t> token_embedding, output;
};

// A ggml tensor type lowbit writes, by name, case-insensitive ("q6_k"); an error naming `flag` and
// listing the writable types otherwise.
uint32_t ParseGgufTensorType(std::string_view name, std::string_view flag);

// Chooses tensor types in file order, as llama-quantize walks the tensors (its attn_v counter
// depends on the order). Norms and other 1-D tensors stay F32.
class GgufTypeChooser {
 public:
  GgufTypeChooser(const GgufFileType& file_type, const GgufMixModel& model, bool pure, bool has_imatrix,
                  GgufTableTypes tables = {});
  // `name` is the GGUF tensor name, ne its shape (ne[0] = row length).
  uint32_t Choose(const std::string& name, const std::vector<uint64_t>& ne);

 private:
  uint32_t MixType(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type);
  const GgufFileType& file_type_;
  GgufMixModel model_;
  bool pure_, has_imatrix_;
  GgufTableTypes tables_;
  int i_attention_wv_ = 0;
};

}  // namespace lowbit
