#include "io/engine_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>

#include "core/error.h"
#include "core/json_util.h"
#include "io/compressed_tensors.h"
#include "io/compressed_tensors_mx.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string MethodOf(const nlohmann::json& qc) {
  if (!qc.is_object()) return "";
  for (const char* key : {"quant_method", "method"})
    if (qc.contains(key) && qc[key].is_string()) return Lower(qc[key].get<std::string>());
  return "";
}

// compressed-tensors' matcher: the class name "Linear" matches every linear, "re:<regex>" matches
// from the start of the module name (Python's re.match), anything else the exact name.
bool Matches(const std::string& target, std::string_view prefix) {
  if (target == "Linear") return true;
  if (target.starts_with("re:")) {
    const std::string name(prefix);
    return std::regex_search(name, std::regex(target.substr(3)), std::regex_constants::match_continuous);
  }
  return target == prefix;
}

// GPTQ / AWQ fields under their AutoGPTQ, AutoAWQ and transformers spellings.
int64_t FirstInt(const JsonView& v, std::initializer_list<std::string_view> keys, int64_t fallback) {
  for (std::string_view k : keys)
    if (v.Has(k)) return v.Get<int64_t>(k);
  return fallback;
}

}  // namespace

bool IsEngineQuantizationConfig(const nlohmann::json& qc) {
  if (qc.is_object() && qc.contains("lowbit")) return false;  // lowbit's own folder (io/quantized_checkpoint.h)
  const std::string m = MethodOf(qc);
  return m == "gptq" || m == "awq" || m == "compressed-tensors" || m == "fp8";
}

