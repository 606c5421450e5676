#include "io/quantized_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "formats/codec.h"
#include "model/config.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kPackedFormat = "lowbit-packed";
constexpr std::string_view kVersionKey = "lowbit.format_version";
constexpr std::string_view kSchemeKeyPrefix = "lowbit.scheme.";

// What a loader or tokenizer may need next to the weights (SentencePiece and BPE tokenizers).
constexpr const char* kCopiedFiles[] = {"tokenizer.model",  "tokenizer.json",          "tokenizer_config.json",
                                        "special_tokens_map.json", "added_tokens.json", "vocab.json",
                                        "merges.txt",       "generation_config.json"};

// Files other quantizers put beside config.json; their presence means a foreign checkpoint even
// when config.json itself has no quantization_config (older AutoGPTQ / AutoAWQ exports).
constexpr const char* kForeignQuantConfigs[] = {"quantize_config.json", "quant_config.json"};

// E8M0 and UE4M3 scales are raw byte codes; compressed-tensors also stores MX scales as uint8.
DType ScaleDType(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return DType::kF32;
    case ScaleType::kF16: return DType::kF16;
    case ScaleType::kBF16: return DType::kBF16;
    case ScaleType::kE8M0:
    case ScaleType::kUE4M3: return DType::kU8;
  }
  return DType::kU8;
}

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

struct NamedLinear {
  std::string prefix;  // HF module name, e.g. "model.layers.3.mlp.down_proj"
  const Linear* linear;
};

std::vector<NamedLinear> ModelLinears(const Model& m, size_t blocks) {
  std::vector<NamedLinear> out;
  for (size_t i = 0; i < blocks; ++i) {
    const LayerWeights& l = m.weights.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "self_attn.q_proj", &l.wq});
    out.push_back({p + "self_attn.k_proj", &l.wk});
    out.push_back({p + "self_attn.v_proj", &l.wv});
    out.push_back({p + "self_attn.o_proj", &l.wo});
    out.push_back({p + "mlp.gate_proj", &l.w_gate});
    out.push_back({p + "mlp.up_proj", &l.w_up});
    out.push_back({p + "mlp.down_proj", &l.w_down});
  }
  // A tied lm_head is a copy of the embeddings in memory and is not stored (as HF does).
  if (!m.config.tie_embeddings) out.push_back({"lm_head", &m.weights.lm_head});
  return out;
}

// Tensors to write plus the buffers that back the ones made here (g_idx, global scales); a deque
// keeps those buffers in place while the list grows, so the spans stay valid.
class TensorList {
 public:
  template <class T>
  void Add(std::string name, DType dtype, std::vector<uint64_t> shape, std::span<const T> data) {
    tensors_.push_back({std::move(name), dtype, std::move(shape), std::as_bytes(data)});
  }
  template <class T>
  void AddOwned(std::string name, DType dtype, std::vector<uint64_t> shape, const std::vector<T>& values) {
    const auto bytes = std::as_bytes(std::span(values));
    owned_.emplace_back(bytes.begin(), bytes.end());
    tensors_.push_back({std::move(name), dtype, std::move(shape), owned_.back()});
  }
  // The official writer's order (widest element first, then by name) keeps every tensor aligned
  // to its element size, which mmap readers appreciate even though ours does not need it.
  std::vector<TensorToWrite> Sorted() && {
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
      const uint64_t sa = DTypeSize(a.dtype), sb = DTypeSize(b.dtype);
      return sa != sb ? sa > sb : a.name < b.name;
    });
    return std::move(tensors_);
  }

 private:
  std::vector<TensorToWrite> tensors_;
  std::deque<std::vector<std::byte>> owned_;
};

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

const char* TorchScaleDType(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return "torch.float32";
    case ScaleType::kF16: return "torch.float16";
    case ScaleType::kBF16: return "torch.bfloat16";
    case ScaleType::kE8M0: return "torch.uint8";           // compressed-tensors' MXFP4/MXFP8 presets
    case ScaleType::kUE4M3: return "torch.float8_e4m3fn";  // its NVFP4 preset
  }
  return "";
}

