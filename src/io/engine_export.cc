#include "io/engine_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/file_util.h"
#include "io/compressed_tensors.h"
#include "io/gptq_awq.h"
#include "model/kv_calibration.h"
#include "model/quantize_weights.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// An exact-name regex for GPTQ's "dynamic" map and vLLM's matcher (dots escaped).
std::string ExactRegex(const std::string& name) {
  std::string out = "^";
  for (char c : name) {
    if (c == '.') out += '\\';
    out += c;
  }
  return out + "$";
}

// The input transforms no engine format carries; an exported linear must have none.
void CheckPlainLinear(const NamedLinear& nl, EngineFormat f) {
  const Linear& l = *nl.linear;
  const std::string_view format = EngineFormatName(f);
  if (l.input_quant && f != EngineFormat::kCompressedTensors)
    Fail("{}: input_quant ({} activations): {} holds weight-only quantization; export W8A8 with --to "
         "compressed-tensors (int-quantized / float-quantized)", nl.prefix, l.input_quant->scheme.ToString(), format);
  if (l.input_quant && !l.quantized())
    Fail("{}: input_quant ({} activations) on a dense weight has no compressed-tensors form", nl.prefix,
         l.input_quant->scheme.ToString());
  if (l.input_hadamard != 0)
    Fail("{}: input_hadamard {}: the engines have no online Hadamard rotation before this linear, so the exported "
         "model would compute something else", nl.prefix, l.input_hadamard);
  if (l.outliers)
    Fail("{}: outlier_columns: {} has no LLM.int8() full-precision columns", nl.prefix, format);
}

// Checks that the quantized linears of `linears` share one GPTQ / AWQ parameter set and returns it.
QweightParams SharedParams(const std::vector<NamedLinear>& linears, EngineFormat f) {
  std::optional<QweightParams> shared;
  std::string first;
  for (const NamedLinear& nl : linears) {
    const auto* q = std::get_if<QuantizedTensor>(&nl.linear->weight);
    if (!q) continue;
    const QweightParams p =
        f == EngineFormat::kGptq ? GptqParamsOf(q->scheme(), nl.prefix) : AwqParamsOf(q->scheme(), nl.prefix);
    if (!shared) {
      shared = p;
      first = nl.prefix;
    } else if (!(*shared == p)) {
      Fail("{}: scheme '{}' differs from {}'s; a {} checkpoint holds one scheme for every quantized linear (export "
           "with --to compressed-tensors, which keeps one config group per scheme)", nl.prefix, q->scheme().ToString(),
           first, EngineFormatName(f));
    }
  }
  if (!shared) Fail("no linear is quantized; give --scheme to quantize a float model while exporting");
  return *shared;
}

OrderedJson GptqConfig(const QweightParams& p, bool v2, const std::vector<NamedLinear>& linears) {
  OrderedJson qc;
  qc["quant_method"] = "gptq";
  qc["bits"] = p.bits;
  qc["group_size"] = p.group_size;
  qc["desc_act"] = false;
  qc["sym"] = p.sym;
  qc["static_groups"] = false;
  qc["true_sequential"] = true;
  qc["lm_head"] = false;
  qc["checkpoint_format"] = v2 ? "gptq_v2" : "gptq";
  qc["format"] = v2 ? "gptq_v2" : "gptq";  // GPTQModel's canonical spelling of the same field
  qc["pack_dtype"] = "int32";
  OrderedJson dynamic = OrderedJson::object();  // GPTQModel / vLLM: "-:regex" leaves a module unquantized
  for (const NamedLinear& nl : linears) {
    if (nl.prefix == "lm_head") {
      qc["lm_head"] = nl.linear->quantized();
    } else if (!nl.linear->quantized()) {
      dynamic["-:" + ExactRegex(nl.prefix)] = OrderedJson::object();
    }
  }
  if (!dynamic.empty()) qc["dynamic"] = std::move(dynamic);
  return qc;
}

OrderedJson AwqConfig(const QweightParams& p, const std::vector<NamedLinear>& linears) {
  OrderedJson qc;
  qc["quant_method"] = "awq";
  qc["bits"] = p.bits;
  qc["group_size"] = p.group_size;
  qc["zero_point"] = true;
  qc["version"] = "gemm";
  OrderedJson keep = OrderedJson::array();
  for (const NamedLinear& nl : linears)
    if (!nl.linear->quantized()) keep.push_back(nl.prefix);
  qc["modules_to_not_convert"] = keep.empty() ? OrderedJson(nullptr) : std::move(keep);
  return qc;
}

