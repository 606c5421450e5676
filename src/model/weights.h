// Model weights. A linear layer's weight is either a dense fp32 matrix or a QuantizedTensor;
// the forward pass calls MatMul on it and never looks inside, so quantized models run through
// the same model code (issue-level work plugs in new formats and kernels behind MatMul).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/file_util.h"
#include "model/config.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

struct DenseMatrix {  // row-major [rows x cols], rows = output features
  uint64_t row_count = 0, col_count = 0;
  std::vector<float> values;
  uint64_t rows() const { return row_count; }
  uint64_t cols() const { return col_count; }
};

// Activation quantization of a linear layer's input, simulated before the matmul (fake-quant),
// so W8A8-style schemes can be evaluated before integer kernels exist. A per-token (or per-row)
// scheme is dynamic; a per-tensor scheme uses the static scale calibrated on calibration data.
// NVFP4 inputs (W4A4) are both, as llm-compressor and vLLM run them: a static tensor scale (the
// reciprocal of compressed-tensors' input_global_scale) over dynamic E4M3 scales per 16 inputs.
// Asymmetric schemes (int8:token:asym, int8:tensor:asym) shift by an integer zero-point, per token
// (dynamic) or calibrated with the static scale.
struct InputQuant {
  QuantScheme scheme;
  float static_scale = 0;  // per-tensor schemes: the calibrated scale; NVFP4: the tensor scale (0: per call)
  float static_zero = 0;   // asymmetric per-tensor schemes: the calibrated zero-point (codes 0..255 for int8)
  bool operator==(const InputQuant& o) const {
    return scheme.ToString() == o.scheme.ToString() && static_scale == o.static_scale && static_zero == o.static_zero;
  }
};

// Whether calibration data fixes part of an input scheme's scales (kept in InputQuant::static_scale).
inline bool HasStaticScale(const QuantScheme& input) {
  return input.granularity.kind == GranularityKind::kTensor || input.tensor_scale;
}

// LLM.int8()'s mixed decomposition: input columns with outlier activations bypass quantization.
// The linear's weight has zeros in these columns, their full-precision weights live here, and
// y = Q(x with the columns zeroed) W^T + x[:, columns] weight^T.
struct OutlierColumns {
  std::vector<uint32_t> columns;  // ascending input column indices
  DenseMatrix weight;             // [rows x columns.size()]
};

struct Linear {
  std::variant<DenseMatrix, QuantizedTensor> weight;
  std::vector<float> bias;  // empty = none
  std::optional<InputQuant> input_quant;
  // Online rotation of the input (QuaRot's down_proj Hadamard): x <- x H before the outlier split
  // and input quantization, H block-diagonal normalized Walsh–Hadamard of this block size; the
  // weight already holds W H, so in full precision the output is unchanged. 0 = none.
  uint32_t input_hadamard = 0;
  std::optional<OutlierColumns> outliers;
  // Act-order storage (quant/column_order.h): the weight's column j multiplies input column
  // input_order[j], so that each scale group is contiguous; the input is gathered into this order
  // after the transforms above. Empty = input order.
  std::vector<uint32_t> input_order;

  uint64_t rows() const;
  uint64_t cols() const;
  bool quantized() const { return std::holds_alternative<QuantizedTensor>(weight); }
  uint64_t storage_bytes() const;
};

// Row r of the matrix `l` applies to its input, in input column order: act-order columns put back
// and LLM.int8() outlier columns added in (an online Hadamard rotation stays folded in). `scratch`
// and `out` hold l.cols() floats.
void InputOrderRow(const Linear& l, uint64_t r, std::span<float> scratch, std::span<float> out);

// One SwiGLU expert of a mixture-of-experts layer: [expert_ffn x dim] x2, [dim x expert_ffn].
struct Expert {
  Linear gate, up, down;
};

