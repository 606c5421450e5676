#include "model/rotation.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "quant/hadamard.h"

namespace lowbit {
namespace {

DenseMatrix& Dense(Linear& l, const char* name) {
  auto* d = std::get_if<DenseMatrix>(&l.weight);
  if (!d) Fail("rotate: {} is already quantized; rotation runs on the full-precision model", name);
  if (l.input_hadamard != 0 || l.outliers || l.input_quant)
    Fail("rotate: {} already carries an input transform; rotate a model only once, before quantizing", name);
  return *d;
}

// W <- W diag(g): a norm's weight folded into the linear that reads it.
void ScaleColumns(DenseMatrix& m, const std::vector<float>& g) {
  for (size_t r = 0; r < m.rows(); ++r)
    for (size_t c = 0; c < m.cols(); ++c) m.values[r * m.cols() + c] *= g[c];
}

void RotateRows(std::span<float> m, size_t rows, size_t cols, const RandomHadamard& q, ThreadPool* pool) {
  ParallelFor(pool, rows, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) q.ApplyRow(m.subspan(r * cols, cols));
  });
}

// W <- Q^T W for a linear writing the residual: (Q^T W)^T = W^T Q, so rotate the rows of W^T.
void RotateOutput(Linear& l, const RandomHadamard& q, const char* name, ThreadPool* pool) {
  DenseMatrix& m = Dense(l, name);
  const size_t rows = m.rows(), cols = m.cols();
  std::vector<float> t(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m.values[r * cols + c];
  RotateRows(t, cols, rows, q, pool);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) m.values[r * cols + c] = t[c * rows + r];
  if (!l.bias.empty()) q.ApplyRow(l.bias);
}

// Norm folded in, then W <- W Q, for a linear reading the (normalized) residual.
void RotateInput(Linear& l, const std::vector<float>& norm, const RandomHadamard& q, const char* name,
                 ThreadPool* pool) {
  DenseMatrix& m = Dense(l, name);
  ScaleColumns(m, norm);
  RotateRows(m.values, m.rows(), m.cols(), q, pool);
}

// A router or sigmoid gate ([rows x dim], row-major) reads the normalized residual as a linear does.
void RotateInputRows(std::vector<float>& m, size_t rows, const std::vector<float>& norm, const RandomHadamard& q,
                     ThreadPool* pool) {
  const size_t cols = norm.size();
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) m[r * cols + c] *= norm[c];
  RotateRows(m, rows, cols, q, pool);
}

// One SwiGLU MLP (dense, an expert or the shared expert): gate/up read the rotated residual, down
// writes it and gets its online Hadamard over the largest power of two dividing its width.
void RotateMlp(Linear& gate, Linear& up, Linear& down, const std::vector<float>& norm, const RandomHadamard& q,
               const std::string& name, ThreadPool* pool) {
  RotateInput(gate, norm, q, (name + " gate/up").c_str(), pool);
  RotateInput(up, norm, q, (name + " gate/up").c_str(), pool);
  RotateOutput(down, q, (name + ".down_proj").c_str(), pool);
  DenseMatrix& d = std::get<DenseMatrix>(down.weight);
  const size_t block = LargestPowerOfTwoDivisor(d.cols());
  ParallelFor(pool, d.rows(), [&](size_t begin, size_t end) {  // Q^T W_down H (H symmetric)
    for (size_t r = begin; r < end; ++r) HadamardBlocks(std::span(d.values).subspan(r * d.cols(), d.cols()), block);
  });
  down.input_hadamard = static_cast<uint32_t>(block);
}

// A rotation Q of the residual stream passes through RMSNorm(x) * w only where w is folded into the
// next linear; an RMSNorm on a block's output (Gemma 2/3) would need diag(w) Q = Q diag(w'), which no w' gives,
// and LayerNorm's mean subtraction does not commute with Q at all.
void CheckRotatable(const ModelConfig& c) {
  if (c.sandwich_norms)
    Fail("rotate: {} normalizes the attention and MLP outputs before the residual add, and those norms do not "
         "commute with a rotation of the residual stream; quantize it without rotation", c.architecture);
  if (c.norm == NormKind::kLayer)  // (x - mean) is not rotated by Q: the mean is along the all-ones direction
    Fail("rotate: {} normalizes with LayerNorm, whose mean subtraction does not commute with a rotation of the "
         "residual stream; quantize it without rotation", c.architecture);
}

