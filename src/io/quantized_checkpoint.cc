#include "io/quantized_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "formats/codec.h"
#include "io/checkpoint_folder.h"
#include "io/compressed_tensors.h"
#include "io/engine_checkpoint.h"
#include "io/hf_names.h"
#include "model/config.h"
#include "quant/column_order.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kPackedFormat = "lowbit-packed";
constexpr std::string_view kVersionKey = "lowbit.format_version";
constexpr std::string_view kSchemeKeyPrefix = "lowbit.scheme.";

// Files other quantizers put beside config.json; without a quantization_config in config.json
// they describe the checkpoint (older AutoGPTQ / AutoAWQ exports, read by io/engine_checkpoint.h).
constexpr const char* kForeignQuantConfigs[] = {"quantize_config.json", "quant_config.json"};

DType ZeroDType(ZeroType z) {
  switch (z) {
    case ZeroType::kF32: return DType::kF32;
    case ZeroType::kF16: return DType::kF16;
    case ZeroType::kBF16: return DType::kBF16;
    default: return DType::kU8;  // integer zeros, bit-packed per grid row
  }
}

std::string ShapeText(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// ---------------------------------------------------------------------------------------------
// Writing

void AddQuantized(TensorList& out, const std::string& p, const QuantizedTensor& q) {
  const QuantScheme& s = q.scheme();
  const ScaleGrid g = q.grid();
  out.Add(p + ".weight_packed", DType::kU8, {q.rows(), q.row_bytes()}, q.codes());
  if (g.cells() > 0) out.Add(p + ".weight_scale", ScaleDType(s.scale_type), {g.grid_rows, g.grid_cols}, q.scale_bytes());
  if (s.zero_type == ZeroType::kInt) {
    out.Add(p + ".weight_zero_point", DType::kU8, {g.grid_rows, PackedBytes(g.grid_cols, s.element->bits)},
            q.zero_bytes());
  } else if (s.asymmetric()) {
    out.Add(p + ".weight_zero_point", ZeroDType(s.zero_type), {g.grid_rows, g.grid_cols}, q.zero_bytes());
  }
  if (s.tensor_scale) out.AddOwned(p + ".weight_global_scale", DType::kF32, {1}, std::vector<float>{q.tensor_scale()});
  if (s.granularity.kind == GranularityKind::kGroup) {
    // Always the identity grouping: QuantizedTensor keeps columns in their original order.
    std::vector<int32_t> g_idx(q.cols());
    for (uint64_t c = 0; c < q.cols(); ++c) g_idx[c] = static_cast<int32_t>(c / s.granularity.group);
    out.AddOwned(p + ".weight_g_idx", DType::kI32, {q.cols()}, g_idx);
  }
}

// GGUF storage (K-quant super-blocks, stored biases) has no place in a folder of plain group scales:
// such linears are written as their WithFloatScales copies, kept here by linear.
using ExpandedWeights = std::map<const Linear*, QuantizedTensor>;

ExpandedWeights ExpandGgufStorage(const std::vector<NamedLinear>& linears) {
  ExpandedWeights expanded;
  for (const NamedLinear& nl : linears)
    if (const auto* q = std::get_if<QuantizedTensor>(&nl.linear->weight); q && q->scheme().gguf_storage())
      expanded.emplace(nl.linear, WithFloatScales(*q));
  return expanded;
}

// The quantized weight linear `l` is written with, or nullptr when it is dense.
const QuantizedTensor* StoredWeight(const Linear& l, const ExpandedWeights& expanded) {
  const auto it = expanded.find(&l);
  return it != expanded.end() ? &it->second : std::get_if<QuantizedTensor>(&l.weight);
}

OrderedJson QuantizationConfig(const std::vector<NamedLinear>& linears, const ExpandedWeights& expanded) {
  OrderedJson groups = OrderedJson::object(), tensors = OrderedJson::object();
  OrderedJson ignore = OrderedJson::array({"model.embed_tokens"});
  std::vector<std::pair<std::string, std::vector<std::string>>> by_scheme;  // first-seen order
  for (const NamedLinear& nl : linears) {
    const QuantizedTensor* q = StoredWeight(*nl.linear, expanded);
    if (!q) {
      ignore.push_back(nl.prefix);
      continue;
    }
    const std::string text = q->scheme().ToString();
    tensors[nl.prefix] = text;
    auto it = std::find_if(by_scheme.begin(), by_scheme.end(), [&](const auto& e) { return e.first == text; });
    if (it == by_scheme.end()) it = by_scheme.emplace(by_scheme.end(), text, std::vector<std::string>{});
    it->second.push_back(nl.prefix);
  }
  for (const auto& [text, targets] : by_scheme) {
    const std::optional<OrderedJson> args = CompressedTensorsArgs(ParseScheme(text));
    if (!args) continue;
    OrderedJson g;
    g["targets"] = targets;  // exact module names: no class-name or regex matching to get wrong
    g["format"] = kPackedFormat;
    g["weights"] = *args;
    g["input_activations"] = nullptr;
    g["output_activations"] = nullptr;
    groups[fmt::format("group_{}", groups.size())] = std::move(g);
  }
  OrderedJson qc;
  qc["quant_method"] = "compressed-tensors";
  // Not "pack-quantized": see the header comment. A compressed-tensors reader must refuse this
  // unknown format rather than misread our byte-packed codes as its int32 words.
  qc["format"] = kPackedFormat;
  qc["quantization_status"] = "compressed";
  qc["global_compression_ratio"] = nullptr;
  qc["ignore"] = std::move(ignore);
  qc["kv_cache_scheme"] = nullptr;
  qc["config_groups"] = std::move(groups);
  qc["lowbit"] = {
      {"format_version", kQuantizedCheckpointVersion},
      {"packing", "codes bit-packed LSB-first per row into bytes, rows padded to whole bytes; "
                  "integers offset-binary; weight_global_scale multiplies"},
      {"tensors", std::move(tensors)}};
  // Simulated activation quantization (W8A8 etc.): scheme and, for per-tensor schemes, the
  // calibrated static scale (and zero-point, when asymmetric) of each linear's input.
  OrderedJson inputs = OrderedJson::object();
  for (const NamedLinear& nl : linears)
    if (const std::optional<InputQuant>& iq = nl.linear->input_quant) {
      OrderedJson& entry = inputs[nl.prefix];
      entry = {{"scheme", iq->scheme.ToString()}, {"static_scale", iq->static_scale}};
      if (iq->static_zero != 0) entry["static_zero"] = iq->static_zero;
    }
  if (!inputs.empty()) qc["lowbit"]["input_quant"] = std::move(inputs);
  // Input transforms ahead of the matmul: the online Hadamard's block size (rotated models) and
  // the number of LLM.int8() full-precision columns (tensors P.outlier_columns, P.outlier_weight).
  // Act-order linears store their columns in another order (tensor P.input_order): its length.
  OrderedJson hadamard = OrderedJson::object(), outliers = OrderedJson::object(), orders = OrderedJson::object();
  for (const NamedLinear& nl : linears) {
    if (nl.linear->input_hadamard != 0) hadamard[nl.prefix] = nl.linear->input_hadamard;
    if (nl.linear->outliers) outliers[nl.prefix] = nl.linear->outliers->columns.size();
    if (!nl.linear->input_order.empty()) orders[nl.prefix] = nl.linear->input_order.size();
  }
  if (!hadamard.empty()) qc["lowbit"]["input_hadamard"] = std::move(hadamard);
  if (!outliers.empty()) qc["lowbit"]["outlier_columns"] = std::move(outliers);
  if (!orders.empty()) qc["lowbit"]["input_order"] = std::move(orders);
  return qc;
}

}  // namespace

