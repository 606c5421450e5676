#include "io/llama2c.h"

#include <cstdlib>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/file_util.h"

namespace lowbit {
namespace {

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42"

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {}

  template <class T>
  T Scalar(const char* what) {
    T v;
    Need(sizeof(T), what);
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::vector<float> Floats(uint64_t n, const std::string& what) {
    const uint64_t bytes = CheckedMul(n, 4, source_);
    Need(bytes, what.c_str());
    std::vector<float> out(n);
    std::memcpy(out.data(), bytes_.data() + pos_, bytes);
    pos_ += bytes;
    return out;
  }
  void Skip(uint64_t bytes, const char* what) {
    Need(bytes, what);
    pos_ += bytes;
  }
  void Seek(uint64_t pos, const char* what) {
    if (pos > bytes_.size())
      Fail("{}: truncated: '{}' needs {} bytes, the file has {}", source_, what, pos, bytes_.size());
    pos_ = pos;
  }
  uint64_t remaining() const { return bytes_.size() - pos_; }

 private:
  void Need(uint64_t n, const char* what) {
    if (n > bytes_.size() - pos_)
      Fail("{}: truncated: '{}' needs {} bytes at offset {}, the file has {}", source_, what, n, pos_, bytes_.size());
  }
  std::span<const std::byte> bytes_;
  std::string source_;
  uint64_t pos_ = 0;
};

Linear Dense(std::vector<float> values, uint64_t rows, uint64_t cols) {
  Linear l;
  l.weight = DenseMatrix{rows, cols, std::move(values)};
  return l;
}

// Plausibility before allocation: every field that scales an array is checked against the bytes
// the file holds, so a header asking for 2^24 layers is refused before anything is allocated, and
// the error names the field. Then the exact size the header implies must match the file.
void CheckSizeAgainstHeader(const ModelConfig& c, bool v1, bool shared, uint64_t file_bytes, uint64_t weight_bytes,
                            const std::string& source) {
  // Each field is at most 2^24 here, so only kv x dim (up to 2^72) needs a checked product.
  const uint64_t dim = c.dim, kv = uint64_t{c.n_kv_heads} * c.head_dim, hidden = c.ffn_dim;
  const uint64_t rope_floats = v1 ? 0 : uint64_t{c.max_position} * (c.head_dim / 2) * 2;
  const uint64_t embed_floats = uint64_t{c.vocab_size} * dim * (shared ? 1 : 2);
  const auto check = [&](const char* field, uint64_t value, uint64_t floats) {
    if (floats > weight_bytes / 4)
      Fail("{}: truncated, or a corrupt header: field {} = {} alone needs {} bytes of weights, the file has {} "
           "after its header", source, field, value, CheckedMul(floats, 4, source), weight_bytes);
  };
  check("dim", c.dim, dim * dim);
  check("n_kv_heads", c.n_kv_heads, CheckedMul(kv, dim, source));
  check("hidden_dim", c.ffn_dim, 3 * hidden * dim);
  check("vocab_size", c.vocab_size, embed_floats);
  check("seq_len", c.max_position, rope_floats);
  // Bounded now by the file size, so the sums below cannot overflow either.
  const uint64_t layer_floats = 2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * hidden * dim;
  check("n_layers", c.n_layers, CheckedMul(c.n_layers, layer_floats, source));
  const uint64_t total = (uint64_t{c.n_layers} * layer_floats + embed_floats + dim + rope_floats) * 4;
  if (total > weight_bytes)
    Fail("{}: truncated: the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, "
         "seq_len {}) needs {} bytes of weights, the file has {} after its header ({} bytes in all)",
         source, c.dim, c.ffn_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.max_position, total,
         weight_bytes, file_bytes);
  if (total < weight_bytes)
    Fail("{}: {} unexpected bytes after the last tensor (header and file size disagree)", source,
         weight_bytes - total);
}

}  // namespace

Model LoadLlama2cModel(const std::filesystem::path& path) {
  const MappedFile file(path);
  const std::string source = path.string();
  Reader r(file.bytes(), source);
  int32_t header[7];
  bool v1 = false, shared = true;
  const uint32_t first = r.Scalar<uint32_t>("header");
  if (first == kMagicV1) {
    const int32_t version = r.Scalar<int32_t>("version");
    if (version != 1) Fail("{}: llama2.c export version {} is not supported (only legacy and v1 fp32)", source, version);
    v1 = true;
    for (int32_t& h : header) h = r.Scalar<int32_t>("header");
    shared = r.Scalar<uint8_t>("shared_classifier") != 0;
    r.Seek(256, "v1 header (256 bytes)");
  } else {
    r.Seek(0, "header");
    for (int32_t& h : header) h = r.Scalar<int32_t>("header");
    shared = header[5] > 0;
  }
  Model m;
  m.source = source;
  ModelConfig& c = m.config;
  c.architecture = "llama2.c";
  const auto field = [&](int64_t v, const char* name) {
    if (v <= 0 || v > (1 << 24)) Fail("{}: header field {} = {} is out of range", source, name, v);
    return static_cast<uint32_t>(v);
  };
  c.dim = field(header[0], "dim");
  c.ffn_dim = field(header[1], "hidden_dim");
  c.n_layers = field(header[2], "n_layers");
  c.n_heads = field(header[3], "n_heads");
  c.n_kv_heads = field(header[4], "n_kv_heads");
  // A negative vocab_size means an unshared classifier; widened first, so INT32_MIN cannot overflow.
  c.vocab_size = field(std::abs(int64_t{header[5]}), "vocab_size");
  c.max_position = field(header[6], "seq_len");
  if (c.dim % c.n_heads != 0) Fail("{}: dim {} is not a multiple of n_heads {}", source, c.dim, c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.rope_style = RopeStyle::kAdjacent;
  c.norm_eps = 1e-5f;
  c.tie_embeddings = shared;
  // Before Validate, whose limits would name the Hugging Face field instead of the header's.
  CheckSizeAgainstHeader(c, v1, shared, file.bytes().size(), r.remaining(), source);
  c.Validate(source);

  const uint64_t L = c.n_layers, dim = c.dim, kv = c.kv_dim(), hidden = c.ffn_dim, vocab = c.vocab_size;
  ModelWeights& w = m.weights;
  w.layers.resize(L);
  auto per_layer_vectors = [&](auto member, const char* name) {
    for (uint64_t l = 0; l < L; ++l) w.layers[l].*member = r.Floats(dim, name);
  };
  auto per_layer_linear = [&](auto member, uint64_t rows, uint64_t cols, const char* name) {
    for (uint64_t l = 0; l < L; ++l) w.layers[l].*member = Dense(r.Floats(rows * cols, name), rows, cols);
  };
  if (v1) {
    per_layer_vectors(&LayerWeights::attn_norm, "rms_att_weight");
    per_layer_vectors(&LayerWeights::ffn_norm, "rms_ffn_weight");
    w.final_norm = r.Floats(dim, "rms_final_weight");
    w.embed.values = r.Floats(vocab * dim, "tok_embeddings");
  } else {
    w.embed.values = r.Floats(vocab * dim, "token_embedding_table");
    per_layer_vectors(&LayerWeights::attn_norm, "rms_att_weight");
  }
  per_layer_linear(&LayerWeights::wq, c.q_dim(), dim, "wq");
  per_layer_linear(&LayerWeights::wk, kv, dim, "wk");
  per_layer_linear(&LayerWeights::wv, kv, dim, "wv");
  per_layer_linear(&LayerWeights::wo, dim, c.q_dim(), "wo");
  if (!v1) per_layer_vectors(&LayerWeights::ffn_norm, "rms_ffn_weight");
  per_layer_linear(&LayerWeights::w_gate, hidden, dim, "w1");
  per_layer_linear(&LayerWeights::w_down, dim, hidden, "w2");
  per_layer_linear(&LayerWeights::w_up, hidden, dim, "w3");
  if (!v1) {
    w.final_norm = r.Floats(dim, "rms_final_weight");
    r.Skip(CheckedProduct({c.max_position, c.head_dim / 2, 4, 2}, source), "freq_cis");
  }
  w.lm_head = shared ? Dense(w.embed.values, vocab, dim) : Dense(r.Floats(vocab * dim, "wcls"), vocab, dim);
  if (r.remaining() != 0)
    Fail("{}: {} unexpected bytes after the last tensor (header and file size disagree)", source, r.remaining());
  ValidateWeights(m.config, m.weights, source);
  return m;
}

}  // namespace lowbit
