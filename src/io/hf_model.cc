#include "io/hf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/file_util.h"
#include "io/engine_checkpoint.h"
#include "io/fused_projections.h"
#include "io/hf_names.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "io/stacked_experts.h"

namespace lowbit {
namespace {

// The suffixes a quantized linear P may have in a lowbit checkpoint (QuantizedLinears::Load and
// LoadOutliers check which of them its scheme needs); a dense linear has P.weight.
constexpr std::string_view kQuantizedSuffixes[] = {".weight_packed", ".weight_scale", ".weight_zero_point",
                                                   ".weight_global_scale", ".weight_g_idx", ".input_order"};
constexpr std::string_view kOutlierSuffixes[] = {".outlier_columns", ".outlier_weight"};
// Where the decoder's tensors are: "model." (and "lm_head"), or inside Gemma 3's image-text checkpoints
// "language_model.model." ("language_model.lm_head", as the Hub stores them) or "model.language_model."
// (as transformers 4.5x saved them). Their vision tower is not read.
struct TensorNames {
  std::string body = "model.", lm_head = "lm_head";
  std::string layers() const { return body + "layers."; }
  std::string embed() const { return body + "embed_tokens.weight"; }
  std::string norm() const { return body + "norm.weight"; }
  std::string layer(uint64_t i) const { return fmt::format("{}layers.{}.", body, i); }
  // Names of this architecture outside the blocks: with layers(), the names whose unused tensors are
  // errors rather than warnings.
  std::vector<std::string> ends() const { return {body + "embed_tokens.", body + "norm.", lm_head + "."}; }
};
constexpr size_t kWarnListed = 5;  // unused tensors named in the warning

// Whether block linear `name` is a routed expert's (what io/stacked_experts.h reads in a stacked block).
bool RoutedExpert(const std::string& name) { return name.starts_with("mlp.experts."); }

bool FusedPart(const std::vector<FusedProjection>& fused, const std::string& name) {
  return std::any_of(fused.begin(), fused.end(), [&](const FusedProjection& f) {
    return std::find(f.parts.begin(), f.parts.end(), name) != f.parts.end();
  });
}

const LinearShape& ShapeOf(const std::vector<LinearShape>& shapes, const std::string& name) {
  for (const LinearShape& s : shapes)
    if (s.name == name) return s;
  Fail("internal: no block linear named '{}'", name);
}

// The fused matrix's shape: its parts' rows one under the other (one bias for all, or none).
LinearShape FusedShape(const FusedProjection& f, const std::vector<LinearShape>& shapes) {
  LinearShape whole = ShapeOf(shapes, f.parts.front());
  whole.name = f.name;
  whole.rows = 0;
  for (const std::string& part : f.parts) whole.rows += ShapeOf(shapes, part).rows;
  return whole;
}

std::string ShapeText(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The block index of "<layers>N.<rest>", if `name` is one.
std::optional<uint64_t> BlockOf(std::string_view name, std::string_view layers) {
  if (!name.starts_with(layers)) return std::nullopt;
  const std::string_view rest = name.substr(layers.size());
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.') return std::nullopt;
  return n;
}

class HfTensors {
 public:
  // The quantization config is read first so that a foreign quantized checkpoint fails with
  // "not supported" rather than with a missing-tensor or dtype error.
  HfTensors(const std::filesystem::path& folder, const LoadOptions& options)
      : quantized_(QuantizedLinears::FromFolder(folder)),
        engine_(EngineLinears::FromFolder(folder)),
        model_(SafetensorsModel::Open(folder)),
        options_(options) {
    quantized_.CheckTensors(model_);
    if (Has("language_model.model.embed_tokens.weight")) names_ = {"language_model.model.", "language_model.lm_head"};
    else if (Has("model.language_model.embed_tokens.weight")) names_ = {"model.language_model.", "lm_head"};
  }

  const TensorNames& names() const { return names_; }
  const SafetensorsModel& model() const { return model_; }

  bool Has(const std::string& name) const { return model_.Find(name) != nullptr; }
  // Whether linear `name` is stored in an engine format (GPTQ, AWQ, compressed-tensors).
  bool EngineQuantized(const std::string& name) const { return engine_ && engine_->Has(model_, name); }
  bool HasLinear(const std::string& name) const {
    return Has(name + ".weight") || quantized_.Has(name) || EngineQuantized(name);
  }
  // The fused projections block i stores (a lowbit folder saved from Phi-3 or GLM-4 stores them split).
  std::vector<FusedProjection> Fused(const ModelConfig& c, uint32_t i) const {
    std::vector<FusedProjection> out = FusedProjections(c, i);
    std::erase_if(out, [&](const FusedProjection& f) { return !HasLinear(names_.layer(i) + f.name); });
    return out;
  }
  // Whether block i stores stacked experts (a lowbit folder saved from GPT-OSS or Llama 4 stores one linear each).
  bool Stacked(const ModelConfig& c, uint32_t i) const {
    return c.moe(i) && HasStackedExpertTensors(model_, c, names_.layer(i));
  }

  // The shard holding `name`, for messages.
  std::string FileOf(std::string_view name) const {
    for (const SafetensorsFile& f : model_.shards())
      if (f.Find(name)) return f.path().string();
    return model_.path().string();
  }

  // Every tensor of the checkpoint against what a model of config `c` reads, from the headers
  // alone (before any tensor is converted): the tensors it needs exist with the config's shapes,
  // and each other tensor is an Error when it looks like a weight of this architecture (a block
  // past num_hidden_layers, a bias or module a block does not have, a second lm_head) or a warning
  // on stderr (rotary_emb.inv_freq buffers, heads of other tasks). `config` names config.json.
  void CheckConsistency(const ModelConfig& c, const std::string& config) {
    std::map<std::string, std::vector<uint64_t>, std::less<>> dense;  // name -> shape ({} = checked on load)
    std::set<std::string, std::less<>> optional;                       // may be absent
    auto linear = [&](const std::string& p, uint64_t rows, uint64_t cols, bool bias) {
      if (quantized_.Has(p)) {
        for (std::string_view s : kQuantizedSuffixes) optional.insert(p + std::string(s));
      } else if (EngineQuantized(p)) {
        for (const std::string& s : engine_->suffixes()) optional.insert(p + s);
      } else {
        dense[p + ".weight"] = {rows, cols};
      }
      if (bias) dense[p + ".bias"] = {rows};
      for (std::string_view s : kOutlierSuffixes) optional.insert(p + std::string(s));
    };
    const std::string lm_head = names_.lm_head;
    dense[names_.embed()] = {c.vocab_size, c.dim};
    dense[names_.norm()] = {c.dim};
    for (uint32_t i = 0; i < c.n_layers; ++i) {
      const std::string p = names_.layer(i);
      // FP8 KV-cache scales (vLLM's; lowbit reads a compressed-tensors kv_cache_scheme's, or kv_cache_scales.json)
      if (engine_ && (engine_->quant_method() == "compressed-tensors" || engine_->quant_method() == "fp8"))
        for (char which : {'k', 'v'})
          for (const std::string& s : KvScaleSuffixes(which)) optional.insert(p + "self_attn." + s);
      for (const HfBlockVector& v : HfBlockVectors(c, i)) dense[p + v.name] = v.shape;
      const std::vector<FusedProjection> fused = Fused(c, i);
      const bool stacked = Stacked(c, i);
      const std::vector<LinearShape> shapes = BlockLinearShapes(c, i);
      for (const LinearShape& s : shapes)
        if (!FusedPart(fused, s.name) && (!stacked || !RoutedExpert(s.name)))
          linear(p + HfLinearName(c, s.name), s.rows, s.cols, s.bias);
      for (const FusedProjection& f : fused) {
        const LinearShape whole = FusedShape(f, shapes);
        linear(p + f.name, whole.rows, whole.cols, whole.bias);
      }
      if (stacked)
        for (auto& [name, shape] : StackedExpertShapes(c, p, StackedExpertsLayout(model_, c, p))) dense[name] = shape;
    }
    if (!c.tie_embeddings && HasLinear(lm_head)) linear(lm_head, c.vocab_size, c.dim, false);
    if (c.tie_embeddings && quantized_.Has(lm_head))
      Fail("{}: tensor '{}.weight_packed' is a quantized lm_head, but {}: tie_word_embeddings is true, so it "
           "would be ignored for {}", FileOf(lm_head + ".weight_packed"), lm_head, config, names_.embed());
    // Tied: a stored lm_head.weight is accepted only when it equals the embeddings (SameAsEmbeddings).
    if (c.tie_embeddings && Has(lm_head + ".weight")) tied_lm_head_ = true;

    if (engine_ && !engine_->AnyQuantized(model_))  // a dense model must not run under a quantized config
      Fail("{}: quantization_config says {}, but no linear of {} is stored quantized", engine_->config_path(),
           engine_->quant_method(), model_.path().string());
    for (const auto& [name, shape] : dense) {
      const TensorView& t = model_.Get(name);  // "no tensor" naming the checkpoint
      if (t.shape != shape)
        Fail("{}: tensor '{}' has shape {}, expected {} from {}", FileOf(name), name, ShapeText(t.shape),
             ShapeText(shape), config);
    }
    std::vector<std::string> unused;
    for (const std::string& name : model_.names()) {
      if (dense.contains(name) || optional.contains(name) || (tied_lm_head_ && name == lm_head + ".weight")) continue;
      const std::optional<uint64_t> block = BlockOf(name, names_.layers());
      if (block && *block >= c.n_layers && *block < uint64_t{c.n_layers} + c.nextn_layers) {
        unused.push_back(name);  // multi-token prediction: not run
        continue;
      }
      if (block && *block >= c.n_layers)
        Fail("{}: tensor '{}' belongs to block {}, but {}: num_hidden_layers is {}; the checkpoint and its "
             "config.json disagree on the model's depth", FileOf(name), name, *block, config, c.n_layers);
      const bool ours = block.has_value() ||
                        std::ranges::any_of(names_.ends(), [&](const std::string& p) { return name.starts_with(p); });
      if (ours && !name.ends_with(".inv_freq"))  // inv_freq: a RoPE buffer, recomputed from rope_theta
        Fail("{}: tensor '{}' is not part of a {} model as {} describes it, and would be ignored", FileOf(name), name,
             c.architecture, config);
      unused.push_back(name);
    }
    if (!unused.empty()) {
      std::string list = fmt::format("{}", fmt::join(unused.begin(), unused.begin() + std::min(unused.size(), kWarnListed), ", "));
      if (unused.size() > kWarnListed) list += fmt::format(" and {} more", unused.size() - kWarnListed);
      std::fprintf(stderr, "lowbit: warning: %s: %zu tensor%s not used by a %s model, ignored: %s\n",
                   model_.path().string().c_str(), unused.size(), unused.size() == 1 ? " is" : "s are",
                   c.architecture.c_str(), list.c_str());
    }
  }

  // Tied embeddings beside a stored lm_head.weight (transformers ties and drops it, vLLM skips it):
  // fine when it holds the embeddings' values, an Error otherwise, since the model would silently
  // run another output layer than the checkpoint's.
  void CheckTiedLmHead(const Embedding& table, uint64_t rows, uint64_t cols, const std::string& config) const {
    if (!tied_lm_head_) return;
    const std::string lm_head = names_.lm_head + ".weight";
    const TensorView& t = model_.Get(lm_head);
    bool same = t.numel() == rows * cols;
    const uint64_t width = DTypeSize(t.dtype);
    std::vector<float> values(cols), embed(cols);  // a row at a time: no copy of either table
    for (uint64_t r = 0; same && r < rows; ++r) {
      ToFloat32(TensorView{t.name, t.dtype, {cols}, t.data.subspan(r * cols * width, cols * width)}, values);
      table.Row(r, embed);
      same = std::memcmp(values.data(), embed.data(), cols * 4) == 0;
    }
    ReleasePages(t.data);
    if (!same)
      Fail("{}: tensor '{}' differs from '{}', but {}: tie_word_embeddings is true, so the lm_head would be "
           "ignored; set tie_word_embeddings to false to use it, or drop the tensor",
           FileOf(lm_head), lm_head, names_.embed(), config);
  }

  // ToFloat32 in slices, dropping each slice's mapped pages once converted: the peak is the
  // loaded model plus one slice, not plus the largest tensor (a 7B embedding is 0.5 GB). Each
  // piece is checked for NaN / Inf while it is still in cache.
  std::vector<float> ToFloat32Releasing(const TensorView& t) const {
    constexpr uint64_t kSlice = uint64_t{1} << 22, kPiece = uint64_t{1} << 14;  // elements
    const uint64_t n = t.numel(), width = DTypeSize(t.dtype);
    if (t.data.size() != n * width) return ToFloat32(t);  // let ToFloat32 report the mismatch
    std::vector<float> out(n);
    for (uint64_t begin = 0; begin < n; begin += kSlice) {
      const uint64_t count = std::min(kSlice, n - begin);
      for (uint64_t piece = begin; piece < begin + count; piece += kPiece) {
        const uint64_t m = std::min(kPiece, begin + count - piece);
        const std::span<float> dst = std::span(out).subspan(piece, m);
        ToFloat32(TensorView{t.name, t.dtype, {m}, t.data.subspan(piece * width, m * width)}, dst);
        if (!options_.allow_nonfinite) CheckFinite(dst, piece, t.name, FileOf(t.name));
      }
      ReleasePages(t.data.subspan(begin * width, count * width));
    }
    return out;
  }

  QuantizedTensor Sixteen(const TensorView& t, uint64_t rows, uint64_t cols) const {
    QuantizedTensor q = SixteenBitMatrix(t.data, t.dtype == DType::kBF16, rows, cols, options_.allow_nonfinite, t.name,
                                         FileOf(t.name), ReleasePages);
    ReleasePages(t.data);
    return q;
  }

  // A 16-bit table stays as stored (Embedding::packed: half the memory of fp32); others are widened.
  Embedding EmbeddingTable(const std::string& name, uint64_t rows, uint64_t cols) const {
    const TensorView& t = model_.Get(name);
    if (t.dtype != DType::kBF16 && t.dtype != DType::kF16) return {Vector(name, rows * cols), std::nullopt};
    if (t.numel() != rows * cols)
      Fail("{}: tensor '{}' has {} values, expected {}", model_.path().string(), name, t.numel(), rows * cols);
    return {{}, Sixteen(t, rows, cols)};
  }

  std::vector<float> Vector(const std::string& name, uint64_t n) const {
    const TensorView& t = model_.Get(name);
    if (t.numel() != n) Fail("{}: tensor '{}' has {} values, expected {}", model_.path().string(), name, t.numel(), n);
    return ToFloat32Releasing(t);
  }

  Linear Matrix(const std::string& name, uint64_t rows, uint64_t cols, bool with_bias) const {
    Linear l;
    if (quantized_.Has(name)) {  // a lowbit quantized checkpoint (io/quantized_checkpoint.h)
      l.weight = quantized_.Load(model_, name, rows, cols);
      l.input_order = quantized_.LoadInputOrder(model_, name, cols);
    } else if (EngineQuantized(name)) {  // GPTQ, AWQ, compressed-tensors (io/engine_checkpoint.h)
      OrderedTensor t = engine_->Load(model_, name, rows, cols);
      l.weight = std::move(t.tensor);
      l.input_order = std::move(t.order);
    } else {
      const TensorView& t = model_.Get(name + ".weight");
      if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
        Fail("{}: tensor '{}.weight' has shape {}, expected [{}, {}]", model_.path().string(), name,
             ShapeText(t.shape), rows, cols);
      const bool sixteen = t.dtype == DType::kBF16 || t.dtype == DType::kF16;
      if (options_.keep_16bit && sixteen) l.weight = Sixteen(t, rows, cols);
      else l.weight = DenseMatrix{rows, cols, ToFloat32Releasing(t)};
    }
    if (const auto* q = std::get_if<QuantizedTensor>(&l.weight); q && !options_.allow_nonfinite) {
      std::string scales = name + (model_.Find(name + ".scales") ? ".scales" : ".weight_scale");  // GPTQ / AWQ: .scales
      if (model_.Find(name + ".weight_scale_inv")) scales += "_inv";                                // FP8 block weights
      CheckScalesFinite(*q, scales, FileOf(scales));
      std::string codes = name + ".weight";  // FP8 checkpoints; lowbit folders pack codes as .weight_packed
      if (model_.Find(name + ".weight_packed")) codes += "_packed";
      CheckCodesFinite(*q, codes, FileOf(codes));
    }
    if (with_bias) l.bias = Vector(name + ".bias", rows);
    l.input_quant = engine_ ? engine_->InputQuantOf(model_, name) : quantized_.InputQuantOf(name);
    l.input_hadamard = quantized_.InputHadamardOf(name);
    l.outliers = quantized_.LoadOutliers(model_, name, rows, cols);
    if (l.outliers && !options_.allow_nonfinite)
      CheckFinite(l.outliers->weight.values, 0, name + ".outlier_weight", FileOf(name + ".outlier_weight"));
    return l;
  }

 private:
  QuantizedLinears quantized_;
  std::optional<EngineLinears> engine_;
  SafetensorsModel model_;
  LoadOptions options_;
  bool tied_lm_head_ = false;
  TensorNames names_;
};

}  // namespace

StreamedModel OpenHfModel(const std::filesystem::path& folder, const LoadOptions& options) {
  const std::filesystem::path config_path = folder / "config.json";
  if (!std::filesystem::exists(config_path)) Fail("{}: no config.json (expected a Hugging Face model folder)", folder.string());
  StreamedModel s;
  Model& m = s.model;
  m.source = folder.string();
  m.config = ReadHfConfig(config_path);
  const ModelConfig c = m.config;
  auto t = std::make_shared<HfTensors>(folder, options);
  t->CheckConsistency(c, config_path.string());
  const TensorNames names = t->names();
  m.weights.embed = t->EmbeddingTable(names.embed(), c.vocab_size, c.dim);
  t->CheckTiedLmHead(m.weights.embed, c.vocab_size, c.dim, config_path.string());
  m.weights.layers.resize(c.n_layers);
  m.weights.final_norm = NormFromCheckpoint(c, t->Vector(names.norm(), c.dim));
  if (!c.tie_embeddings && t->HasLinear(names.lm_head)) {
    m.weights.lm_head = t->Matrix(names.lm_head, c.vocab_size, c.dim, false);
  } else {
    // Untied without an lm_head: the embeddings, as llama.cpp falls back to them (transformers would
    // start from random weights instead), said on stderr.
    if (!c.tie_embeddings)
      std::fprintf(stderr, "lowbit: warning: %s: tie_word_embeddings is false but the checkpoint has no %s.weight; "
                   "using %s as the output matrix, as llama.cpp does\n", config_path.string().c_str(),
                   names.lm_head.c_str(), names.embed().c_str());
    // The table in 16 bits where the linears stay 16-bit (keep_16bit), as the GGUF loader gives it: a
    // widened copy was twice the table's bytes beside it, and read at every decode step.
    const std::optional<QuantizedTensor>& table = m.weights.embed.packed;
    if (options.keep_16bit && table && IsPlainFloat(*table)) m.weights.lm_head.weight = *table;
    else m.weights.lm_head.weight = DenseMatrix{c.vocab_size, c.dim, m.weights.embed.Widened()};
  }
  ValidateEnds(m.config, m.weights, m.source);
  s.read_layer = [t = std::shared_ptr<const HfTensors>(t), c, source = m.source, names](size_t i) {
    const std::string p = names.layer(i);
    LayerWeights l = EmptyLayer(c, i);
    for (const HfBlockVector& v : HfBlockVectors(c, i))
      l.*v.member = VectorFromCheckpoint(c, v, t->Vector(p + v.name, v.numel()));
    const std::vector<FusedProjection> fused = t->Fused(c, static_cast<uint32_t>(i));
    const std::vector<LinearShape> shapes = BlockLinearShapes(c, i);
    const std::vector<BlockLinear> slots = BlockLinears(l);
    const bool stacked = t->Stacked(c, static_cast<uint32_t>(i));
    for (size_t k = 0; k < shapes.size(); ++k)
      if (!FusedPart(fused, shapes[k].name) && (!stacked || !RoutedExpert(shapes[k].name)))
        *slots[k].linear = t->Matrix(p + HfLinearName(c, shapes[k].name), shapes[k].rows, shapes[k].cols, shapes[k].bias);
    for (const FusedProjection& f : fused) {
      const LinearShape whole = FusedShape(f, shapes);
      std::vector<uint64_t> rows;
      for (const std::string& part : f.parts) rows.push_back(ShapeOf(shapes, part).rows);
      std::vector<Linear> parts = SplitRows(t->Matrix(p + f.name, whole.rows, whole.cols, whole.bias), rows, p + f.name,
                                            t->FileOf(p + f.name + ".weight"));
      for (size_t k = 0; k < parts.size(); ++k)
        for (size_t slot = 0; slot < shapes.size(); ++slot)
          if (shapes[slot].name == f.parts[k]) *slots[slot].linear = std::move(parts[k]);
    }
    if (stacked)
      l.experts = ReadStackedExperts(t->model(), p, c, [&](const std::string& name, uint64_t n) {
        return t->Vector(name, n);
      });
    ValidateLayer(c, l, i, source);
    return l;
  };
  return s;
}

Model LoadHfModel(const std::filesystem::path& folder, const LoadOptions& options) {
  StreamedModel s = OpenHfModel(folder, options);
  for (size_t i = 0; i < s.model.weights.layers.size(); ++i) s.model.weights.layers[i] = s.read_layer(i);
  return std::move(s.model);
}

}  // namespace lowbit