void SaveQuantizedModel(const Model& model, const fs::path& out_dir, const fs::path& source_dir,
                        const nlohmann::json& recipe_card, size_t block_count) {
  // Everything that can fail on bad input is checked or prepared in memory before anything
  // touches disk.
  const fs::path dest = CheckpointDestination(out_dir);
  const std::string out = dest.string();
  CheckQuantizedModelTarget(model.config, dest, source_dir);
  const size_t blocks = std::min<size_t>(block_count, model.config.n_layers);
  ValidateEnds(model.config, model.weights, "model to save");
  for (size_t i = 0; i < blocks; ++i) ValidateLayer(model.config, model.weights.layers[i], i, "model to save");
  const std::vector<NamedLinear> linears = ModelLinears(model, blocks);
  if (model.config.tie_embeddings && model.weights.lm_head.quantized())
    Fail("{}: lm_head is quantized but tie_word_embeddings is true, so it would not be stored", out);

  TensorList list;
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {std::string(kVersionKey), "1"}};
  const Embedding& embed = model.weights.embed;
  const bool sixteen = embed.packed && IsPlainFloat(*embed.packed) && embed.packed->scheme().element->bits == 16;
  const std::vector<float> widened = embed.packed && !sixteen ? embed.Widened() : std::vector<float>();
  if (sixteen)  // a 16-bit table as it was loaded
    list.Add("model.embed_tokens.weight", embed.packed->scheme().element->name == "bf16" ? DType::kBF16 : DType::kF16,
             {embed.packed->rows(), embed.packed->cols()}, embed.packed->codes());
  else
    list.AddFloats("model.embed_tokens.weight", {model.config.vocab_size, model.config.dim},
                   embed.packed ? widened : embed.values);
  const ModelConfig& c = model.config;
  list.AddOwnedFloats("model.norm.weight", {c.dim}, NormToCheckpoint(c, model.weights.final_norm));
  for (size_t i = 0; i < blocks; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    for (const HfBlockVector& v : HfBlockVectors(c, i))
      list.AddOwnedFloats(p + v.name, v.shape, VectorToCheckpoint(c, v, model.weights.layers[i]));
  }
  const ExpandedWeights expanded = ExpandGgufStorage(linears);
  for (const NamedLinear& nl : linears) {
    const Linear& l = *nl.linear;
    if (const QuantizedTensor* q = StoredWeight(l, expanded)) {
      AddQuantized(list, nl.prefix, *q);
      metadata[std::string(kSchemeKeyPrefix) + nl.prefix] = q->scheme().ToString();
    } else {
      const DenseMatrix& d = std::get<DenseMatrix>(l.weight);
      list.AddFloats(nl.prefix + ".weight", {d.rows(), d.cols()}, d.values);
    }
    if (!l.bias.empty()) list.AddFloats(nl.prefix + ".bias", {l.bias.size()}, l.bias);
    if (l.outliers) {
      const OutlierColumns& o = *l.outliers;
      std::vector<int32_t> columns(o.columns.begin(), o.columns.end());
      list.AddOwned(nl.prefix + ".outlier_columns", DType::kI32, {columns.size()}, columns);
      list.Add(nl.prefix + ".outlier_weight", DType::kF32, {o.weight.rows(), o.weight.cols()}, std::span(o.weight.values));
    }
    if (!l.input_order.empty())
      list.AddOwned(nl.prefix + ".input_order", DType::kI32, {l.input_order.size()},
                    std::vector<int32_t>(l.input_order.begin(), l.input_order.end()));
  }
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();

  std::string config_text, recipe_text;
  try {
    OrderedJson config = TextOnlyConfig(OrderedJson::parse(ReadTextFile(source_dir / "config.json")));
    config["quantization_config"] = QuantizationConfig(linears, expanded);
    if (!model.config.tie_embeddings) config["tie_word_embeddings"] = false;
    if (blocks < model.config.n_layers) config["num_hidden_layers"] = blocks;
    config_text = config.dump(2) + "\n";
    recipe_text = recipe_card.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: cannot write config.json / recipe.json: {}", out, e.what());
  }

  WriteFolderAtomic(dest, [&](const fs::path& tmp) {
    WriteSafetensors(tmp / "model.safetensors", tensors, metadata);
    WriteFileAtomic(tmp / "config.json", config_text);
    WriteFileAtomic(tmp / "recipe.json", recipe_text);
    CopySideFiles(source_dir, tmp);
  });
}

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