struct LayerWeights {
  std::vector<float> attn_norm;   // [dim]
  Linear wq, wk, wv, wo;          // [q_dim x dim], [kv_dim x dim] x2, [dim x q_dim]
  std::vector<float> q_norm, k_norm;  // [head_dim] each when config.qk_norm (Qwen3), else empty
  // Latent attention (config.mla(): DeepSeek-V2/V3), where wk and wv stay empty: wq is q_proj [n_heads
  // qk_head_dim x dim], or q_b_proj [.. x q_lora_rank] after wq_a (q_a_proj [q_lora_rank x dim]) and
  // q_a_norm; wkv_a (kv_a_proj_with_mqa) [kv_lora_rank + rope x dim] gives the latent (normed by
  // kv_a_norm) and the shared rotary key; wkv_b (kv_b_proj) [n_heads (nope + v_head_dim) x kv_lora_rank]
  // holds each head's key rows then value rows over the latent; wo is [dim x n_heads v_head_dim].
  // kv_a_norm is non-empty exactly in latent-attention layers (BlockLinears lists their slots by it).
  Linear wq_a, wkv_a, wkv_b;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<float> ffn_norm;    // [dim]
  // The MLP: [ffn x dim] x2, [dim x ffn]. In a sparse layer (config.moe) these hold the shared expert
  // ([shared_expert_ffn x dim] ...) when there is one, and are empty otherwise.
  Linear w_gate, w_up, w_down;
  // Sparse layers: the router [n_experts x dim] (row-major; full precision, as every engine keeps
  // it), the experts, and the shared expert's gate [dim] (empty without one): the shared expert's
  // output is scaled by sigmoid(shared_gate . x).
  std::vector<float> router;
  std::vector<Expert> experts;
  std::vector<float> shared_gate;
  // DeepSeek-V3's per-expert bias on the scores that choose experts [n_experts] (config.router_bias), and
  // whether this sparse layer has an ungated shared expert (DeepSeek's mlp.shared_experts).
  std::vector<float> router_bias;
  // GPT-OSS: the router's bias on its logits [n_experts] (config.router_logit_bias), and each query head's
  // attention sink logit [n_heads] (config.attention_sinks).
  std::vector<float> router_logit_bias, attn_sinks;
  bool ungated_shared_expert = false;
  bool shared_expert() const { return !shared_gate.empty() || ungated_shared_expert; }
  // config.sandwich_norms (Gemma 2/3): RMSNorm weights [dim] applied to the attention output and
  // to the MLP output before each is added to the residual; empty otherwise.
  std::vector<float> attn_out_norm, ffn_out_norm;
};

// The token embedding table [vocab x dim], rows looked up by token id: fp32 `values`, or the table
// kept as the file stores it (`packed`: a 16-bit checkpoint's bf16 / fp16 rows, half the memory, or a
// GGUF block type; each looked-up row is decoded alone, exactly). Exactly one of the two holds the
// table. Paths that rewrite it (rotation) call MakeDense() first; writers read it row by row.
struct Embedding {
  std::vector<float> values;
  std::optional<QuantizedTensor> packed;

  // Row `id` into out[0..dim).
  void Row(uint64_t id, std::span<float> out) const;
  // The fp32 table, whatever the storage.
  std::vector<float> Widened() const;
  // Widens a packed table in place; returns the fp32 values.
  std::vector<float>& MakeDense();
  uint64_t storage_bytes() const { return packed ? packed->storage_bytes() : values.size() * 4; }
};

// A block's linear under its name after "model.layers.N." (the Hugging Face names of Llama and
// Qwen: "self_attn.q_proj", "mlp.down_proj", "mlp.experts.3.gate_proj", "mlp.shared_expert.up_proj").
struct BlockLinear {
  std::string name;
  Linear* linear;
};
struct ConstBlockLinear {
  std::string name;
  const Linear* linear;
};
// Every linear of a block in execution order: attention (q, k, v, o), the dense MLP or shared
// expert (gate, up, down), then each expert's gate, up, down.
std::vector<BlockLinear> BlockLinears(LayerWeights& layer);
std::vector<ConstBlockLinear> BlockLinears(const LayerWeights& layer);

