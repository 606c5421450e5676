#include "plan/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "core/json_util.h"
#include "core/file_util.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"
#include "plan/inspect_detail.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using inspect_detail::QuantConfig;
using nlohmann::json;

json ReadJson(const fs::path& path) { return ReadJsonFile(path); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string StringField(const json& obj, const char* key, std::string fallback = "") {
  return obj.is_object() && obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : fallback;
}

std::vector<std::string> StringList(const json& obj, std::initializer_list<const char*> keys) {
  std::vector<std::string> out;
  for (const char* k : keys)
    if (obj.is_object() && obj.contains(k) && obj[k].is_array())
      for (const json& v : obj[k])
        if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

// Where the folder declares its quantization, in the order engines look (formats.md 3.3): config.json's
// quantization_config (or text_config's, or the legacy compression_config), ModelOpt's
// hf_quant_config.json, then the method files AutoGPTQ/AutoAWQ write beside the weights.
QuantConfig DetectConfig(const fs::path& dir, CheckpointInfo& info) {
  QuantConfig cfg;
  const fs::path config_path = dir / "config.json";
  if (fs::exists(config_path)) {
    const json config = ReadJson(config_path);
    for (const char* key : {"quantization_config", "compression_config"})
      if (config.is_object() && config.contains(key) && config[key].is_object()) {
        cfg.qc = config[key];
        cfg.where = fmt::format("{}: {}", config_path.string(), key);
        break;
      }
    cfg.experts_input_major = StringField(config, "model_type") == "gpt_oss";
    if (cfg.qc.is_null() && config.is_object() && config.contains("text_config") && config["text_config"].is_object() &&
        config["text_config"].contains("quantization_config")) {
      cfg.qc = config["text_config"]["quantization_config"];
      cfg.where = config_path.string() + ": text_config.quantization_config";
    }
  }
  const fs::path modelopt_path = dir / "hf_quant_config.json";
  if (cfg.qc.is_null() && fs::exists(modelopt_path)) {
    const json hq = ReadJson(modelopt_path);
    if (!hq.is_object() || !hq.contains("quantization") || !hq["quantization"].is_object())
      Fail("{}: no 'quantization' object", modelopt_path.string());
    cfg.qc = hq["quantization"];
    cfg.qc["quant_method"] = "modelopt";
    cfg.where = modelopt_path.string() + ": quantization";
    if (hq.contains("producer") && hq["producer"].is_object())
      info.details =
          fmt::format("producer {} {}", StringField(hq["producer"], "name"), StringField(hq["producer"], "version"));
  }
  for (const char* name : {"quantize_config.json", "quant_config.json"})
    if (cfg.qc.is_null() && fs::exists(dir / name)) {
      cfg.qc = ReadJson(dir / name);
      cfg.where = (dir / name).string();
    }
  if (cfg.qc.is_null()) return cfg;
  if (!cfg.qc.is_object()) Fail("{}: expected a JSON object", cfg.where);

  const json& qc = cfg.qc;
  if (qc.contains("lowbit")) {
    cfg.format = CheckpointFormat::kLowbit;
    info.format_name = "lowbit-packed";
    info.details = fmt::format("format_version {}", JsonView(qc["lowbit"], cfg.where, "lowbit").Get<int64_t>("format_version", 0));
    return cfg;
  }
  std::string method = Lower(StringField(qc, "quant_method"));
  if (method.empty()) method = Lower(StringField(qc, "method"));  // GPTQModel's canonical key
  if (method.empty() && (qc.contains("w_bit") || qc.contains("version")))
    method = "awq";                                            // AutoAWQ's quant_config.json
  if (method.empty() && qc.contains("bits")) method = "gptq";  // AutoGPTQ's quantize_config.json
  if (method == "gptq") {
    cfg.format = CheckpointFormat::kGptq;
    std::string cf = Lower(StringField(qc, "checkpoint_format", StringField(qc, "format", "gptq")));
    info.format_name = cf == "gptq_v2" ? "GPTQ v2" : cf == "marlin" ? "GPTQ (Marlin-packed)" : "GPTQ v1";
    info.details = cf == "gptq_v2" ? "checkpoint_format gptq_v2: zero points stored as-is"
                                   : fmt::format("checkpoint_format {}: zero points stored minus one", cf);
    info.config_ignored = StringList(qc, {"modules_to_not_convert"});
  } else if (method == "awq") {
    cfg.format = CheckpointFormat::kAwq;
    const std::string version = Lower(StringField(qc, "version", "gemm"));
    if (version != "gemm")
      Fail("{}: AWQ version '{}' uses another layout; inspect covers the GEMM version", cfg.where, version);
    info.format_name = "AWQ GEMM";
    info.config_ignored = StringList(qc, {"modules_to_not_convert"});
  } else if (method == "compressed-tensors") {
    cfg.format = CheckpointFormat::kCompressedTensors;
    info.format_name = "compressed-tensors " + StringField(qc, "format", "(no format)");
    info.details = "quantization_status " + StringField(qc, "quantization_status", "?");
    info.config_ignored = StringList(qc, {"ignore"});
    if (qc.contains("kv_cache_scheme") && qc["kv_cache_scheme"].is_object()) {
      const JsonView kv(qc["kv_cache_scheme"], cfg.where, "kv_cache_scheme");
      info.kv.declared = fmt::format("{}{}", kv.Get<std::string>("type", "int") == "float" ? "fp" : "int",
                                     kv.Get<int>("num_bits", 8));
    }
  } else if (method == "fp8") {
    cfg.format = CheckpointFormat::kFp8;
    const bool block = qc.contains("weight_block_size") && qc["weight_block_size"].is_array();
    info.format_name = block ? fmt::format("FP8 (block {}x{})", qc["weight_block_size"][0].dump(),
                                           qc["weight_block_size"].size() > 1 ? qc["weight_block_size"][1].dump() : "?")
                             : "FP8 (per-tensor)";
    info.details = "activation_scheme " + StringField(qc, "activation_scheme", "dynamic");
    info.config_ignored = StringList(qc, {"ignored_layers", "modules_to_not_convert"});
  } else if (method == "modelopt" || method == "modelopt_fp4") {
    cfg.format = CheckpointFormat::kModelOpt;
    const std::string algo = StringField(qc, "quant_algo");
    if (algo != "FP8" && algo != "NVFP4") Fail("{}: quant_algo '{}' (inspect covers FP8 and NVFP4)", cfg.where, algo);
    info.format_name = "ModelOpt " + algo;
    info.config_ignored = StringList(qc, {"exclude_modules", "ignore"});
    const std::string kv_algo = StringField(qc, "kv_cache_quant_algo");
    if (!kv_algo.empty()) info.kv.declared = Lower(kv_algo);
  } else if (method == "mxfp4") {
    cfg.format = CheckpointFormat::kMxfp4;
    info.format_name = "MXFP4 experts";
    info.details = "quant_method mxfp4: experts' *_blocks (E2M1 pairs) and *_scales (E8M0 per 32 inputs)";
    info.config_ignored = StringList(qc, {"modules_to_not_convert"});
  } else {
    Fail("{}: quant_method '{}' is not one inspect knows (gptq, awq, compressed-tensors, fp8, modelopt, mxfp4)",
         cfg.where,
         method.empty() ? "(none)" : method);
  }
  return cfg;
}

int FirstNumber(std::string_view s) {
  const auto it = std::find_if(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  int v = 0;
  for (auto p = it; p != s.end() && std::isdigit(static_cast<unsigned char>(*p)); ++p) v = v * 10 + (*p - '0');
  return v;
}

void InspectGguf(const fs::path& path, CheckpointInfo& info) {
  const GgufFile g = GgufFile::Open(path);
  info.format = CheckpointFormat::kGguf;
  info.format_name = fmt::format("GGUF v{}", g.version());
  std::map<std::string, size_t> types;
  for (const GgufTensorInfo& t : g.tensors()) {
    info.bytes += t.data.size();
    info.params += t.n_elements;
    const GgmlTypeInfo* type = FindGgmlType(t.ggml_type);
    const std::string type_name = GgmlTypeName(t.ggml_type);
    ++types[type_name];
    const bool is_float =
        t.ggml_type == kGgmlF32 || t.ggml_type == kGgmlF16 || t.ggml_type == kGgmlBF16 || t.ggml_type == kGgmlF64;
    if (t.name.starts_with("blk.")) {
      const uint32_t layer = static_cast<uint32_t>(FirstNumber(t.name));
      info.n_layers = std::max(info.n_layers, layer + 1);
    }
    if (t.dims.size() < 2) continue;
    LayerInfo& l = info.layers.emplace_back();
    l.name = t.name.ends_with(".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
    l.type = type_name;
    l.bits = FirstNumber(type_name);
    l.group = !is_float && type ? static_cast<int>(type->block_elems) : 0;
    l.rows = t.n_rows();
    l.cols = t.row_length();
    l.params = t.n_elements;
    l.bytes = t.data.size();
    l.quantized = !is_float;
    l.scheme = is_float ? type_name : fmt::format("{} ({:.4g} bpw)", type_name, l.bits_per_weight());
    if (l.quantized) {
      info.linear_params += l.params;
      info.linear_bytes += l.bytes;
    }
  }
  std::vector<std::pair<std::string, size_t>> sorted(types.begin(), types.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string hist;
  for (const auto& [name, n] : sorted) hist += fmt::format("{}{} x{}", hist.empty() ? "" : ", ", name, n);
  const GgufValue* arch = g.Find("general.architecture");
  const std::string arch_name = arch && TypeOf(*arch) == GgufType::kString ? std::get<std::string>(*arch) : "";
  info.details = fmt::format("{}tensor types {}", arch_name.empty() ? "" : "architecture " + arch_name + "; ", hist);
  // What lowbit's engine runs and writes is what llama.cpp runs: the text architectures lowbit reads, every
  // ggml type in the file (the reader refuses ids ggml does not have).
  if (RunsGgufArchitecture(arch_name))
    info.notes.push_back(fmt::format("llama.cpp loads this file (architecture '{}', tensor types {})", arch_name, hist));
  if (const GgufValue* card = g.Find("lowbit.recipe_card"); card && TypeOf(*card) == GgufType::kString)
    info.notes.push_back("written by lowbit quantize: its recipe card (method, calibration, scores) is in key "
                         "lowbit.recipe_card");
}

// The kernel-relevant summary of the quantized linears.
void Summarize(CheckpointInfo& info, const inspect_detail::CtUse& ct) {
  QuantSummary& s = info.summary;
  std::map<std::string, size_t> type_counts;
  for (const LayerInfo& l : info.layers) {
    if (!l.quantized) continue;
    ++type_counts[l.type];
    if (l.block_rows) s.fp8_block = true;
    if (l.type == "int" && !l.symmetric) s.gptq_symmetric = false;
    const int group = l.block_rows ? 0 : l.group;
    auto it = std::find_if(s.variants.begin(), s.variants.end(), [&](const LinearVariant& v) {
      return v.bits == l.bits && v.group == group && v.zero_points == l.zero_points && v.act_order == l.act_order;
    });
    if (it == s.variants.end())
      it = s.variants.insert(s.variants.end(), {l.bits, group, l.zero_points, l.act_order, 0});
    ++it->layers;
  }
  std::string main_type;
  size_t best = 0;
  for (const auto& [t, n] : type_counts)
    if (n > best) best = n, main_type = t;
  const bool quantized_format = info.format != CheckpointFormat::kDense && info.format != CheckpointFormat::kGguf;
  if (quantized_format && type_counts.empty())
    Fail("{}: the config declares {} but no quantized tensors were found", info.path, info.format_name);
  if (type_counts.size() > 1)
    info.notes.push_back(
        fmt::format("mixed element types across linears; kernels follow the majority ({})", main_type));

  switch (info.format) {
    case CheckpointFormat::kDense:
      s.method = "";
      s.family = QuantFamily::kDense;
      break;
    case CheckpointFormat::kGguf:
      s.method = "gguf";
      s.family = QuantFamily::kGguf;
      break;
    case CheckpointFormat::kLowbit:
      s.method = "lowbit";
      s.family = QuantFamily::kLowbit;
      break;
    case CheckpointFormat::kGptq:
      s.method = "gptq";
      s.family = QuantFamily::kWeightInt;
      break;
    case CheckpointFormat::kAwq:
      s.method = "awq";
      s.family = QuantFamily::kWeightInt;
      break;
    case CheckpointFormat::kFp8:
      s.method = "fp8";
      s.family = QuantFamily::kFp8;
      s.activations_quantized = true;  // W8A8: activations quantized dynamically or with input_scale
      break;
    case CheckpointFormat::kMxfp4:
      s.method = "mxfp4";
      s.family = QuantFamily::kMxfp4;
      break;
    case CheckpointFormat::kModelOpt:
      s.method = main_type == "fp4" ? "modelopt_fp4" : "modelopt";
      s.family = main_type == "fp4" ? QuantFamily::kNvfp4 : QuantFamily::kFp8;
      s.activations_quantized = true;  // ModelOpt's FP8 and NVFP4 recipes quantize activations (input_scale)
      break;
    case CheckpointFormat::kCompressedTensors: {
      s.method = "compressed-tensors";
      s.activations_quantized = !ct.activations.empty();
      const bool int8_acts = ct.activations.contains("int8");
      if (ct.formats.size() > 1) info.details += fmt::format("; group formats {}", fmt::join(ct.formats, ", "));
      if (s.activations_quantized) info.details += fmt::format("; activations {}", fmt::join(ct.activations, ", "));
      // int-quantized is W8A8; packed integer weights with quantized inputs are W4A8 / W4AFP8.
      const bool packed = ct.formats.contains("pack-quantized");
      s.fp8_activations = main_type != "fp8" && ct.activations.contains("float8");  // W4AFP8, MXFP4xFP8
      if (main_type == "int")
        s.family = s.activations_quantized && int8_acts && !packed ? QuantFamily::kInt8W8A8 : QuantFamily::kWeightInt;
      else if (ct.formats.contains("mxfp8-quantized") || ct.formats.contains("mxfp6-pack-quantized"))
        s.family = QuantFamily::kMxFloat;
      else if (main_type == "fp8")
        s.family = QuantFamily::kFp8;
      else if (main_type == "fp4") {
        const bool mx = std::any_of(info.layers.begin(), info.layers.end(),
                                    [](const LayerInfo& l) { return l.type == "fp4" && l.group == 32; });
        s.family = mx ? QuantFamily::kMxfp4 : QuantFamily::kNvfp4;
      } else
        Fail("{}: compressed-tensors weights of type '{}' are not covered", info.path, main_type);
      s.fp8_block_token_inputs = s.family == QuantFamily::kFp8 && s.fp8_block && ct.token_inputs;
      break;
    }
  }
  s.kv_fp8_declared = info.kv.declared.starts_with("fp8");
  s.kv_scales = info.kv.tensors > 0;
  if (info.format == CheckpointFormat::kGptq && info.format_name == "GPTQ v1" && !s.gptq_symmetric)
    info.notes.push_back(
        "GPTQ v1 with sym=false: a true zero point of 0 is stored as -1 and decodes as 2^bits "
        "(the v1 asymmetric defect); treat this checkpoint as potentially lossy");
}

std::string MajorityDtypeName(const CheckpointInfo& info) {
  std::map<std::string, uint64_t> by;
  for (const LayerInfo& l : info.layers) by[l.scheme] += l.params;
  std::string best = "float";
  uint64_t most = 0;
  for (const auto& [k, v] : by)
    if (v > most) most = v, best = k;
  return best;
}

bool HasSafetensors(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json")) return true;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

}  // namespace

CheckpointInfo InspectCheckpoint(const fs::path& path) {
  CheckpointInfo info;
  info.path = path.string();
  std::error_code ec;
  if (!fs::exists(path, ec)) Fail("{}: no such file or folder", path.string());
  fs::path target = path;
  inspect_detail::CtUse ct;
  if (fs::is_directory(path) && !HasSafetensors(path)) {
    std::vector<fs::path> ggufs;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".gguf") ggufs.push_back(e.path());
    if (ggufs.empty()) Fail("{}: no *.safetensors or *.gguf file in this folder", path.string());
    if (ggufs.size() > 1) Fail("{}: {} .gguf files; name the one to inspect", path.string(), ggufs.size());
    target = ggufs.front();
  }
  if (fs::is_regular_file(target) && target.extension() == ".gguf") {
    InspectGguf(target, info);
  } else {
    const fs::path dir = fs::is_directory(target) ? target : target.parent_path();
    const QuantConfig cfg = DetectConfig(dir.empty() ? fs::path(".") : dir, info);
    info.format = cfg.format;
    const SafetensorsModel st = SafetensorsModel::Open(target);
    ct = inspect_detail::CollectSafetensors(st, cfg, info);
    if (cfg.format == CheckpointFormat::kDense) info.format_name = "dense " + MajorityDtypeName(info);
  }
  Summarize(info, ct);
  return info;
}

json CheckpointToJson(const CheckpointInfo& info) {
  json layers = json::array();
  for (const LayerInfo& l : info.layers) {
    json j = {{"name", l.name},
              {"scheme", l.scheme},
              {"type", l.type},
              {"bits", l.bits},
              {"group", l.group},
              {"symmetric", l.symmetric},
              {"zero_points", l.zero_points},
              {"act_order", l.act_order},
              {"quantized", l.quantized},
              {"ignored", l.ignored},
              {"rows", l.rows},
              {"cols", l.cols},
              {"experts", l.experts},
              {"params", l.params},
              {"bytes", l.bytes},
              {"bits_per_weight", l.bits_per_weight()}};
    if (l.block_rows) j["block"] = {l.block_rows, l.block_cols};
    layers.push_back(std::move(j));
  }
  json variants = json::array();
  for (const LinearVariant& v : info.summary.variants)
    variants.push_back({{"bits", v.bits},
                        {"group", v.group},
                        {"zero_points", v.zero_points},
                        {"act_order", v.act_order},
                        {"layers", v.layers}});
  return {{"path", info.path},
          {"format", info.format_name},
          {"details", info.details},
          {"quant_method", info.summary.method},
          {"family", QuantFamilyName(info.summary.family)},
          {"activations_quantized", info.summary.activations_quantized},
          {"config_ignored", info.config_ignored},
          {"decoder_layers", info.n_layers},
          {"params", info.params},
          {"bytes", info.bytes},
          {"bits_per_weight", info.bits_per_weight()},
          {"linear_params", info.linear_params},
          {"linear_bytes", info.linear_bytes},
          {"linear_bits_per_weight", info.linear_bits_per_weight()},
          {"kv_cache",
           {{"scale_tensors", info.kv.tensors},
            {"layers_with_scales", info.kv.layers},
            {"spelling", info.kv.spelling},
            {"declared", info.kv.declared}}},
          {"variants", variants},
          {"layers", layers},
          {"notes", info.notes}};
}

}  // namespace lowbit