// The shard holding `name`, for messages (the folder when absent).
std::string FileOf(const SafetensorsModel& st, std::string_view name) {
  for (const SafetensorsFile& f : st.shards())
    if (f.Find(name)) return f.path().string();
  return st.path().string();
}

}  // namespace

bool IsGptOssMxfp4(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("quantization_config") || !config.contains("architectures")) return false;
  const nlohmann::json &qc = config["quantization_config"], &archs = config["architectures"];
  return qc.is_object() && qc.value("quant_method", nlohmann::json()) == "mxfp4" && archs.is_array() &&
         !archs.empty() && archs[0] == "GptOssForCausalLM";
}

bool IsQuantizedCheckpoint(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::exists(path)) return false;
  const nlohmann::json j = ReadJsonFile(path);
  if (!j.is_object() || !j.contains("quantization_config")) return false;
  const nlohmann::json& qc = j["quantization_config"];
  return qc.is_object() && qc.contains("lowbit");
}

QuantizedLinears QuantizedLinears::FromFolder(const fs::path& folder) {
  QuantizedLinears q;
  const fs::path path = folder / "config.json";
  q.config_path_ = path.string();
  const nlohmann::json j = fs::exists(path) ? ReadJsonFile(path) : nlohmann::json();
  const char* key = j.contains("quantization_config") ? "quantization_config" : "compression_config";
  const bool has_config = j.is_object() && j.contains(key) && !j[key].is_null();
  // GPTQ, AWQ and compressed-tensors checkpoints are read by io/engine_checkpoint.h.
  if (has_config && IsEngineQuantizationConfig(j[key])) {
    q.engine_checkpoint_ = true;
    return q;
  }
  for (const char* name : kForeignQuantConfigs)
    if (!has_config && fs::exists(folder / name)) return q;
  if (!has_config) return q;
  const nlohmann::json& qc = j[key];
  // GPT-OSS as released: its experts in MXFP4 blocks, read with the stacked experts (io/stacked_experts.h).
  if (IsGptOssMxfp4(j)) return q;
  if (!qc.is_object() || !qc.contains("lowbit")) {
    std::string what = "a foreign quantization_config";
    if (qc.is_object() && qc.contains("quant_method") && qc["quant_method"].is_string()) {
      what = fmt::format("quant_method '{}'", qc["quant_method"].get<std::string>());
      if (qc.contains("format") && qc["format"].is_string())
        what += fmt::format(", format '{}'", qc["format"].get<std::string>());
    }
    Fail("{}: {} ({}) is not supported yet; lowbit loads fp32/fp16/bf16 checkpoints, its own quantized ones "
         "(quantization_config.lowbit), GPTQ, AWQ GEMM and compressed-tensors pack-quantized", q.config_path_, key, what);
  }
  const JsonView lb = JsonView(j, q.config_path_)[key]["lowbit"].ExpectObject();
  if (lb.Get<int64_t>("format_version") != kQuantizedCheckpointVersion)
    lb["format_version"].Fail(fmt::format("must be {} (the version this lowbit reads)", kQuantizedCheckpointVersion));
  // Each map is tensor prefix -> value; `value` reads and checks one.
  auto for_each = [&](const char* map, bool required, auto&& value) {
    if (!required && !lb.Has(map)) return;
    const JsonView m = lb[map].ExpectObject();
    for (const auto& [prefix, unused] : m.value().items()) {
      const JsonView v = m[prefix];
      try {
        value(prefix, v);
      } catch (const Error& e) {
        if (std::string_view(e.what()).starts_with(q.config_path_)) throw;
        v.Fail(e.what());
      }
    }
  };
  for_each("tensors", true, [&](const std::string& prefix, const JsonView& v) {
    const std::string text = v.As<std::string>();
    (void)ParseScheme(text);
    q.schemes_.emplace(prefix, text);
  });
  for_each("input_quant", false, [&](const std::string& prefix, const JsonView& v) {
    const InputQuant input{ParseScheme(v.Get<std::string>("scheme")), v.Get<float>("static_scale"),
                           v.Get<float>("static_zero", 0.0f)};
    if (!(input.static_scale >= 0)) v["static_scale"].Fail("must be 0 (dynamic) or a positive scale");
    if (input.static_zero != 0) {
      const QuantScheme& s = input.scheme;
      const float top = static_cast<float>((1u << s.element->bits) - 1);
      if (!s.asymmetric() || s.granularity.kind != GranularityKind::kTensor || s.zero_type != ZeroType::kInt)
        v["static_zero"].Fail("belongs to asymmetric per-tensor inputs with integer zero-points");
      const float zero = input.static_zero;
      if (!(zero >= 0 && zero <= top) || zero != std::nearbyint(zero))
        v["static_zero"].Fail(fmt::format("must be an integer code in [0, {}]", top));
    }
    q.input_quant_.emplace(prefix, input);
  });
  for_each("input_hadamard", false, [&](const std::string& prefix, const JsonView& v) {
    const uint32_t block = v.As<uint32_t>();
    if (block == 0 || block > (1u << 30) || (block & (block - 1)) != 0) v.Fail("must be a power-of-two block size");
    q.input_hadamard_.emplace(prefix, block);
  });
  for_each("outlier_columns", false, [&](const std::string& prefix, const JsonView& v) {
    const uint64_t count = v.As<uint64_t>();
    if (count > (1u << 30)) v.Fail("is not a plausible column count");
    q.outlier_counts_.emplace(prefix, count);
  });
  for_each("input_order", false, [&](const std::string& prefix, const JsonView& v) {
    const uint64_t count = v.As<uint64_t>();
    if (count == 0 || count > (1u << 30)) v.Fail("is not a plausible column count");
    q.order_lengths_.emplace(prefix, count);
  });
  return q;
}