std::optional<EngineLinears> EngineLinears::FromFolder(const fs::path& folder) {
  // config.json's quantization_config first (as vLLM and transformers), then the quantizers' own files.
  nlohmann::json doc;
  std::string path;
  std::optional<JsonView> found;
  const fs::path config = folder / "config.json";
  if (fs::exists(config)) {
    doc = ReadJsonFile(config);
    path = config.string();
    if (doc.is_object() && doc.contains("quantization_config") && IsEngineQuantizationConfig(doc["quantization_config"]))
      found = JsonView(doc, path)["quantization_config"];
  }
  if (!found) {
    for (const char* name : {"quantize_config.json", "quant_config.json"}) {
      if (!fs::exists(folder / name)) continue;
      doc = ReadJsonFile(folder / name);
      path = (folder / name).string();
      const bool awq_native = doc.is_object() && doc.contains("w_bit");  // AutoAWQ's quant_config.json
      if (!IsEngineQuantizationConfig(doc) && !awq_native && !(doc.is_object() && doc.contains("bits"))) return std::nullopt;
      if (awq_native && !doc.contains("quant_method")) doc["quant_method"] = "awq";
      if (!doc.contains("quant_method") && !doc.contains("method")) doc["quant_method"] = "gptq";  // AutoGPTQ
      found = JsonView(doc, path);
      break;
    }
  }
  if (!found) return std::nullopt;
  const JsonView qc = found->ExpectObject();

  EngineLinears e;
  e.method_ = MethodOf(qc.value());
  e.config_path_ = path;
  if (e.method_ == "gptq") {
    QweightParams& p = e.qweight_;
    p.bits = static_cast<int>(FirstInt(qc, {"bits", "w_bit"}, 4));
    if (p.bits != 2 && p.bits != 3 && p.bits != 4 && p.bits != 8) qc["bits"].Fail("GPTQ codes are 2, 3, 4 or 8 bits");
    p.group_size = FirstInt(qc, {"group_size", "q_group_size"}, -1);
    if (p.group_size == 0 || p.group_size < -1) qc["group_size"].Fail("must be -1 (per channel) or a positive group size");
    p.sym = qc.Get<bool>("sym", true);
    const std::string format = Lower(qc.Has("checkpoint_format") ? qc.Get<std::string>("checkpoint_format")
                                                                  : qc.Get<std::string>("format", "gptq"));
    if (format != "gptq" && format != "gptq_v2")
      qc[qc.Has("checkpoint_format") ? "checkpoint_format" : "format"].Fail(
          fmt::format("is '{}'; lowbit reads GPTQ checkpoints in the gptq (v1) and gptq_v2 formats", format));
    p.gptq_v2 = format == "gptq_v2";
    if (qc.Has("dynamic")) {
      for (const auto& [key, value] : qc["dynamic"].ExpectObject().value().items())
        if (!key.starts_with("-:"))
          qc["dynamic"][key].Fail("per-module overrides of bits or group size are not supported yet (only \"-:\" "
                                  "exclusions)");
    }
    e.suffixes_ = {".qweight", ".qzeros", ".scales", ".g_idx"};
  } else if (e.method_ == "awq") {
    QweightParams& p = e.qweight_;
    p.bits = static_cast<int>(FirstInt(qc, {"bits", "w_bit"}, 4));
    if (p.bits != 4) qc[qc.Has("bits") ? "bits" : "w_bit"].Fail("AWQ GEMM checkpoints are 4-bit");
    p.group_size = FirstInt(qc, {"group_size", "q_group_size"}, 128);
    if (p.group_size <= 0) qc[qc.Has("group_size") ? "group_size" : "q_group_size"].Fail("must be a positive group size");
    if (!qc.Get<bool>("zero_point", true)) qc["zero_point"].Fail("is false; lowbit reads AWQ GEMM with zero points");
    const std::string version = Lower(qc.Get<std::string>("version", "gemm"));
    if (version != "gemm") qc["version"].Fail(fmt::format("is '{}'; lowbit reads the GEMM layout only", version));
    p.sym = false;
    e.suffixes_ = {".qweight", ".qzeros", ".scales"};
  } else if (e.method_ == "fp8") {
    e.fp8_ = ParseFp8Method(qc);
    e.suffixes_ = {".weight", ".weight_scale", ".weight_scale_inv", ".input_scale", ".activation_scale"};
  } else {
    const std::string format = qc.Get<std::string>("format", "dense");
    const JsonView groups = qc["config_groups"].ExpectObject();
    for (const auto& [name, unused] : groups.value().items()) {
      const JsonView g = groups[name].ExpectObject();
      Group group;
      group.format = g.Get<std::string>("format", format);
      const bool microscaled = IsMicroscaledFormat(group.format);
      if (group.format != "pack-quantized" && group.format != "int-quantized" && group.format != "float-quantized" &&
          group.format != "naive-quantized" && !microscaled)
        (g.Has("format") ? g["format"] : qc["format"])
            .Fail(fmt::format("is '{}'; lowbit reads compressed-tensors pack-quantized, int-quantized, float-quantized, "
                              "naive-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized, mxfp6-pack-quantized and "
                              "mxfp8-quantized checkpoints", group.format));
      group.targets = g.Get<std::vector<std::string>>("targets");
      group.weights = g["weights"].ExpectObject().value();
      group.path = g["weights"].path();
      if (g.Has("input_activations")) {
        const std::string strategy = g["input_activations"].Get<std::string>("strategy", "");
        if (microscaled && group.format != kNvfp4Format && strategy != "group" && strategy != "token")
          g["input_activations"].Fail(fmt::format("has strategy \"{}\"; lowbit runs {} weights on MX inputs (group "
                                                  "32, E8M0 scales), FP8 inputs per token or group, or unquantized "
                                                  "ones", strategy, group.format));
        if (group.format == "naive-quantized")
          g["input_activations"].Fail(fmt::format("quantized inputs with format '{}' are not supported", group.format));
        group.input = g["input_activations"].ExpectObject().value();
        group.input_path = g["input_activations"].path();
      }
      // Every field checked once, up front.
      if (group.format == "pack-quantized") (void)PackQuantizedScheme(g["weights"], DType::kF16);
      else if (microscaled) (void)MicroscaledScheme(g["weights"], group.format);
      else (void)UnpackedScheme(g["weights"], DType::kF32);
      e.groups_.push_back(std::move(group));
    }
    e.ignore_ = qc.Get<std::vector<std::string>>("ignore", {});
    e.suffixes_ = {".weight", ".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx",
                   ".input_scale", ".input_zero_point", ".weight_global_scale", ".input_global_scale"};
  }
  return e;
}

