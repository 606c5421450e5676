#include "io/hf_model.h"

#include <fmt/format.h>

#include <memory>

#include "core/error.h"
#include "core/file_util.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"

namespace lowbit {
namespace {

class HfTensors {
 public:
  // The quantization config is read first so that a foreign quantized checkpoint fails with
  // "not supported" rather than with a missing-tensor or dtype error.
  explicit HfTensors(const std::filesystem::path& folder)
      : quantized_(QuantizedLinears::FromFolder(folder)), model_(SafetensorsModel::Open(folder)) {
    quantized_.CheckTensors(model_);
  }

  bool Has(const std::string& name) const { return model_.Find(name) != nullptr; }

  // ToFloat32 in slices, dropping each slice's mapped pages once converted: the peak is the
  // loaded model plus one slice, not plus the largest tensor (a 7B embedding is 0.5 GB).
  static std::vector<float> ToFloat32Releasing(const TensorView& t) {
    constexpr uint64_t kSlice = uint64_t{1} << 22;  // elements
    const uint64_t n = t.numel(), width = DTypeSize(t.dtype);
    if (t.data.size() != n * width) return ToFloat32(t);  // let ToFloat32 report the mismatch
    std::vector<float> out(n);
    for (uint64_t begin = 0; begin < n; begin += kSlice) {
      const uint64_t count = std::min(kSlice, n - begin);
      const TensorView slice{t.name, t.dtype, {count}, t.data.subspan(begin * width, count * width)};
      ToFloat32(slice, std::span(out).subspan(begin, count));
      ReleasePages(slice.data);
    }
    return out;
  }
  bool HasLinear(const std::string& name) const { return Has(name + ".weight") || quantized_.Has(name); }

  std::vector<float> Vector(const std::string& name, uint64_t n) const {
    const TensorView& t = model_.Get(name);
    if (t.numel() != n) Fail("{}: tensor '{}' has {} values, expected {}", model_.path().string(), name, t.numel(), n);
    return ToFloat32Releasing(t);
  }

  Linear Matrix(const std::string& name, uint64_t rows, uint64_t cols, bool with_bias) const {
    Linear l;
    if (quantized_.Has(name)) {  // a lowbit quantized checkpoint (io/quantized_checkpoint.h)
      l.weight = quantized_.Load(model_, name, rows, cols);
    } else {
      const TensorView& t = model_.Get(name + ".weight");
      if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
        Fail("{}: tensor '{}.weight' has shape {}, expected [{}, {}]", model_.path().string(), name,
             fmt::format("[{}]", fmt::join(t.shape, ", ")), rows, cols);
      l.weight = DenseMatrix{rows, cols, ToFloat32Releasing(t)};
    }
    if (with_bias) l.bias = Vector(name + ".bias", rows);
    l.input_quant = quantized_.InputQuantOf(name);
    l.input_hadamard = quantized_.InputHadamardOf(name);
    l.outliers = quantized_.LoadOutliers(model_, name, rows, cols);
    return l;
  }

 private:
  QuantizedLinears quantized_;
  SafetensorsModel model_;
};

}  // namespace

StreamedModel OpenHfModel(const std::filesystem::path& folder) {
  const std::filesystem::path config_path = folder / "config.json";
  if (!std::filesystem::exists(config_path)) Fail("{}: no config.json (expected a Hugging Face model folder)", folder.string());
  StreamedModel s;
  Model& m = s.model;
  m.source = folder.string();
  m.config = ReadHfConfig(config_path);
  const ModelConfig c = m.config;
  auto t = std::make_shared<const HfTensors>(folder);
  m.weights.embed = t->Vector("model.embed_tokens.weight", uint64_t{c.vocab_size} * c.dim);
  m.weights.layers.resize(c.n_layers);
  m.weights.final_norm = t->Vector("model.norm.weight", c.dim);
  if (!c.tie_embeddings && t->HasLinear("lm_head")) {
    m.weights.lm_head = t->Matrix("lm_head", c.vocab_size, c.dim, false);
  } else {
    m.weights.lm_head.weight = DenseMatrix{c.vocab_size, c.dim, m.weights.embed};
  }
  ValidateEnds(m.config, m.weights, m.source);
  s.read_layer = [t, c, source = m.source](size_t i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights l;
    l.attn_norm = t->Vector(p + "input_layernorm.weight", c.dim);
    l.wq = t->Matrix(p + "self_attn.q_proj", c.q_dim(), c.dim, c.qkv_bias);
    l.wk = t->Matrix(p + "self_attn.k_proj", c.kv_dim(), c.dim, c.qkv_bias);
    l.wv = t->Matrix(p + "self_attn.v_proj", c.kv_dim(), c.dim, c.qkv_bias);
    l.wo = t->Matrix(p + "self_attn.o_proj", c.dim, c.q_dim(), false);
    l.ffn_norm = t->Vector(p + "post_attention_layernorm.weight", c.dim);
    l.w_gate = t->Matrix(p + "mlp.gate_proj", c.ffn_dim, c.dim, false);
    l.w_up = t->Matrix(p + "mlp.up_proj", c.ffn_dim, c.dim, false);
    l.w_down = t->Matrix(p + "mlp.down_proj", c.dim, c.ffn_dim, false);
    ValidateLayer(c, l, i, source);
    return l;
  };
  return s;
}

Model LoadHfModel(const std::filesystem::path& folder) {
  StreamedModel s = OpenHfModel(folder);
  for (size_t i = 0; i < s.model.weights.layers.size(); ++i) s.model.weights.layers[i] = s.read_layer(i);
  return std::move(s.model);
}

}  // namespace lowbit