void QuantizedLinears::CheckTensors(const SafetensorsModel& st) const {
  if (engine_checkpoint_) return;  // compressed-tensors' weight_packed is not ours
  for (const auto& [prefix, scheme] : schemes_) {
    if (!st.Find(prefix + ".weight_packed"))
      Fail("{}: tensor '{}.weight_packed' is missing ({} lists '{}' as quantized with {})", st.path().string(), prefix,
           config_path_, prefix, scheme);
    if (st.Find(prefix + ".weight"))
      Fail("{}: tensor '{}' has both a dense '.weight' and '.weight_packed'", FileOf(st, prefix + ".weight"), prefix);
  }
  constexpr std::string_view kPacked = ".weight_packed";
  for (const std::string& name : st.names())
    if (name.ends_with(kPacked) && !Has(std::string_view(name).substr(0, name.size() - kPacked.size())))
      Fail("{}: tensor '{}' is not listed in {} (quantization_config.lowbit.tensors)", FileOf(st, name), name,
           config_path_);
  for (const SafetensorsFile& f : st.shards()) {
    for (const auto& [key, value] : f.metadata()) {
      if (key == kVersionKey && value != std::to_string(kQuantizedCheckpointVersion))
        Fail("{}: metadata {} is '{}', expected '{}'", f.path().string(), key, value, kQuantizedCheckpointVersion);
      if (!key.starts_with(kSchemeKeyPrefix)) continue;
      const std::string prefix = key.substr(kSchemeKeyPrefix.size());
      const auto it = schemes_.find(prefix);
      if (it == schemes_.end() || it->second != value)
        Fail("{}: metadata says tensor '{}' has scheme '{}' but {} says '{}'", f.path().string(), prefix, value,
             config_path_, it == schemes_.end() ? "it is not quantized" : it->second);
    }
  }
}

