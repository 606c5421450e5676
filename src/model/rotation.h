// QuaRot-style rotation (Ashkboos et al., 2024) of a Llama model, exact in full precision:
//   1. each RMSNorm's weight is folded into the linears that read it (q/k/v, gate/up, lm_head)
//      and set to 1, since RMSNorm commutes with an orthogonal Q only without its scale;
//   2. the residual stream is rotated by a randomized Hadamard Q = diag(+-1) H (H_b, or H_k (x) H_b
//      for hidden sizes k 2^j such as 3584 and 7168: quant/hadamard.h): embed <- embed Q; readers of
//      the residual (q/k/v, gate/up, lm_head) W <- W Q; writers (o, down) W <- Q^T W and b <- b Q;
//   3. down_proj's input gets an online Hadamard: W_down <- W_down H (block-diagonal over the
//      largest power of two dividing the FFN size) and Linear::input_hadamard makes MatMul apply
//      x <- x H at run time.
// Outliers of the residual stream and of the down_proj input are spread over all channels, which
// makes weights and activations far easier to quantize. A tied lm_head absorbs the final norm
// and so no longer equals the embeddings: the model is untied (config.tie_embeddings = false).
// Mixtures of experts: every expert and the shared expert are MLPs as above (each down_proj with its
// own Hadamard block), and the router and the shared expert's sigmoid gate read the residual like
// gate/up, so every token is routed exactly as before. Latent attention (DeepSeek) reads the residual
// through q_a_proj (or q_proj) and kv_a_proj_with_mqa; its q_a and latent norms act on those outputs,
// which the rotation leaves unchanged.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace lowbit {

struct RotationInfo {
  size_t residual_size = 0;  // Q is residual_size x residual_size
  size_t down_block = 0;     // online Hadamard block of down_proj's input (the smallest, with experts)
};

// Rotates a full-precision model in place. Fails if any linear is quantized or already carries
// an input transform, or if no Hadamard of the hidden size is known (RandomHadamard::Make).
// Rows are rotated on `pool` when one is given.
RotationInfo RotateModel(Model& model, uint64_t seed, ThreadPool* pool = nullptr);

// The two halves of RotateModel, for models read block by block: everything outside the decoder
// blocks (embeddings, final norm, lm_head), and one block. The same seed gives the same Q.
RotationInfo RotateModelEnds(Model& model, uint64_t seed, ThreadPool* pool = nullptr);
void RotateBlock(const ModelConfig& config, LayerWeights& layer, size_t index, uint64_t seed, ThreadPool* pool = nullptr);

}  // namespace lowbit