bool EngineLinears::AnyQuantized(const SafetensorsModel& st) const {
  if (method_ == "fp8")
    return std::ranges::any_of(st.names(), [&](const std::string& name) { return st.Get(name).dtype == DType::kF8E4M3; });
  return std::ranges::any_of(st.names(), [&](const std::string& name) {
    return method_ == "compressed-tensors" ? name.ends_with(".weight_packed") || name.ends_with(".weight_scale")
                                           : name.ends_with(".qweight");
  });
}

bool EngineLinears::Has(const SafetensorsModel& st, std::string_view prefix) const {
  const std::string p(prefix);
  if (method_ == "fp8") return IsFp8MethodLinear(st, p);
  if (st.Find(p + (method_ == "compressed-tensors" ? ".weight_packed" : ".qweight"))) return true;
  // compressed-tensors' unpacked formats keep P.weight, told from a dense weight by its scale.
  return method_ == "compressed-tensors" && st.Find(p + ".weight_scale") && st.Find(p + ".weight");
}

std::optional<InputQuant> EngineLinears::InputQuantOf(const SafetensorsModel& st, const std::string& prefix) const {
  if (method_ == "fp8" && Has(st, prefix)) return Fp8MethodInput(st, prefix, fp8_);
  if (method_ != "compressed-tensors" || !Has(st, prefix)) return std::nullopt;
  const Group& g = GroupOf(prefix);
  if (g.input.is_null()) return std::nullopt;
  return CompressedTensorsInput(JsonView(g.input, config_path_, g.input_path), st, prefix);
}

const EngineLinears::Group& EngineLinears::GroupOf(std::string_view prefix) const {
  for (const std::string& target : ignore_)
    if (target != "Linear" && Matches(target, prefix))
      Fail("{}: '{}' is in quantization_config.ignore, but the checkpoint holds it quantized", config_path_, prefix);
  for (const Group& g : groups_)
    for (const std::string& target : g.targets)
      if (Matches(target, prefix)) return g;
  Fail("{}: no config group of quantization_config targets '{}', but the checkpoint holds it quantized", config_path_,
       prefix);
}

OrderedTensor EngineLinears::Load(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                  uint64_t cols) const {
  if (method_ == "gptq") return ReadGptqLinear(st, prefix, rows, cols, qweight_);
  if (method_ == "awq") return {ReadAwqLinear(st, prefix, rows, cols, qweight_), {}};
  if (method_ == "fp8") return {ReadFp8MethodLinear(st, prefix, rows, cols, fp8_), {}};
  const Group& g = GroupOf(prefix);
  const TensorView* scale = st.Find(prefix + ".weight_scale");
  if (!scale) Fail("{}: tensor '{}.weight_scale' is missing", st.path().string(), prefix);
  const JsonView weights(g.weights, config_path_, g.path);
  if (g.format == "pack-quantized")
    return ReadPackQuantizedLinear(st, prefix, rows, cols, PackQuantizedScheme(weights, scale->dtype));
  if (IsMicroscaledFormat(g.format)) {
    if (st.Find(prefix + ".weight_g_idx"))
      Fail("{}: tensor '{}.weight_g_idx': {} has no act-order", st.path().string(), prefix, g.format);
    return {ReadMicroscaledLinear(st, prefix, rows, cols, MicroscaledScheme(weights, g.format)), {}};
  }
  if (st.Find(prefix + ".weight_g_idx"))
    Fail("{}: tensor '{}.weight_g_idx': act-order is defined for pack-quantized group weights, not {}",
         st.path().string(), prefix, g.format);
  return {ReadUnpackedLinear(st, prefix, rows, cols, UnpackedScheme(weights, scale->dtype)), {}};
}

std::vector<std::string> KvScaleSuffixes(char which) {
  return {fmt::format("{}_scale", which), fmt::format("{}_proj.{}_scale", which, which),
          fmt::format("{}_proj.output_scale", which), "kv_scale"};
}

