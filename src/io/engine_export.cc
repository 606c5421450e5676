#include "io/engine_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/file_util.h"
#include "core/memory.h"
#include "formats/codec.h"
#include "io/compressed_tensors.h"
#include "io/fused_projections.h"
#include "io/gptq_awq.h"
#include "io/hf_names.h"
#include "model/kv_calibration.h"
#include "model/recipe.h"
#include "model/quantize_weights.h"
#include "quant/rtn.h"

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

// What the config needs of a written linear, kept after its block is written and freed.
struct LinearRecord {
  std::string prefix;
  std::optional<QuantScheme> scheme;  // nullopt: left dense
  std::optional<InputQuant> input;
  bool act_order = false;  // a stored column order, written as g_idx
  // GPTQ in Hessian order with the groups left in column order (--act-order=static): nothing in the
  // weights says so; compressed-tensors records it as llm-compressor does (actorder "static").
  bool static_act_order = false;
};

// Which linears the recipe card's GPTQ quantized with static act-order (the recipe's method and config,
// or those of the first override whose match the linear's name fits).
std::function<bool(const std::string&)> StaticActOrderLinears(const nlohmann::json& card) {
  if (!card.is_object() || !card.contains("recipe")) return [](const std::string&) { return false; };
  const Recipe recipe = ParseRecipe(card["recipe"], "recipe card (recipe.json)");
  const auto is_static = [](const MethodConfig& m) {
    if (m.method != "gptq" || !m.config.is_object() || !m.config.contains("act_order")) return false;
    const nlohmann::json& a = m.config["act_order"];
    return a.is_boolean() ? a.get<bool>() : a == "static" || a == "weight";
  };
  std::vector<std::pair<std::regex, bool>> rules;  // an override's match, and whether it runs static act-order
  for (const RecipeOverride& o : recipe.overrides)
    rules.emplace_back(std::regex(o.match), is_static(OverrideMethod(o.method, o.config, recipe.method, recipe.config)));
  const bool main_is_static = is_static({recipe.method, recipe.config});
  return [rules = std::move(rules), main_is_static](const std::string& prefix) {
    for (const auto& [match, is_static] : rules)
      if (std::regex_search(prefix, match)) return is_static;
    return main_is_static;
  };
}

// vLLM loads q/k/v and gate/up into one fused matrix with one NVFP4 global scale (the largest of the
// shards'), so shards with different tensor scales would be served with a wrong one.
void CheckFusedTensorScales(const std::vector<NamedLinear>& linears) {
  std::map<std::string, const NamedLinear*> first;
  for (const NamedLinear& nl : linears) {
    const auto* q = std::get_if<QuantizedTensor>(&nl.linear->weight);
    if (!q || !q->scheme().tensor_scale) continue;
    const auto [it, inserted] = first.emplace(FusedMatrixOf(nl.prefix), &nl);
    const auto& q0 = std::get<QuantizedTensor>(it->second->linear->weight);
    if (!inserted && q0.tensor_scale() != q->tensor_scale())
      Fail("{} and {}: tensor scales {} and {} differ, but vLLM loads both into {} with one global scale; "
           "quantize again with this lowbit, which gives the shards of a fused matrix one tensor scale",
           it->second->prefix, nl.prefix, q0.tensor_scale(), q->tensor_scale(), it->first);
  }
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
  if (!l.input_order.empty() && f == EngineFormat::kAwq)
    Fail("{}: act-order with groups in processing order: AWQ GEMM has no g_idx; quantize with --act-order=static "
         "(or export with --to gptq, desc_act: true, which vLLM refuses)", nl.prefix);
  if (!l.input_order.empty() && f == EngineFormat::kCompressedTensors)
    Fail("{}: act-order with groups in processing order: compressed-tensors 0.20 removed actorder \"group\" (weight_g_idx), "
         "so vLLM and transformers refuse such folders; quantize with --act-order=static (llm-compressor's actorder "
         "\"weight\"), or export with --to gptq (desc_act: true, which vLLM refuses)", nl.prefix);
}