// The smallest online Hadamard block among the model's down_proj inputs (dense MLPs, experts, shared experts).
size_t SmallestDownBlock(const ModelConfig& c) {
  size_t block = 0;
  const auto add = [&](size_t width) {
    if (width > 0) block = block == 0 ? LargestPowerOfTwoDivisor(width) : std::min(block, LargestPowerOfTwoDivisor(width));
  };
  bool any_dense = false;
  for (size_t l = 0; l < c.n_layers; ++l) any_dense |= !c.moe(l);
  if (any_dense) add(c.ffn_dim);
  if (c.n_experts > 0) {
    add(c.expert_ffn_dim);
    add(c.shared_expert_ffn_dim);
  }
  return block;
}

}  // namespace

RotationInfo RotateModelEnds(Model& model, uint64_t seed, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  CheckRotatable(c);
  ModelWeights& w = model.weights;
  const RandomHadamard q = RandomHadamard::Make(c.dim, seed);
  RotateRows(w.embed.MakeDense(), c.vocab_size, c.dim, q, pool);
  RotateInput(w.lm_head, w.final_norm, q, "lm_head", pool);
  std::fill(w.final_norm.begin(), w.final_norm.end(), 1.0f);
  model.config.tie_embeddings = false;  // lm_head now holds diag(final_norm) and differs from embed
  return {c.dim, SmallestDownBlock(c)};
}

void RotateBlock(const ModelConfig& c, LayerWeights& lw, size_t index, uint64_t seed, ThreadPool* pool) {
  CheckRotatable(c);
  const RandomHadamard q = RandomHadamard::Make(c.dim, seed);
  const std::string p = fmt::format("model.layers.{}.", index);
  if (!c.mla()) {
    for (Linear* l : {&lw.wq, &lw.wk, &lw.wv}) RotateInput(*l, lw.attn_norm, q, (p + "self_attn q/k/v").c_str(), pool);
  } else {  // latent attention reads the residual through q_a (or q) and kv_a; its own norms act on their outputs
    Linear& query = c.q_lora_rank > 0 ? lw.wq_a : lw.wq;
    for (Linear* l : {&query, &lw.wkv_a})
      RotateInput(*l, lw.attn_norm, q, (p + "self_attn q_a/q, kv_a").c_str(), pool);
  }
  RotateOutput(lw.wo, q, (p + "self_attn.o_proj").c_str(), pool);
  if (!c.moe(index)) {
    RotateMlp(lw.w_gate, lw.w_up, lw.w_down, lw.ffn_norm, q, p + "mlp", pool);
  } else {  // the router (and the shared expert's gate) choose from the rotated residual unchanged
    RotateInputRows(lw.router, c.n_experts, lw.ffn_norm, q, pool);
    if (!lw.shared_gate.empty()) RotateInputRows(lw.shared_gate, 1, lw.ffn_norm, q, pool);
    for (size_t e = 0; e < lw.experts.size(); ++e)
      RotateMlp(lw.experts[e].gate, lw.experts[e].up, lw.experts[e].down, lw.ffn_norm, q,
                fmt::format("{}mlp.experts.{}", p, e), pool);
    if (c.shared_expert_ffn_dim > 0)
      RotateMlp(lw.w_gate, lw.w_up, lw.w_down, lw.ffn_norm, q,
                p + (lw.ungated_shared_expert ? "mlp.shared_experts" : "mlp.shared_expert"), pool);
  }
  std::fill(lw.attn_norm.begin(), lw.attn_norm.end(), 1.0f);
  std::fill(lw.ffn_norm.begin(), lw.ffn_norm.end(), 1.0f);
}

RotationInfo RotateModel(Model& model, uint64_t seed, ThreadPool* pool) {
  for (size_t i = 0; i < model.weights.layers.size(); ++i)
    RotateBlock(model.config, model.weights.layers[i], i, seed, pool);
  return RotateModelEnds(model, seed, pool);
}

}  // namespace lowbit
