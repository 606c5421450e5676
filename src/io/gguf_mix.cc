#include "io/gguf_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_quantize.h"

namespace lowbit {
namespace {

// llama_ftype ids (formats.md 2.5) and the base type llama-quantize gives each.
constexpr GgufFileType kFileTypes[] = {
    {"F32", 0, kGgmlF32, false},         {"F16", 1, kGgmlF16, false},
    {"BF16", 32, kGgmlBF16, false},      {"Q8_0", 7, kGgmlQ8_0, true},
    {"Q4_0", 2, kGgmlQ4_0, true},        {"Q4_1", 3, kGgmlQ4_1, true},
    {"Q5_0", 8, kGgmlQ5_0, true},        {"Q5_1", 9, kGgmlQ5_1, true},
    {"Q2_K", 10, kGgmlQ2_K, true},       {"Q3_K_S", 11, kGgmlQ3_K, true},
    {"Q3_K_M", 12, kGgmlQ3_K, true},     {"Q3_K_L", 13, kGgmlQ3_K, true},
    {"Q4_K_S", 14, kGgmlQ4_K, true},     {"Q4_K_M", 15, kGgmlQ4_K, true},
    {"Q5_K_S", 16, kGgmlQ5_K, true},     {"Q5_K_M", 17, kGgmlQ5_K, true},
    {"Q6_K", 18, kGgmlQ6_K, true},       {"IQ4_NL", 25, kGgmlIQ4_NL, true},
    {"IQ4_XS", 30, kGgmlIQ4_XS, true},   {"TQ1_0", 36, kGgmlTQ1_0, true},
    {"TQ2_0", 37, kGgmlTQ2_0, true},     {"MXFP4_MOE", 38, kGgmlMXFP4, true},
    // Tensor types without a llama.cpp mix of their own: every matrix gets the type; the file
    // type is the mix that is "mostly" that type.
    {"Q3_K", 11, kGgmlQ3_K, false},      {"Q4_K", 14, kGgmlQ4_K, false},
    {"Q5_K", 16, kGgmlQ5_K, false},      {"MXFP4", 38, kGgmlMXFP4, false},
};

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

bool Quantized(uint32_t type) { return FindGgmlType(type)->block_elems > 1; }

// llama-quantize's fallback when a row is not whole blocks of the chosen type.
uint32_t Fallback(uint32_t type, uint64_t row_length) {
  if (row_length % FindGgmlType(type)->block_elems == 0) return type;
  uint32_t next = kGgmlF16;
  switch (type) {
    case kGgmlIQ4_XS: next = kGgmlIQ4_NL; break;
    case kGgmlQ2_K: case kGgmlQ3_K: case kGgmlTQ1_0: case kGgmlTQ2_0: next = kGgmlQ4_0; break;
    case kGgmlQ4_K: next = kGgmlQ5_0; break;
    case kGgmlQ5_K: next = kGgmlQ5_1; break;
    case kGgmlQ6_K: next = kGgmlQ8_0; break;
    default: break;
  }
  return row_length % FindGgmlType(next)->block_elems == 0 ? next : kGgmlF16;
}

// More bits for the first and last eighth of the layers and every third one between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int LayerOf(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool Contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

const GgufFileType& FindGgufFileType(std::string_view name) {
  const std::string upper = Upper(name);
  for (const GgufFileType& t : kFileTypes)
    if (t.name == upper) return t;
  Fail("unknown GGUF type '{}' (supported: {})", name, fmt::join(GgufFileTypeNames(), ", "));
}

std::vector<std::string_view> GgufFileTypeNames() {
  std::vector<std::string_view> names;
  for (const GgufFileType& t : kFileTypes) names.push_back(t.name);
  return names;
}

uint32_t ParseGgufTensorType(std::string_view name, std::string_view flag) {
  const std::string upper = Upper(name);
  std::vector<std::string_view> writable;
  for (const GgmlTypeInfo& t : AllGgmlTypes()) {
    if (!CanQuantizeGguf(t.id)) continue;
    if (t.name == upper) return t.id;
    writable.push_back(t.name);
  }
  Fail("{} '{}': not a ggml type lowbit writes (one of: {})", flag, name, fmt::join(writable, ", "));
}

GgufTypeChooser::GgufTypeChooser(const GgufFileType& file_type, const GgufMixModel& model, bool pure,
                                 bool has_imatrix, GgufTableTypes tables)
    : file_type_(file_type), model_(model), pure_(pure || !file_type.mix), has_imatrix_(has_imatrix),
      tables_(tables) {}

uint32_t GgufTypeChooser::Choose(const std::string& name, const std::vector<uint64_t>& ne) {
  // llama-quantize quantizes matrices named *weight, never norms or MoE routers.
  if (ne.size() < 2 || !EndsWith(name, "weight") || Contains(name, "_norm.weight") ||
      Contains(name, "ffn_gate_inp.weight"))
    return kGgmlF32;
  const bool embedding = name == "token_embd.weight";
  const bool output = name == "output.weight" || (!model_.has_output && embedding);
  const char* flag = embedding && tables_.token_embedding ? "--token-embedding-type"
                     : output && tables_.output           ? "--output-tensor-type"
                                                          : nullptr;
  if (flag) {  // as llama-quantize: no fallback, a row length the type's blocks do not divide is an error
    const uint32_t type = embedding && tables_.token_embedding ? *tables_.token_embedding : *tables_.output;
    const uint32_t block = FindGgmlType(type)->block_elems;
    if (ne[0] % block != 0)
      Fail("{} {}: the rows of {} hold {} weights, not a multiple of its {}-weight blocks", flag, GgmlTypeName(type),
           name, ne[0], block);
    return type;
  }
  uint32_t type = file_type_.base_type;
  if (!Quantized(type)) return type;
  if (!pure_) type = MixType(name, ne, type);
  return Fallback(type, ne[0]);
}

// llama_tensor_get_type_impl for llama / qwen2 / qwen3 / gemma / phi3 models (with their mixture-of-experts
// variants: ffn_down*_exps and _shexp follow ffn_down's rule by their layer) and the file types above.
uint32_t GgufTypeChooser::MixType(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type) {
  const std::string_view ft = file_type_.name;
  const int n = static_cast<int>(model_.n_layers);
  const uint64_t row_length = ne[0];
  const bool output = name == "output.weight" || (!model_.has_output && name == "token_embd.weight");
  // gpt-oss's mix: the experts (3-D tensors) in MXFP4, every other matrix, the output too, in Q8_0.
  if (ft == "MXFP4_MOE") return !output && ne.size() > 2 && ne[2] > 1 ? kGgmlMXFP4 : kGgmlQ8_0;
  if (output) return row_length % FindGgmlType(type)->block_elems != 0 || type == kGgmlQ8_0 ? kGgmlQ8_0 : kGgmlQ6_K;
  if (name == "token_embd.weight") return ft == "TQ1_0" || ft == "TQ2_0" ? kGgmlQ4_K : type;
  const bool eight_experts = model_.n_experts == 8;
  if (Contains(name, "attn_v.weight") || Contains(name, "attn_qkv.weight")) {  // llama.cpp's category_is_attn_v
    const int i = i_attention_wv_++;
    if (eight_experts) return kGgmlQ8_0;  // "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
    if (ft == "Q2_K") return model_.n_gqa >= 4 ? kGgmlQ4_K : kGgmlQ3_K;
    if (ft == "Q3_K_M") return i < 2 ? kGgmlQ5_K : kGgmlQ4_K;
    if (ft == "Q3_K_L") return kGgmlQ5_K;
    if ((ft == "IQ4_NL" || ft == "IQ4_XS") && model_.n_gqa >= 4) return kGgmlQ5_K;
    if ((ft == "Q4_K_M" || ft == "Q5_K_M") && UseMoreBits(i, n)) return kGgmlQ6_K;
    if (ft == "Q4_K_S" && i < 4) return kGgmlQ5_K;
    return type;
  }
  if (Contains(name, "ffn_down")) {
    const int i = LayerOf(name);
    if (ft == "Q2_K") return kGgmlQ3_K;
    if (ft == "Q3_K_M") return i < n / 16 ? kGgmlQ5_K : kGgmlQ4_K;
    if (ft == "Q3_K_L") return kGgmlQ5_K;
    if (ft == "Q4_K_M") return UseMoreBits(i, n) ? kGgmlQ6_K : type;
    if (i < n / 8 && (ft == "IQ4_NL" || ft == "IQ4_XS") && !has_imatrix_) return kGgmlQ5_K;
    if (ft == "Q5_K_M" && UseMoreBits(i, n)) return kGgmlQ6_K;
    if (ft == "Q4_K_S" && i < n / 8) return kGgmlQ5_K;
    if ((ft == "Q4_0" || ft == "Q5_0") && has_imatrix_ && i < n / 8) return ft == "Q4_0" ? kGgmlQ4_1 : kGgmlQ5_1;
    return type;
  }
  if (Contains(name, "attn_k.weight") && eight_experts) return kGgmlQ8_0;
  if (Contains(name, "attn_output.weight")) {
    if (eight_experts)
      return ft == "Q2_K" || ft == "Q3_K_S" || ft == "Q3_K_M" || ft == "IQ4_NL" || ft == "Q4_K_S" || ft == "Q4_K_M" ||
                     ft == "IQ4_XS"
                 ? kGgmlQ5_K
                 : type;
    if (ft == "Q2_K") return kGgmlQ3_K;
    if (ft == "Q3_K_M") return kGgmlQ4_K;
    if (ft == "Q3_K_L") return kGgmlQ5_K;
    return type;
  }
  return type;
}

}  // namespace lowbit