// Checks that the quantized linears share one GPTQ / AWQ parameter set and returns it.
QweightParams SharedParams(const std::vector<LinearRecord>& linears, EngineFormat f) {
  std::optional<QweightParams> shared;
  std::string first;
  for (const LinearRecord& l : linears) {
    if (!l.scheme) continue;
    const QweightParams p = f == EngineFormat::kGptq ? GptqParamsOf(*l.scheme, l.prefix) : AwqParamsOf(*l.scheme, l.prefix);
    if (!shared) {
      shared = p;
      first = l.prefix;
    } else if (!(*shared == p)) {
      Fail("{}: scheme '{}' differs from {}'s; a {} checkpoint holds one scheme for every quantized linear (export "
           "with --to compressed-tensors, which keeps one config group per scheme)", l.prefix, l.scheme->ToString(),
           first, EngineFormatName(f));
    }
  }
  if (!shared) Fail("no linear is quantized; give --scheme to quantize a float model while exporting");
  return *shared;
}

OrderedJson GptqConfig(const QweightParams& p, bool v2, const std::vector<LinearRecord>& linears) {
  OrderedJson qc;
  qc["quant_method"] = "gptq";
  qc["bits"] = p.bits;
  qc["group_size"] = p.group_size;
  qc["desc_act"] = std::ranges::any_of(linears, [](const LinearRecord& l) { return l.act_order; });
  qc["sym"] = p.sym;
  qc["static_groups"] = false;
  qc["true_sequential"] = true;
  qc["lm_head"] = false;
  qc["checkpoint_format"] = v2 ? "gptq_v2" : "gptq";
  qc["format"] = v2 ? "gptq_v2" : "gptq";  // GPTQModel's canonical spelling of the same field
  qc["pack_dtype"] = "int32";
  OrderedJson dynamic = OrderedJson::object();  // GPTQModel / vLLM: "-:regex" leaves a module unquantized
  for (const LinearRecord& l : linears) {
    if (l.prefix == "lm_head") {
      qc["lm_head"] = l.scheme.has_value();
    } else if (!l.scheme) {
      dynamic["-:" + ExactRegex(l.prefix)] = OrderedJson::object();
    }
  }
  if (!dynamic.empty()) qc["dynamic"] = std::move(dynamic);
  return qc;
}

OrderedJson AwqConfig(const QweightParams& p, const std::vector<LinearRecord>& linears) {
  OrderedJson qc;
  qc["quant_method"] = "awq";
  qc["bits"] = p.bits;
  qc["group_size"] = p.group_size;
  qc["zero_point"] = true;
  qc["version"] = "gemm";
  OrderedJson keep = OrderedJson::array();
  for (const LinearRecord& l : linears)
    if (!l.scheme) keep.push_back(l.prefix);
  qc["modules_to_not_convert"] = keep.empty() ? OrderedJson(nullptr) : std::move(keep);
  return qc;
}

// The MoE routers (and Qwen2-MoE's shared-expert gates), kept in full precision: llm-compressor's MoE
// recipes ignore them, and vLLM builds them unquantized.
std::vector<std::string> RouterModules(const ModelConfig& c) {
  std::vector<std::string> out;
  for (size_t i = 0; i < c.n_layers; ++i)
    for (const HfBlockVector& v : HfBlockVectors(c, i))
      if (!v.norm && v.name.ends_with(".weight"))  // a router's weight (DeepSeek-V3's bias belongs to the same module)
        out.push_back(fmt::format("model.layers.{}.{}", i, v.name.substr(0, v.name.size() - 7)));
  return out;
}