OrderedJson CompressedTensorsConfig(const std::vector<NamedLinear>& linears) {
  struct Group {
    std::string key, format;  // key: weight scheme + input scheme
    const Linear* first;
    std::vector<std::string> targets;
  };
  std::vector<Group> groups;  // first-seen order
  OrderedJson ignore = OrderedJson::array();
  for (const NamedLinear& nl : linears) {
    const auto* q = std::get_if<QuantizedTensor>(&nl.linear->weight);
    if (!q) {
      ignore.push_back(nl.prefix);
      continue;
    }
    const std::optional<InputQuant>& input = nl.linear->input_quant;
    const std::string key = q->scheme().ToString() + "|" + (input ? input->scheme.ToString() : "");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
    if (it == groups.end())
      it = groups.insert(groups.end(), {key, CompressedTensorsFormatOf(q->scheme(), input, nl.prefix), nl.linear, {}});
    it->targets.push_back(nl.prefix);
  }
  OrderedJson config_groups = OrderedJson::object();
  bool one_format = true;
  for (const Group& g : groups) {
    one_format = one_format && g.format == groups.front().format;
    const QuantizedTensor& q = std::get<QuantizedTensor>(g.first->weight);
    OrderedJson j;
    // One scheme: every Linear not ignored, as llm-compressor writes it; several: exact names.
    j["targets"] = groups.size() == 1 ? OrderedJson::array({"Linear"}) : OrderedJson(g.targets);
    j["weights"] = *CompressedTensorsArgs(q.scheme());  // CompressedTensorsFormatOf passed
    j["input_activations"] = g.first->input_quant ? CompressedTensorsInputArgs(*g.first->input_quant) : OrderedJson(nullptr);
    j["output_activations"] = nullptr;
    j["format"] = g.format;
    config_groups[fmt::format("group_{}", config_groups.size())] = std::move(j);
  }
  OrderedJson qc;
  qc["quant_method"] = "compressed-tensors";
  qc["format"] = groups.empty() || !one_format ? "mixed-precision" : groups.front().format;
  qc["quantization_status"] = "compressed";
  qc["version"] = kCompressedTensorsVersion;
  qc["global_compression_ratio"] = nullptr;
  qc["ignore"] = std::move(ignore);
  qc["kv_cache_scheme"] = nullptr;
  qc["sparsity_config"] = OrderedJson::object();
  qc["transform_config"] = OrderedJson::object();
  qc["config_groups"] = std::move(config_groups);
  return qc;
}

// Appends linear `nl` in format `f` (dense linears as F32 .weight) and its bias.
void AddLinear(TensorList& list, const NamedLinear& nl, const EngineExportOptions& o, EngineExportResult& r) {
  const Linear& l = *nl.linear;
  if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) {
    const uint64_t before = list.bytes();
    switch (o.format) {
      case EngineFormat::kGptq: AddGptqLinear(list, nl.prefix, *q, o.gptq_v2); break;
      case EngineFormat::kAwq: AddAwqLinear(list, nl.prefix, *q); break;
      case EngineFormat::kCompressedTensors: AddCompressedTensorsLinear(list, nl.prefix, *q, l.input_quant); break;
    }
    r.quantized_bytes += list.bytes() - before;
    r.quantized_weights += q->numel();
    ++r.quantized_linears;
  } else {
    const DenseMatrix& d = std::get<DenseMatrix>(l.weight);
    list.Add(nl.prefix + ".weight", DType::kF32, {d.rows(), d.cols()}, std::span(d.values));
    ++r.dense_linears;
  }
  if (!l.bias.empty()) list.Add(nl.prefix + ".bias", DType::kF32, {l.bias.size()}, std::span(l.bias));
}

}  // namespace

EngineFormat ParseEngineFormat(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "gptq") return EngineFormat::kGptq;
  if (lower == "awq") return EngineFormat::kAwq;
  if (lower == "compressed-tensors" || lower == "compressed_tensors") return EngineFormat::kCompressedTensors;
  Fail("unknown engine format '{}' (known: gptq, awq, compressed-tensors)", name);
}

std::string_view EngineFormatName(EngineFormat f) {
  switch (f) {
    case EngineFormat::kGptq: return "gptq";
    case EngineFormat::kAwq: return "awq";
    case EngineFormat::kCompressedTensors: return "compressed-tensors";
  }
  return "?";
}

void CheckEngineScheme(EngineFormat f, const QuantScheme& scheme, const std::string& where) {
  switch (f) {
    case EngineFormat::kGptq: (void)GptqParamsOf(scheme, where); break;
    case EngineFormat::kAwq: (void)AwqParamsOf(scheme, where); break;
    case EngineFormat::kCompressedTensors: (void)CompressedTensorsFormatOf(scheme, std::nullopt, where); break;
  }
}