// compressed-tensors QuantizationArgs for a weight scheme (formats.md 5.1), or nullopt when the
// scheme has no counterpart there (NF4, ternary, FP6, FP8 E5M2, MXINT8, float zero-points,
// per-token weights, unscaled casts); those are described only by the "lowbit" sub-object.
std::optional<OrderedJson> CompressedTensorsArgs(const QuantScheme& s) {
  const ElementFormat& e = *s.element;
  const bool float_scale = s.scale_type == ScaleType::kF32 || s.scale_type == ScaleType::kF16 ||
                           s.scale_type == ScaleType::kBF16;
  const uint32_t group = s.granularity.group;
  OrderedJson w;
  w["num_bits"] = e.bits;
  if (e.kind == ElementKind::kInt) {
    if (!float_scale || (s.asymmetric() && s.zero_type != ZeroType::kInt)) return std::nullopt;
    w["type"] = "int";
  } else if (e.name == "fp8_e4m3") {  // compressed-tensors' 8-bit float is E4M3 only
    if (!float_scale && !(s.mx_scales() && group == 32)) return std::nullopt;  // MXFP8
    w["type"] = "float";
  } else if (e.name == "fp4_e2m1") {
    const bool nvfp4 = s.scale_type == ScaleType::kUE4M3 && s.tensor_scale;
    const bool mxfp4 = s.mx_scales() && group == 32;
    if (!float_scale && !nvfp4 && !mxfp4) return std::nullopt;
    w["type"] = "float";
  } else {
    return std::nullopt;
  }
  w["symmetric"] = !s.asymmetric();
  OrderedJson block = nullptr;
  switch (s.granularity.kind) {
    case GranularityKind::kTensor: w["group_size"] = nullptr; w["strategy"] = "tensor"; break;
    case GranularityKind::kChannel: w["group_size"] = nullptr; w["strategy"] = "channel"; break;
    case GranularityKind::kGroup:
      w["group_size"] = group;
      w["strategy"] = s.tensor_scale ? "tensor_group" : "group";  // NVFP4: group scales + a global one
      break;
    case GranularityKind::kBlock:
      w["group_size"] = nullptr;
      w["strategy"] = "block";
      block = {s.granularity.block_rows, s.granularity.block_cols};
      break;
    default: return std::nullopt;
  }
  if (s.tensor_scale && s.granularity.kind != GranularityKind::kGroup) return std::nullopt;
  w["block_structure"] = block;
  w["dynamic"] = false;
  w["actorder"] = nullptr;
  w["scale_dtype"] = TorchScaleDType(s.scale_type);
  w["zp_dtype"] = s.asymmetric() ? OrderedJson("torch.int8") : OrderedJson(nullptr);
  return w;
}

OrderedJson QuantizationConfig(const std::vector<NamedLinear>& linears) {
  OrderedJson groups = OrderedJson::object(), tensors = OrderedJson::object();
  OrderedJson ignore = OrderedJson::array({"model.embed_tokens"});
  std::vector<std::pair<std::string, std::vector<std::string>>> by_scheme;  // first-seen order
  for (const NamedLinear& nl : linears) {
    const auto* q = std::get_if<QuantizedTensor>(&nl.linear->weight);
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
  // calibrated static scale of each linear's input.
  OrderedJson inputs = OrderedJson::object();
  for (const NamedLinear& nl : linears)
    if (nl.linear->input_quant)
      inputs[nl.prefix] = {{"scheme", nl.linear->input_quant->scheme.ToString()},
                           {"static_scale", nl.linear->input_quant->static_scale}};
  if (!inputs.empty()) qc["lowbit"]["input_quant"] = std::move(inputs);
  // Input transforms ahead of the matmul: the online Hadamard's block size (rotated models) and
  // the number of LLM.int8() full-precision columns (tensors P.outlier_columns, P.outlier_weight).
  OrderedJson hadamard = OrderedJson::object(), outliers = OrderedJson::object();
  for (const NamedLinear& nl : linears) {
    if (nl.linear->input_hadamard != 0) hadamard[nl.prefix] = nl.linear->input_hadamard;
    if (nl.linear->outliers) outliers[nl.prefix] = nl.linear->outliers->columns.size();
  }
  if (!hadamard.empty()) qc["lowbit"]["input_hadamard"] = std::move(hadamard);
  if (!outliers.empty()) qc["lowbit"]["outlier_columns"] = std::move(outliers);
  return qc;
}

// The saved config.json is the source's, so its geometry must be the model's, or the folder
// would not load back.
void CheckSameArchitecture(const ModelConfig& src, const ModelConfig& m, const std::string& source) {
  const std::pair<const char*, std::pair<uint64_t, uint64_t>> fields[] = {
      {"vocab_size", {src.vocab_size, m.vocab_size}},     {"hidden_size", {src.dim, m.dim}},
      {"num_hidden_layers", {src.n_layers, m.n_layers}}, {"num_attention_heads", {src.n_heads, m.n_heads}},
      {"num_key_value_heads", {src.n_kv_heads, m.n_kv_heads}}, {"head_dim", {src.head_dim, m.head_dim}},
      {"intermediate_size", {src.ffn_dim, m.ffn_dim}},
      // A rotated model unties lm_head (it absorbed the final norm); config.json then says so.
      {"tie_word_embeddings", {src.tie_embeddings, src.tie_embeddings && m.tie_embeddings}},
      {"attention bias", {src.qkv_bias, m.qkv_bias}}};
  for (const auto& [name, v] : fields)
    if (v.first != v.second)
      Fail("{}: {} is {} but the model being saved has {}; config.json must come from the model's source", source,
           name, v.first, v.second);
}

void CopySideFiles(const fs::path& source_dir, const fs::path& dest) {
  for (const char* name : kCopiedFiles) {
    const fs::path src = source_dir / name;
    std::error_code ec;
    if (!fs::exists(src, ec)) continue;
    if (!fs::is_regular_file(src, ec)) Fail("{}: not a regular file; cannot copy it into the checkpoint", src.string());
    if (!fs::copy_file(src, dest / name, ec) || ec)
      Fail("{}: cannot copy to {}: {}", src.string(), (dest / name).string(), ec.message());
  }
}

// "out/" would otherwise give the temp dir "out/.tmp-N", inside the destination.
fs::path Destination(const fs::path& out_dir) {
  fs::path dest = out_dir.lexically_normal();
  return dest.has_filename() ? dest : dest.parent_path();
}

}  // namespace