namespace {

struct Expect {
  const SafetensorsModel& st;
  const std::string& scheme;
  uint64_t rows, cols;

  // Checks dtype and shape of `name` and returns its bytes.
  std::span<const std::byte> Get(const std::string& name, DType dtype, const std::vector<uint64_t>& shape) const {
    const TensorView* t = st.Find(name);
    if (!t)
      Fail("{}: tensor '{}' is missing (needed by scheme '{}')", st.path().string(), name, scheme);
    if (t->dtype != dtype || t->shape != shape)
      Fail("{}: tensor '{}' is {} {}, expected {} {} for scheme '{}' on a [{} x {}] weight", FileOf(st, name), name,
           DTypeName(t->dtype), ShapeText(t->shape), DTypeName(dtype), ShapeText(shape), scheme, rows, cols);
    return t->data;
  }
  void Copy(const std::string& name, DType dtype, const std::vector<uint64_t>& shape, std::span<uint8_t> dst) const {
    const std::span<const std::byte> src = Get(name, dtype, shape);
    LOWBIT_CHECK(src.size() == dst.size());  // shape x dtype checked above, and the tensor matches the scheme
    if (!dst.empty()) std::memcpy(dst.data(), src.data(), dst.size());
    ReleasePages(src);
  }
  void Absent(const std::string& name) const {
    if (st.Find(name)) Fail("{}: tensor '{}' does not belong to scheme '{}'", FileOf(st, name), name, scheme);
  }
};

}  // namespace