EngineExportResult ExportEngineCheckpoint(StreamedModel& s, const fs::path& source_dir, const fs::path& out_dir,
                                          const nlohmann::json& recipe_card, const EngineExportOptions& o) {
  Model& model = s.model;
  const ModelConfig& c = model.config;
  const fs::path dest = CheckpointDestination(out_dir);
  CheckQuantizedModelTarget(c, dest, source_dir);
  if (o.gptq_v2 && o.format != EngineFormat::kGptq) Fail("gptq_v2 zero points apply to --to gptq only");
  if (o.scheme) CheckEngineScheme(o.format, *o.scheme, fmt::format("--scheme {}", o.scheme->ToString()));
  if (c.tie_embeddings && model.weights.lm_head.quantized())
    Fail("{}: lm_head is quantized but tie_word_embeddings is true, so it would not be stored", dest.string());
  if (o.format == EngineFormat::kAwq && !c.tie_embeddings && model.weights.lm_head.quantized())
    Fail("lm_head: AWQ checkpoints keep lm_head in full precision; this model's is quantized");

  for (size_t i = 0; i < c.n_layers; ++i) {
    if (s.read_layer) model.weights.layers[i] = s.read_layer(i);
    if (o.scheme) QuantizeBlockLinears(model.weights.layers[i], i, *o.scheme);
    for (const NamedLinear& nl : BlockLinears(model.weights.layers[i], i)) CheckPlainLinear(nl, o.format);
    if (o.progress) o.progress(i + 1, c.n_layers);
  }
  s.read_layer = nullptr;  // every block is in memory now
  ValidateWeights(c, model.weights, model.source);
  const std::vector<NamedLinear> linears = ModelLinears(model, c.n_layers);
  if (!c.tie_embeddings) CheckPlainLinear(linears.back(), o.format);

  EngineExportResult r;
  OrderedJson qc;
  switch (o.format) {
    case EngineFormat::kGptq:
      qc = GptqConfig(SharedParams(linears, o.format), o.gptq_v2, linears);
      r.quant_method = "gptq";
      r.format = o.gptq_v2 ? "gptq_v2" : "gptq";
      break;
    case EngineFormat::kAwq:
      qc = AwqConfig(SharedParams(linears, o.format), linears);
      r.quant_method = "awq";
      r.format = "gemm";
      break;
    case EngineFormat::kCompressedTensors:
      qc = CompressedTensorsConfig(linears);
      r.quant_method = "compressed-tensors";
      r.format = qc["format"].get<std::string>();
      break;
  }

  // Calibrated FP8 KV-cache scales (`lowbit calibrate-kv`): compressed-tensors carries them as per-layer
  // k_scale / v_scale with a kv_cache_scheme, as vLLM loads them; the file itself travels for lowbit.
  const fs::path kv_file = KvScalesPathFor(source_dir);
  std::optional<KvScales> kv;
  if (fs::exists(kv_file)) kv = ReadKvScales(kv_file, c.n_layers);
  TensorList list;
  if (kv && o.format == EngineFormat::kCompressedTensors) {
    if (kv->dtype != KvDtype::kFp8E4M3)
      Fail("{}: dtype {}: compressed-tensors' kv_cache_scheme describes an FP8 E4M3 cache", kv_file.string(),
           KvDtypeName(kv->dtype));
    for (size_t i = 0; i < c.n_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.self_attn.", i);
      list.AddOwned(p + "k_scale", DType::kF32, {1}, std::vector<float>{kv->k[i]});
      list.AddOwned(p + "v_scale", DType::kF32, {1}, std::vector<float>{kv->v[i]});
    }
    qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"group_size", nullptr},
                             {"strategy", "tensor"}, {"block_structure", nullptr}, {"dynamic", false},
                             {"actorder", nullptr}, {"observer", "minmax"}};
  }
  list.Add("model.embed_tokens.weight", DType::kF32, {c.vocab_size, c.dim}, std::span<const float>(model.weights.embed));
  list.Add("model.norm.weight", DType::kF32, {c.dim}, std::span<const float>(model.weights.final_norm));
  for (size_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = model.weights.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    list.Add(p + "input_layernorm.weight", DType::kF32, {l.attn_norm.size()}, std::span(l.attn_norm));
    list.Add(p + "post_attention_layernorm.weight", DType::kF32, {l.ffn_norm.size()}, std::span(l.ffn_norm));
  }
  for (const NamedLinear& nl : linears) AddLinear(list, nl, o, r);
  r.file_bytes = list.bytes();
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();

  std::string config_text, quantize_config_text, recipe_text;
  try {
    OrderedJson config = OrderedJson::parse(ReadTextFile(source_dir / "config.json"));
    config["quantization_config"] = qc;
    if (!c.tie_embeddings && config.contains("tie_word_embeddings")) config["tie_word_embeddings"] = false;
    config_text = config.dump(2) + "\n";
    if (o.format == EngineFormat::kGptq) quantize_config_text = qc.dump(2) + "\n";  // AutoGPTQ's own file
    if (!recipe_card.is_null()) recipe_text = recipe_card.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: cannot write config.json: {}", dest.string(), e.what());
  }
  WriteFolderAtomic(dest, [&](const fs::path& tmp) {
    r.shards = WriteShardedSafetensors(tmp, tensors, {{"format", "pt"}}, o.max_shard_bytes);
    WriteFileAtomic(tmp / "config.json", config_text);
    if (!quantize_config_text.empty()) WriteFileAtomic(tmp / "quantize_config.json", quantize_config_text);
    if (!recipe_text.empty()) WriteFileAtomic(tmp / "recipe.json", recipe_text);
    if (kv) WriteKvScales(*kv, KvScalesPathFor(tmp));
    CopySideFiles(source_dir, tmp);
  });
  return r;
}

}  // namespace lowbit