void CheckQuantizedModelTarget(const ModelConfig& config, const fs::path& out_dir, const fs::path& source_dir) {
  const fs::path dest = Destination(out_dir);
  const std::string out = dest.string();
  RemoveStaleTemporaries(dest);  // OUT.tmp-<pid> of a run killed while writing OUT
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dest, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) Fail("{}: already exists and is not a directory; refusing to overwrite it", out);
    if (!fs::is_empty(dest, ec)) Fail("{}: already exists and is not empty; refusing to overwrite it", out);
  }
  // An empty source_dir must not resolve to ./config.json.
  if (source_dir.empty() || !fs::is_regular_file(source_dir / "config.json"))
    Fail("{}: quantized checkpoints are written as Hugging Face folders and take config.json and the tokenizer "
         "from the source folder, which has none; GGUF / llama2.c sources are not supported yet",
         source_dir.empty() ? std::string("model source") : source_dir.string());
  // Adjacent-pair RoPE means Q/K rows in llama.cpp's permuted order; stored under HF names they
  // would be read as rotate-half and silently give wrong logits.
  if (config.rope_style != RopeStyle::kHalf)
    Fail("{}: the model uses adjacent-pair RoPE (GGUF / llama2.c row order); writing it as a Hugging Face "
         "checkpoint needs the Q/K rows un-permuted, which is not supported yet", out);
  const fs::path source_config = source_dir / "config.json";
  CheckSameArchitecture(ReadHfConfig(source_config), config, source_config.string());
}