namespace {

// One layer's K or V cache scale, nullopt when the checkpoint stores none.
std::optional<float> LayerKvScale(const SafetensorsModel& st, uint32_t layer, char which) {
  std::optional<float> found;
  std::string found_name;
  for (const std::string& suffix : KvScaleSuffixes(which)) {
    const std::string name = fmt::format("model.layers.{}.self_attn.{}", layer, suffix);
    const TensorView* t = st.Find(name);
    if (!t) continue;
    if (found)
      Fail("{}: tensors '{}' and '{}' both give layer {}'s {} cache scale", st.path().string(), found_name, name,
           layer, which == 'k' ? 'K' : 'V');
    if (t->numel() != 1)
      Fail("{}: tensor '{}' has {} values; a KV scale is one number", st.path().string(), name, t->numel());
    const float value = ToFloat32(*t)[0];
    if (!(value > 0) || !std::isfinite(value))
      Fail("{}: tensor '{}' is {}; a KV scale must be positive and finite", st.path().string(), name, value);
    found = value;
    found_name = name;
  }
  return found;
}

}  // namespace

std::optional<KvScales> ReadCheckpointKvScales(const fs::path& folder, uint32_t n_layers) {
  const fs::path config = folder / "config.json";
  if (!fs::is_directory(folder) || !fs::exists(config)) return std::nullopt;
  const nlohmann::json doc = ReadJsonFile(config);
  const JsonView root(doc, config.string());
  if (!doc.is_object() || !root.Has("quantization_config")) return std::nullopt;
  const JsonView qc = root["quantization_config"].ExpectObject();
  KvScales s;
  s.dtype = KvDtype::kFp8E4M3;  // the 8-bit float of both formats
  if (!qc.Has("kv_cache_scheme")) {
    // quant_method fp8 (vLLM's Fp8Config) has no scheme: its attention layers take whatever scales the
    // checkpoint holds; a layer with one of the two uses it for both (the larger), one with none 1.0.
    if (MethodOf(doc["quantization_config"]) != "fp8") return std::nullopt;
    const SafetensorsModel st = SafetensorsModel::Open(folder);
    bool any = false;
    for (uint32_t i = 0; i < n_layers; ++i) {
      const std::optional<float> k = LayerKvScale(st, i, 'k'), v = LayerKvScale(st, i, 'v');
      any = any || k || v;
      const float both = std::max(k.value_or(0.0f), v.value_or(0.0f));
      s.k.push_back(k && v ? *k : both > 0 ? both : 1.0f);
      s.v.push_back(k && v ? *v : both > 0 ? both : 1.0f);
    }
    if (!any) return std::nullopt;
    return s;
  }
  const JsonView kv = qc["kv_cache_scheme"].ExpectObject();
  if (kv.Get<std::string>("type", "float") != "float" || kv.Get<int>("num_bits", 8) != 8)
    kv.Fail("lowbit reads FP8 KV caches (type float, num_bits 8)");
  if (const std::string strategy = kv.Get<std::string>("strategy", "tensor"); strategy != "tensor")
    kv["strategy"].Fail(fmt::format("is '{}'; lowbit's FP8 cache has one k and one v scale per layer (tensor)", strategy));
  if (!kv.Get<bool>("symmetric", true)) kv["symmetric"].Fail("FP8 KV scales are symmetric");
  if (kv.Get<bool>("dynamic", false)) kv["dynamic"].Fail("dynamic KV scales are not stored; lowbit reads static ones");
  const SafetensorsModel st = SafetensorsModel::Open(folder);
  for (uint32_t i = 0; i < n_layers; ++i)
    for (const auto& [which, out] : {std::pair{'k', &s.k}, std::pair{'v', &s.v}}) {
      const std::optional<float> value = LayerKvScale(st, i, which);
      if (!value)
        Fail("{}: tensor 'model.layers.{}.self_attn.{}_scale' is missing, but {} has a "
             "quantization_config.kv_cache_scheme",
             st.path().string(), i, which, config.string());
      out->push_back(*value);
    }
  return s;
}

}  // namespace lowbit