// The linears block `layer` of config `c` has, in BlockLinears' order, with their shapes.
struct LinearShape {
  std::string name;
  uint64_t rows, cols;
  bool bias;
};
std::vector<LinearShape> BlockLinearShapes(const ModelConfig& c, size_t layer);
// A block with the slots config `c` gives block `layer` (its experts, and the shared expert's gate,
// sized), for loaders that fill BlockLinears(block) in the order of BlockLinearShapes.
LayerWeights EmptyLayer(const ModelConfig& c, size_t layer);

struct ModelWeights {
  Embedding embed;                // [vocab x dim]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  Linear lm_head;                 // [vocab x dim] (a copy of embed when tied)
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;  // where it was loaded from, for messages
};

// How strictly model files are read (every loader takes one).
struct LoadOptions {
  // A NaN or Inf in a weight is an Error naming the tensor, found while converting it to fp32
  // (--allow-nonfinite: load it anyway, e.g. to inspect a broken checkpoint).
  bool allow_nonfinite = false;
  // BF16 / F16 linear weights stay in 16 bits (a plain bf16 / fp16 QuantizedTensor, run by the 16-bit
  // kernels: half the bytes per token), as the runtime commands load them. Off, they are widened to
  // fp32, as quantization and export read their sources. (16-bit embeddings stay 16-bit either way:
  // a row lookup widens exactly.)
  bool keep_16bit = false;
};

// A plain 16-bit float matrix [rows x cols] from its little-endian bf16 or fp16 bytes, checked for
// NaN / Inf unless allowed (the error names `name` in `file`, as CheckFinite's does).
QuantizedTensor SixteenBitMatrix(std::span<const std::byte> bytes, bool bf16, uint64_t rows, uint64_t cols,
                                 bool allow_nonfinite, std::string_view name, std::string_view file,
                                 ConsumedBytes consumed = nullptr);
// Whether q is plain floats (no scales): full precision held in fewer bytes.
bool IsPlainFloat(const QuantizedTensor& q);
// A linear held as plain floats is full precision: steps that quantize or rewrite weights widen it to
// fp32 first. Returns whether it did.
bool WidenPlainFloat(Linear& linear);

// The index of the first NaN or Inf in `values`, or values.size() when every value is finite.
size_t FirstNonFinite(std::span<const float> values);
// Throws Error "FILE: tensor 'NAME' has a non-finite value (nan) at element I; ..." when `values`
// (elements `offset` on of tensor `name` in `file`) hold a NaN or Inf.
void CheckFinite(std::span<const float> values, uint64_t offset, std::string_view name, std::string_view file);
// The same for the scales, zero points / biases and tensor scale of a quantized tensor: "FILE: tensor
// 'NAME' has a non-finite scale (inf) in scale cell I; ...".
void CheckScalesFinite(const QuantizedTensor& q, std::string_view name, std::string_view file);
// And for its codes, where the element has codes that decode to NaN or Inf (FP8: E4M3's 0x7f/0xff,
// E5M2's exponent 31; integer grids and the other float tables have none, and are not scanned):
// "FILE: tensor 'NAME' has a non-finite code (nan, 0x7f) at element I; ...".
void CheckCodesFinite(const QuantizedTensor& q, std::string_view name, std::string_view file);
// The same for every fp32 tensor of a loaded model (embeddings, norms, dense linears, biases,
// outlier columns), named as in ValidateWeights: for loaders that do not convert tensor by tensor.
void CheckWeightsFinite(const ModelWeights& w, const std::string& source);

// Checks every shape against the config; throws Error naming the tensor.
void ValidateWeights(const ModelConfig& c, const ModelWeights& w, const std::string& source);
// The same checks for one decoder block, and for everything outside the blocks (embeddings,
// final norm, lm_head, and the number of block slots), for models read block by block.
void ValidateLayer(const ModelConfig& c, const LayerWeights& layer, size_t index, const std::string& source);
void ValidateEnds(const ModelConfig& c, const ModelWeights& w, const std::string& source);

}  // namespace lowbit