void SaveQuantizedModel(const Model& model, const fs::path& out_dir, const fs::path& source_dir,
                        const nlohmann::json& recipe_card, size_t block_count) {
  // Everything that can fail on bad input is checked or prepared in memory before anything
  // touches disk.
  const fs::path dest = Destination(out_dir);
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
  list.Add("model.embed_tokens.weight", DType::kF32, {model.config.vocab_size, model.config.dim},
           std::span(model.weights.embed));
  list.Add("model.norm.weight", DType::kF32, {model.config.dim}, std::span(model.weights.final_norm));
  for (size_t i = 0; i < blocks; ++i) {
    const LayerWeights& l = model.weights.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    list.Add(p + "input_layernorm.weight", DType::kF32, {l.attn_norm.size()}, std::span(l.attn_norm));
    list.Add(p + "post_attention_layernorm.weight", DType::kF32, {l.ffn_norm.size()}, std::span(l.ffn_norm));
  }
  for (const NamedLinear& nl : linears) {
    const Linear& l = *nl.linear;
    if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) {
      AddQuantized(list, nl.prefix, *q);
      metadata[std::string(kSchemeKeyPrefix) + nl.prefix] = q->scheme().ToString();
    } else {
      const DenseMatrix& d = std::get<DenseMatrix>(l.weight);
      list.Add(nl.prefix + ".weight", DType::kF32, {d.rows(), d.cols()}, std::span(d.values));
    }
    if (!l.bias.empty()) list.Add(nl.prefix + ".bias", DType::kF32, {l.bias.size()}, std::span(l.bias));
    if (l.outliers) {
      const OutlierColumns& o = *l.outliers;
      std::vector<int32_t> columns(o.columns.begin(), o.columns.end());
      list.AddOwned(nl.prefix + ".outlier_columns", DType::kI32, {columns.size()}, columns);
      list.Add(nl.prefix + ".outlier_weight", DType::kF32, {o.weight.rows(), o.weight.cols()}, std::span(o.weight.values));
    }
  }
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();

  std::string config_text, recipe_text;
  try {
    OrderedJson config = OrderedJson::parse(ReadTextFile(source_dir / "config.json"));
    config["quantization_config"] = QuantizationConfig(linears);
    if (!model.config.tie_embeddings && config.contains("tie_word_embeddings")) config["tie_word_embeddings"] = false;
    if (blocks < model.config.n_layers) config["num_hidden_layers"] = blocks;
    config_text = config.dump(2) + "\n";
    recipe_text = recipe_card.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: cannot write config.json / recipe.json: {}", out, e.what());
  }

  const fs::path tmp = out + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);  // left by a crashed run that had our pid (other dead pids: swept above)
  fs::create_directories(tmp, ec);
  if (ec) Fail("{}: cannot create: {}", tmp.string(), ec.message());
  try {
    WriteSafetensors(tmp / "model.safetensors", tensors, metadata);
    WriteFileAtomic(tmp / "config.json", config_text);
    WriteFileAtomic(tmp / "recipe.json", recipe_text);
    CopySideFiles(source_dir, tmp);
    // rename(2) fails if dest appeared meanwhile with content, so a concurrent writer's folder
    // is never clobbered.
    fs::rename(tmp, dest, ec);
    if (ec) Fail("{}: cannot move the finished checkpoint into place: {}", out, ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
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

bool IsQuantizedCheckpoint(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::exists(path)) return false;
  const nlohmann::json j = ReadJsonFile(path);
  if (!j.is_object() || !j.contains("quantization_config")) return false;
  const nlohmann::json& qc = j["quantization_config"];
  return qc.is_object() && qc.contains("lowbit");
}

QuantizedLinears QuantizedLinears::FromFolder(const fs::path& folder) {
  for (const char* name : kForeignQuantConfigs)
    if (fs::exists(folder / name))
      Fail("{}: GPTQ / AWQ quantized checkpoints are not supported yet (interop issue); lowbit loads "
           "fp32/fp16/bf16 checkpoints and its own quantized ones", (folder / name).string());
  QuantizedLinears q;
  const fs::path path = folder / "config.json";
  q.config_path_ = path.string();
  if (!fs::exists(path)) return q;
  const nlohmann::json j = ReadJsonFile(path);
  const char* key = j.contains("quantization_config") ? "quantization_config" : "compression_config";
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return q;
  const nlohmann::json& qc = j[key];
  if (!qc.is_object() || !qc.contains("lowbit")) {
    std::string what = "a foreign quantization_config";
    if (qc.is_object() && qc.contains("quant_method") && qc["quant_method"].is_string()) {
      what = fmt::format("quant_method '{}'", qc["quant_method"].get<std::string>());
      if (qc.contains("format") && qc["format"].is_string())
        what += fmt::format(", format '{}'", qc["format"].get<std::string>());
    }
    Fail("{}: {} ({}) is not supported yet (interop issue); lowbit loads fp32/fp16/bf16 checkpoints and "
         "its own quantized ones (quantization_config.lowbit)", q.config_path_, key, what);
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
    const InputQuant input{ParseScheme(v.Get<std::string>("scheme")), v.Get<float>("static_scale")};
    if (!(input.static_scale >= 0)) v["static_scale"].Fail("must be 0 (dynamic) or a positive scale");
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
  return q;
}

void QuantizedLinears::CheckTensors(const SafetensorsModel& st) const {
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

}  // namespace lowbit