// tied_lm_head: the model's lm_head is the embedding table, stored by no linear here; transformers still
// builds an lm_head Linear, which "targets: Linear" would claim, so it is ignored by name as llm-compressor does.
// `dense_modules`: other modules stored in full precision that an engine may build as a Linear (MoE routers).
OrderedJson CompressedTensorsConfig(const std::vector<LinearRecord>& linears, bool tied_lm_head,
                                    const std::vector<std::string>& dense_modules) {
  struct Group {
    std::string key, format;  // key: weight scheme + input scheme
    const LinearRecord* first;
    std::vector<std::string> targets;
  };
  std::vector<Group> groups;  // first-seen order
  OrderedJson ignore = OrderedJson::array();
  for (const LinearRecord& l : linears) {
    if (!l.scheme) {
      ignore.push_back(l.prefix);
      continue;
    }
    const std::string key = l.scheme->ToString() + "|" + (l.input ? l.input->scheme.ToString() : "") +
                            (l.static_act_order ? "|static" : "");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
    if (it == groups.end())
      it = groups.insert(groups.end(), {key, CompressedTensorsFormatOf(*l.scheme, l.input, l.prefix), &l, {}});
    it->targets.push_back(l.prefix);
  }
  OrderedJson config_groups = OrderedJson::object();
  bool one_format = true;
  for (const Group& g : groups) {
    one_format = one_format && g.format == groups.front().format;
    OrderedJson j;
    // One scheme: every Linear not ignored, as llm-compressor writes it; several: exact names.
    j["targets"] = groups.size() == 1 ? OrderedJson::array({"Linear"}) : OrderedJson(g.targets);
    j["weights"] = *CompressedTensorsArgs(*g.first->scheme);  // CompressedTensorsFormatOf passed
    if (g.first->static_act_order) j["weights"]["actorder"] = "static";
    j["input_activations"] = g.first->input ? CompressedTensorsInputArgs(*g.first->input) : OrderedJson(nullptr);
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
  for (const std::string& m : dense_modules) ignore.push_back(m);
  if (tied_lm_head) ignore.push_back("lm_head");
  qc["ignore"] = std::move(ignore);
  qc["kv_cache_scheme"] = nullptr;
  qc["sparsity_config"] = OrderedJson::object();
  qc["transform_config"] = OrderedJson::object();
  qc["config_groups"] = std::move(config_groups);
  return qc;
}

// Dense tensors go out in the source's torch_dtype (bf16 / fp16) when every value survives it exactly,
// as a 16-bit source read into fp32 does; otherwise in F32. Never lossy, and no larger than the source.
// Read a row at a time (row r by read_row(r, out)): no fp32 copy of a 16-bit table is made.
void AddDenseRows(TensorList& list, std::string name, std::vector<uint64_t> shape, uint64_t rows, uint64_t cols,
                  const std::function<void(uint64_t, float*)>& read_row, DType dtype) {
  std::vector<float> row(cols), back(cols);
  if (dtype == DType::kBF16 || dtype == DType::kF16) {
    std::vector<uint16_t> half(rows * cols);
    bool exact = true;
    for (uint64_t r = 0; exact && r < rows; ++r) {
      read_row(r, row.data());
      uint16_t* out = half.data() + r * cols;
      if (dtype == DType::kBF16) {
        Fp32ToBf16Row(row.data(), cols, out);
        Bf16ToFp32Row(out, cols, back.data());
      } else {
        Fp32ToFp16Row(row.data(), cols, out);
        Fp16ToFp32Row(out, cols, back.data());
      }
      exact = std::memcmp(back.data(), row.data(), cols * 4) == 0;
    }
    if (exact) return list.AddOwned(std::move(name), dtype, std::move(shape), half);
  }
  std::vector<float> values(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) read_row(r, values.data() + r * cols);
  list.AddOwned(std::move(name), DType::kF32, std::move(shape), values);
}

void AddDense(TensorList& list, std::string name, std::vector<uint64_t> shape, std::span<const float> values, DType dtype) {
  const uint64_t rows = shape.size() == 2 ? shape[0] : 1, cols = values.size() / rows;
  AddDenseRows(list, std::move(name), std::move(shape), rows, cols,
               [&](uint64_t r, float* out) { std::copy_n(values.data() + r * cols, cols, out); }, dtype);
}

DType SourceDType(const OrderedJson& config) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!config.contains(key) || !config[key].is_string()) continue;
    const std::string v = config[key].get<std::string>();
    if (v == "bfloat16") return DType::kBF16;
    if (v == "float16") return DType::kF16;
  }
  return DType::kF32;
}

