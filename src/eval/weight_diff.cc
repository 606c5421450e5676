#include "eval/weight_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>

#include "core/error.h"

namespace lowbit {
namespace {

std::string StorageOf(const Linear& l) {
  if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) return q->scheme().ToString();
  return "dense";
}

struct Accumulator {
  double max_abs = 0, diff_sq = 0, ref_sq = 0;
  void Add(std::span<const float> from, std::span<const float> to) {
    for (size_t i = 0; i < from.size(); ++i) {
      const double d = static_cast<double>(to[i]) - from[i];
      max_abs = std::max(max_abs, std::fabs(d));
      diff_sq += d * d;
      ref_sq += static_cast<double>(from[i]) * from[i];
    }
  }
  void Finish(MatrixDiff& m) const {
    m.max_abs_diff = max_abs;
    m.rel_rms = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : (diff_sq > 0 ? INFINITY : 0);
  }
};

// Which row of each side holds the same output feature: the identity, except for the Q and K
// matrices of two models whose RoPE pairs dimensions differently (a GGUF file of a Hugging Face model).
struct RowMap {
  bool a_half = false, b_half = false;  // map that side's row through HalfStyleRow
  uint32_t head_dim = 0;
  uint64_t A(uint64_t r) const { return a_half ? HalfStyleRow(r, head_dim) : r; }
  uint64_t B(uint64_t r) const { return b_half ? HalfStyleRow(r, head_dim) : r; }
};

RowMap RowMapFor(const ModelConfig& a, const ModelConfig& b, std::string_view linear) {
  if (a.rope_style == b.rope_style || !(linear.ends_with("q_proj") || linear.ends_with("k_proj"))) return {};
  return {a.rope_style == RopeStyle::kHalf, b.rope_style == RopeStyle::kHalf, a.head_dim};
}

MatrixDiff DiffLinear(const std::string& name, const Linear& a, const Linear& b, const RowMap& map = {}) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    Fail("{}: [{} x {}] in one model and [{} x {}] in the other", name, a.rows(), a.cols(), b.rows(), b.cols());
  if (a.input_hadamard != b.input_hadamard)
    Fail("{}: an online Hadamard rotation of block {} on one side and {} on the other: the stored matrices are not "
         "comparable", name, a.input_hadamard, b.input_hadamard);
  MatrixDiff m{name, StorageOf(a), StorageOf(b), a.rows() * a.cols()};
  std::vector<float> scratch(a.cols()), ra(a.cols()), rb(a.cols());
  Accumulator acc;
  for (uint64_t r = 0; r < a.rows(); ++r) {
    InputOrderRow(a, map.A(r), scratch, ra);
    InputOrderRow(b, map.B(r), scratch, rb);
    acc.Add(ra, rb);
  }
  acc.Finish(m);
  return m;
}

MatrixDiff DiffEmbedding(const Embedding& a, const Embedding& b, uint64_t vocab, uint64_t dim) {
  const auto storage = [](const Embedding& e) { return e.packed ? e.packed->scheme().ToString() : std::string("dense"); };
  MatrixDiff m{"model.embed_tokens", storage(a), storage(b), vocab * dim};
  std::vector<float> ra(dim), rb(dim);
  Accumulator acc;
  for (uint64_t id = 0; id < vocab; ++id) {
    a.Row(id, ra);
    b.Row(id, rb);
    acc.Add(ra, rb);
  }
  acc.Finish(m);
  return m;
}

}  // namespace

std::vector<MatrixDiff> DiffWeights(StreamedModel& from, StreamedModel& to,
                                    const std::function<void(size_t, size_t)>& progress) {
  const ModelConfig& a = from.model.config;
  const ModelConfig& b = to.model.config;
  if (a.n_layers != b.n_layers || a.dim != b.dim || a.vocab_size != b.vocab_size || a.head_dim != b.head_dim ||
      a.tie_embeddings != b.tie_embeddings)
    Fail("the models differ in shape: {} layers, dim {}, vocab {}{} against {} layers, dim {}, vocab {}{}", a.n_layers,
         a.dim, a.vocab_size, a.tie_embeddings ? ", tied lm_head" : "", b.n_layers, b.dim, b.vocab_size,
         b.tie_embeddings ? ", tied lm_head" : "");
  std::vector<MatrixDiff> out;
  out.push_back(DiffEmbedding(from.model.weights.embed, to.model.weights.embed, a.vocab_size, a.dim));
  const auto block = [](StreamedModel& s, size_t i) {
    return s.read_layer ? s.read_layer(i) : std::move(s.model.weights.layers[i]);
  };
  for (size_t i = 0; i < a.n_layers; ++i) {
    const LayerWeights la = block(from, i), lb = block(to, i);
    const std::vector<ConstBlockLinear> xa = BlockLinears(la), xb = BlockLinears(lb);
    if (xa.size() != xb.size())
      Fail("model.layers.{}: {} linears in one model and {} in the other", i, xa.size(), xb.size());
    for (size_t k = 0; k < xa.size(); ++k)
      out.push_back(DiffLinear(fmt::format("model.layers.{}.{}", i, xa[k].name), *xa[k].linear, *xb[k].linear,
                               RowMapFor(a, b, xa[k].name)));
    if (progress) progress(i + 1, a.n_layers);
  }
  from.read_layer = to.read_layer = nullptr;  // the blocks were consumed
  if (!a.tie_embeddings) out.push_back(DiffLinear("lm_head", from.model.weights.lm_head, to.model.weights.lm_head));
  return out;
}

}  // namespace lowbit