QuantizedTensor QuantizedLinears::Load(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                       uint64_t cols) const {
  const auto it = schemes_.find(prefix);
  LOWBIT_CHECK(it != schemes_.end());
  const QuantScheme s = ParseScheme(it->second);
  const Expect e{st, it->second, rows, cols};
  // Plausibility before allocation: the packed codes the scheme needs for [rows x cols] must be in
  // the file (checked again with the exact shape by Copy below).
  (void)e.Get(prefix + ".weight_packed", DType::kU8, {rows, PackedBytes(cols, s.element->bits)});
  QuantizedTensor q(s, rows, cols);
  const ScaleGrid g = q.grid();
  e.Copy(prefix + ".weight_packed", DType::kU8, {rows, q.row_bytes()}, q.codes());
  const std::string scale = prefix + ".weight_scale", zero = prefix + ".weight_zero_point";
  if (g.cells() > 0) e.Copy(scale, ScaleDType(s.scale_type), {g.grid_rows, g.grid_cols}, q.scale_bytes());
  else e.Absent(scale);
  if (s.zero_type == ZeroType::kInt)
    e.Copy(zero, DType::kU8, {g.grid_rows, PackedBytes(g.grid_cols, s.element->bits)}, q.zero_bytes());
  else if (s.asymmetric())
    e.Copy(zero, ZeroDType(s.zero_type), {g.grid_rows, g.grid_cols}, q.zero_bytes());
  else
    e.Absent(zero);
  const std::string global = prefix + ".weight_global_scale";
  if (s.tensor_scale) {
    float value;
    std::memcpy(&value, e.Get(global, DType::kF32, {1}).data(), 4);
    q.set_tensor_scale(value);
  } else {
    e.Absent(global);
  }
  // g_idx is optional on read; when present it must be the identity grouping, since a
  // QuantizedTensor has no column permutation (act-order checkpoints need one).
  const std::string g_idx_name = prefix + ".weight_g_idx";
  if (s.granularity.kind != GranularityKind::kGroup) {
    e.Absent(g_idx_name);
  } else if (st.Find(g_idx_name)) {
    const std::span<const std::byte> bytes = e.Get(g_idx_name, DType::kI32, {cols});
    for (uint64_t c = 0; c < cols; ++c) {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * c, 4);
      if (v < 0 || static_cast<uint64_t>(v) != c / s.granularity.group)
        Fail("{}: tensor '{}' maps column {} to group {}; only in-order groups (g_idx = column / {}) are "
             "supported", FileOf(st, g_idx_name), g_idx_name, c, v, s.granularity.group);
    }
  }
  return q;
}

std::optional<OutlierColumns> QuantizedLinears::LoadOutliers(const SafetensorsModel& st, const std::string& prefix,
                                                             uint64_t rows, uint64_t cols) const {
  const auto it = outlier_counts_.find(prefix);
  const std::string idx = prefix + ".outlier_columns", wname = prefix + ".outlier_weight";
  if (it == outlier_counts_.end()) {
    for (const std::string& name : {idx, wname})
      if (st.Find(name))
        Fail("{}: tensor '{}' is not listed in {} (quantization_config.lowbit.outlier_columns)", FileOf(st, name), name,
             config_path_);
    return std::nullopt;
  }
  const uint64_t k = it->second;
  const std::string scheme = "outlier columns";
  const Expect e{st, scheme, rows, cols};
  OutlierColumns o;
  const std::span<const std::byte> ib = e.Get(idx, DType::kI32, {k});
  for (uint64_t i = 0; i < k; ++i) {
    int32_t v;
    std::memcpy(&v, ib.data() + 4 * i, 4);
    if (v < 0 || static_cast<uint64_t>(v) >= cols || (i > 0 && static_cast<uint32_t>(v) <= o.columns.back()))
      Fail("{}: tensor '{}': column indices must be ascending and below {}, got {} at {}", FileOf(st, idx), idx, cols, v,
           i);
    o.columns.push_back(static_cast<uint32_t>(v));
  }
  (void)e.Get(wname, DType::kF32, {rows, k});  // in the file before [rows x k] floats are allocated
  o.weight = DenseMatrix{rows, k, std::vector<float>(rows * k)};
  e.Copy(wname, DType::kF32, {rows, k},
         std::span(reinterpret_cast<uint8_t*>(o.weight.values.data()), o.weight.values.size() * 4));
  return o;
}

std::vector<uint32_t> QuantizedLinears::LoadInputOrder(const SafetensorsModel& st, const std::string& prefix,
                                                       uint64_t cols) const {
  const std::string name = prefix + ".input_order";
  const auto it = order_lengths_.find(prefix);
  if (it == order_lengths_.end()) {
    if (st.Find(name))
      Fail("{}: tensor '{}' is not listed in {} (quantization_config.lowbit.input_order)", FileOf(st, name), name,
           config_path_);
    return {};
  }
  if (it->second != cols)
    Fail("{}: quantization_config.lowbit.input_order.{} is {}, but the linear has {} input columns", config_path_,
         prefix, it->second, cols);
  const std::string what = "input order";
  const std::span<const std::byte> bytes = Expect{st, what, 0, cols}.Get(name, DType::kI32, {cols});
  std::vector<uint32_t> order(cols);
  std::memcpy(order.data(), bytes.data(), cols * 4);
  if (!IsColumnOrder(order, cols))
    Fail("{}: tensor '{}' is not a permutation of the {} input columns", FileOf(st, name), name, cols);
  return order;
}

}  // namespace lowbit