// Appends linear `nl` in format `o.format` (dense linears as AddDense writes them) and its bias, as copies: the
// block they come from is freed once its tensors are on disk.
LinearRecord AddLinear(TensorList& list, const NamedLinear& nl, const EngineExportOptions& o, DType dense,
                       EngineExportResult& r) {
  const Linear& l = *nl.linear;
  CheckPlainLinear(nl, o.format);
  LinearRecord record{nl.prefix, std::nullopt, l.input_quant, !l.input_order.empty()};
  if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) {
    const uint64_t before = list.bytes();
    switch (o.format) {
      case EngineFormat::kGptq: AddGptqLinear(list, nl.prefix, *q, l.input_order, o.gptq_v2); break;
      case EngineFormat::kAwq: AddAwqLinear(list, nl.prefix, *q); break;
      case EngineFormat::kCompressedTensors: AddCompressedTensorsLinear(list, nl.prefix, *q, l.input_quant); break;
    }
    r.quantized_bytes += list.bytes() - before;
    r.quantized_weights += q->numel();
    ++r.quantized_linears;
    record.scheme = q->scheme();
  } else {
    const DenseMatrix& d = std::get<DenseMatrix>(l.weight);
    AddDense(list, nl.prefix + ".weight", {d.rows(), d.cols()}, d.values, dense);
    ++r.dense_linears;
  }
  if (!l.bias.empty()) AddDense(list, nl.prefix + ".bias", {l.bias.size()}, l.bias, dense);
  return record;
}

