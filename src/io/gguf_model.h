// Llama and Qwen2 models stored as GGUF (llama.cpp's converter output; keys and tensor names:
// formats.md 2.5-2.6; qwen2 adds q/k/v biases and keys prefixed "qwen2."). The linear weights of block types lowbit has a kernel layout for (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q8_1, MXFP4, IQ4_NL) stay quantized, repacked bit-exactly (gguf_repack.h); every
// other tensor is dequantized to fp32.
//
// GGUF ne order is [cols, rows] with rows stored one after another, which is exactly a row-major
// [rows x cols] matrix, so no transpose happens. llama: Q/K rows are kept as the converter permuted
// them (formats.md 2.7), hence rope_style = kAdjacent; un-permuting would also work but would make
// the weights differ from the file's bytes. qwen2 is not permuted: rotate-half RoPE (kHalf).
#pragma once

#include <filesystem>
#include <string_view>

#include "io/gguf.h"
#include "model/weights.h"

namespace lowbit {

// Hyper-parameters only (no tensor data is decoded): general.architecture must be "llama" or "qwen2";
// vocab_size comes from token_embd.weight. Throws Error naming the file and key.
ModelConfig ReadGgufConfig(const GgufFile& file);

// llama.cpp's smollm3 runs every kSmolLM3NopeStep-th layer (1-based) without RoPE; its files hold no key for it.
inline constexpr uint32_t kSmolLM3NopeStep = 4;

// The attention score scale llama.cpp applies to a model of GGUF architecture gemma / gemma2 / gemma3
// of this shape: it reads no query_pre_attn_scalar, and scales by 1/sqrt(head_dim), or by
// 1/sqrt(hidden / heads) at the layer counts of Gemma 2 27B (46) and Gemma 3 27B (62).
float LlamaCppGemmaAttentionScale(std::string_view arch, const ModelConfig& c);

// The sparse layers of an ERNIE 4.5 MoE as its GGUF keys give them: the first sparse layer's index (the dense lead,
// leading_dense_block_count) and the distance between the first two (interleave_moe_layer_step; 1 with one).
struct ErnieMoeLayers {
  uint32_t lead, step;
};
ErnieMoeLayers ErnieMoeLayout(const ModelConfig& c);

// Whether llama.cpp's architecture `arch` reads gate and up as one ffn_up, gate rows first (phi3, glm4, chatglm).
bool GgufFusesGateUp(std::string_view arch);

// Whether lowbit runs GGUF files of general.architecture `arch` (each one llama.cpp runs).
bool RunsGgufArchitecture(std::string_view arch);

// The name of a block's MLP input norm in llama.cpp's architecture `arch` (general.architecture):
// "post_attention_norm.weight" in gpt-oss, glm4moe and seed_oss (LLM_TENSOR_ATTN_POST_NORM), else "ffn_norm.weight".
const char* GgufFfnNormName(std::string_view arch);

// The whole model. Errors name the file and the key or tensor: missing or mis-shaped tensors,
// unsupported tensor types, and tensors a llama model does not have (llama.cpp rejects those too).
// NaN / Inf in a decoded tensor: Error naming it, unless options.allow_nonfinite.
Model LoadGgufModel(const std::filesystem::path& path, const LoadOptions& options = {});

}  // namespace lowbit