// options.requantize: linear `l` in a form format o.format holds, when its stored form is not one
// (block linears: quantized again with that scheme; lm_head: dense), recorded in r.changed.
void ConvertUnheld(Linear& l, const std::string& prefix, bool block_linear, const EngineExportOptions& o,
                   EngineExportResult& r) {
  if (!o.requantize || !l.quantized()) return;
  std::optional<std::string> why = EngineLinearMismatch(o.format, o.gptq_v2, l, prefix);
  if (!why && !block_linear && o.format == EngineFormat::kAwq) why = "AWQ checkpoints keep lm_head in full precision";
  if (!why) return;
  const uint64_t rows = l.rows(), cols = l.cols();
  std::vector<float> values(rows * cols), scratch(cols);
  for (uint64_t row = 0; row < rows; ++row) InputOrderRow(l, row, scratch, std::span(values).subspan(row * cols, cols));
  if (block_linear) l.weight = QuantizeRtn(values, rows, cols, *o.requantize, prefix);
  else l.weight = DenseMatrix{rows, cols, std::move(values)};
  l.input_order.clear();
  l.outliers.reset();
  r.changed.push_back({prefix, std::move(*why), block_linear ? o.requantize->ToString() : "dense"});
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

std::optional<std::string> EngineLinearMismatch(EngineFormat f, bool gptq_v2, const Linear& linear,
                                                const std::string& prefix) {
  EngineExportOptions o;
  o.format = f;
  o.gptq_v2 = gptq_v2;
  try {
    if (!linear.quantized()) CheckPlainLinear({prefix, &linear}, f);
    TensorList scratch;  // packed and dropped: the packers are where every condition is checked
    EngineExportResult r;
    if (linear.quantized()) (void)AddLinear(scratch, {prefix, &linear}, o, DType::kF32, r);
  } catch (const Error& e) {
    return e.what();
  }
  return std::nullopt;
}

EngineExportResult ExportEngineCheckpoint(StreamedModel& s, const fs::path& source_dir, const fs::path& out_dir,
                                          const nlohmann::json& recipe_card, const EngineExportOptions& o) {
  Model& model = s.model;
  const ModelConfig& c = model.config;
  const fs::path dest = CheckpointDestination(out_dir);
  // Llama 4's and Qwen3-MoE's engines load quantized experts one linear each (transformers' compressed-tensors
  // loaders, vLLM's), as lowbit writes them; GPT-OSS's, Granite MoE's and Mistral 4's (transformers' Mistral4 maps no
  // per-expert names) load them stacked.
  if (c.architecture == "GptOssForCausalLM" || ((IsGraniteMoe(c) || c.architecture == "Mistral4ForCausalLM") &&
                                                c.n_experts > 0))
    Fail("{}: {}'s engines load its experts as stacked tensors ({}...), which lowbit does not write yet; a lowbit "
         "folder (quantize) or lowbit itself runs it", model.source, c.architecture, HfExpertsPrefix(c));
  CheckQuantizedModelTarget(c, dest, source_dir);
  if (o.gptq_v2 && o.format != EngineFormat::kGptq) Fail("gptq_v2 zero points apply to --to gptq only");
  if (o.scheme) CheckEngineScheme(o.format, *o.scheme, fmt::format("--scheme {}", o.scheme->ToString()));
  if (o.requantize) CheckEngineScheme(o.format, *o.requantize, fmt::format("--scheme {}", o.requantize->ToString()));
  EngineExportResult r;
  if (!c.tie_embeddings) ConvertUnheld(model.weights.lm_head, "lm_head", false, o, r);
  if (c.tie_embeddings && model.weights.lm_head.quantized())
    Fail("{}: lm_head is quantized but tie_word_embeddings is true, so it would not be stored", dest.string());
  if (o.format == EngineFormat::kAwq && !c.tie_embeddings && model.weights.lm_head.quantized())
    Fail("lm_head: AWQ checkpoints keep lm_head in full precision; this model's is quantized (quantize it with "
         "--lm-head none to export it to AWQ)");
  ValidateEnds(c, model.weights, model.source);
  // Calibrated FP8 KV-cache scales (`lowbit calibrate-kv`): compressed-tensors carries them as per-layer
  // k_scale / v_scale with a kv_cache_scheme, as vLLM loads them; the file itself travels for lowbit.
  const fs::path kv_file = KvScalesPathFor(source_dir);
  std::optional<KvScales> kv;
  if (fs::exists(kv_file)) kv = ReadKvScales(kv_file, c.n_layers);
  if (kv && o.format == EngineFormat::kCompressedTensors && kv->dtype != KvDtype::kFp8E4M3)
    Fail("{}: dtype {}: compressed-tensors' kv_cache_scheme describes an FP8 E4M3 cache", kv_file.string(),
         KvDtypeName(kv->dtype));
  const OrderedJson source_config = OrderedJson::parse(ReadTextFile(source_dir / "config.json"));
  const DType dense = SourceDType(source_config);

  WriteFolderAtomic(dest, [&](const fs::path& tmp) {
    // Streaming: each block is read (and RTN-quantized), packed, written to the shard's spill files and
    // freed; a shard is assembled as soon as the next block would overflow it.
    ShardedSafetensorsWriter shards(tmp, o.max_shard_bytes, {{"format", "pt"}});
    // The tables outside the blocks go first, each freed once on disk: held until the end, lm_head in
    // fp32 and the token table sat beside every block (a 7B model: 0.78 GB; a 152k vocabulary: 3.3 GB).
    std::optional<LinearRecord> lm_head;
    if (!c.tie_embeddings) {
      TensorList head;
      lm_head = AddLinear(head, {"lm_head", &model.weights.lm_head}, o, dense, r);
      shards.Add(std::move(head));
      model.weights.lm_head = Linear{};
    }
    {
      TensorList ends;
      const Embedding& table = model.weights.embed;
      AddDenseRows(ends, "model.embed_tokens.weight", {c.vocab_size, c.dim}, c.vocab_size, c.dim,
                   [&](uint64_t r, float* out) { table.Row(r, std::span(out, c.dim)); }, dense);
      AddDense(ends, "model.norm.weight", {c.dim}, NormToCheckpoint(c, model.weights.final_norm), dense);
      shards.Add(std::move(ends));
      model.weights.embed = Embedding{};
    }
    std::vector<LinearRecord> linears;
    for (size_t i = 0; i < c.n_layers; ++i) {
      LayerWeights block = s.read_layer ? s.read_layer(i) : std::move(model.weights.layers[i]);
      if (o.scheme) QuantizeBlockLinears(block, i, *o.scheme);
      for (const BlockLinear& bl : BlockLinears(block))
        ConvertUnheld(*bl.linear, fmt::format("model.layers.{}.{}", i, bl.name), true, o, r);
      ValidateLayer(c, block, i, model.source);
      TensorList list;
      const std::string p = fmt::format("model.layers.{}.", i);
      for (const HfBlockVector& v : HfBlockVectors(c, i))
        AddDense(list, p + v.name, v.shape, VectorToCheckpoint(c, v, block), dense);
      if (o.format == EngineFormat::kCompressedTensors) CheckFusedTensorScales(HfBlockLinears(c, block, i));
      std::deque<Linear> stacked;  // Phi-3's qkv_proj and gate_up_proj
      for (const NamedLinear& nl : StoredBlockLinears(c, block, i, stacked))
        linears.push_back(AddLinear(list, nl, o, dense, r));
      if (o.format != EngineFormat::kCompressedTensors && r.quantized_linears > 0)
        (void)SharedParams(linears, o.format);  // mixed schemes fail at the block that brings them, not at the end
      if (kv && o.format == EngineFormat::kCompressedTensors) {
        list.AddOwned(p + "self_attn.k_scale", DType::kF32, {1}, std::vector<float>{kv->k[i]});
        list.AddOwned(p + "self_attn.v_scale", DType::kF32, {1}, std::vector<float>{kv->v[i]});
      }
      shards.Add(std::move(list));
      model.weights.layers[i] = LayerWeights{};  // freed: the shard's spill files hold its packed copy
      ReleaseFreedMemory();
      if (o.progress) o.progress(i + 1, c.n_layers);
    }
    s.read_layer = nullptr;
    if (lm_head) linears.push_back(*lm_head);
    r.shards = shards.Finish();
    r.file_bytes = shards.bytes();
    const auto static_act_order = StaticActOrderLinears(recipe_card);
    for (LinearRecord& l : linears)  // (lm_head is quantized by RTN after the blocks, whatever the method)
      l.static_act_order = l.scheme && !l.act_order && l.prefix != "lm_head" && static_act_order(l.prefix) &&
                           std::ranges::none_of(r.changed, [&](const ChangedLinear& c) { return c.prefix == l.prefix; });

    OrderedJson qc;
    switch (o.format) {
      case EngineFormat::kGptq:
        qc = GptqConfig(SharedParams(linears, o.format), o.gptq_v2, linears);
        if (qc["desc_act"] == true)
          std::fprintf(stderr, "lowbit: warning: %s: desc_act: true (act-order with groups in processing order): "
                       "vLLM 0.32 refuses it; for vLLM quantize with --act-order=static\n",
                       out_dir.string().c_str());
        r.quant_method = "gptq";
        r.format = o.gptq_v2 ? "gptq_v2" : "gptq";
        break;
      case EngineFormat::kAwq:
        qc = AwqConfig(SharedParams(linears, o.format), linears);
        r.quant_method = "awq";
        r.format = "gemm";
        break;
      case EngineFormat::kCompressedTensors:
        qc = CompressedTensorsConfig(linears, c.tie_embeddings, RouterModules(c));
        r.quant_method = "compressed-tensors";
        r.format = qc["format"].get<std::string>();
        if (kv)
          qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"group_size", nullptr},
                                   {"strategy", "tensor"}, {"block_structure", nullptr}, {"dynamic", false},
                                   {"actorder", nullptr}, {"observer", "minmax"}};
        break;
    }
    OrderedJson config = TextOnlyConfig(source_config);
    config["quantization_config"] = qc;
    if (!c.tie_embeddings) config["tie_word_embeddings"] = false;
    WriteFileAtomic(tmp / "config.json", config.dump(2) + "\n");
    if (o.format == EngineFormat::kGptq) WriteFileAtomic(tmp / "quantize_config.json", qc.dump(2) + "\n");  // AutoGPTQ's
    if (!recipe_card.is_null()) WriteFileAtomic(tmp / "recipe.json", recipe_card.dump(2) + "\n");
    if (kv) WriteKvScales(*kv, KvScalesPathFor(tmp));
    CopySideFiles(source_dir, tmp);
  });
  return r;
}

}  // namespace lowbit
