// The per-layer walk of `lowbit inspect` over safetensors headers: one module (tensor-name prefix)
// at a time, recognised by the tensors it holds (formats.md sections 3-6):
//   qweight/qzeros/scales/g_idx                      GPTQ (input-major) or AWQ (output-packed)
//   weight_packed (+ weight_scale, weight_zero_point, weight_g_idx, weight_global_scale, weight_shape)
//                                                    compressed-tensors packed formats, or lowbit's own
//   weight F8_E4M3 / I8 / U8 (+ weight_scale[_inv|_2], input_scale)
//                                                    FP8, compressed-tensors int/float-quantized, ModelOpt
//   weight F32/F16/BF16                              a dense weight
//   experts.NAME_blocks + NAME_scales / experts.NAME  GPT-OSS's expert stacks, MXFP4 or dense
// Shapes are checked against the config (bits x rows, group x scale rows) so a checkpoint whose
// config and tensors disagree is reported instead of being described wrongly.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/json_util.h"
#include "plan/inspect_detail.h"
#include "quant/scheme.h"

namespace lowbit::inspect_detail {
namespace {

using nlohmann::json;

// Tensors that describe a weight (scales, zero points, permutations, activation/KV scales): they
// count as bytes, never as parameters.
const std::set<std::string, std::less<>> kSideLeaves = {"qzeros",
                                                        "scales",
                                                        "g_idx",
                                                        "weight_scale",
                                                        "weight_scale_inv",
                                                        "weight_scale_2",
                                                        "weight_zero_point",
                                                        "weight_global_scale",
                                                        "weight_g_idx",
                                                        "input_order",
                                                        "weight_shape",
                                                        "input_scale",
                                                        "activation_scale",
                                                        "input_global_scale",
                                                        "input_zero_point",
                                                        "output_scale",
                                                        "output_zero_point",
                                                        "k_scale",
                                                        "v_scale",
                                                        "q_scale",
                                                        "kv_scale",
                                                        "prob_scale",
                                                        "pre_quant_scale"};

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64; }
bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }
bool IsEmbedding(std::string_view name) {
  return name.find("embed") != std::string_view::npos || name.ends_with("wte") || name.ends_with("tok_embeddings");
}

// Config fields read strictly (an integer in int's range, a real bool); `where` names the config.
int IntField(const json& obj, std::initializer_list<const char*> keys, int fallback, const std::string& where) {
  const JsonView view(obj, where);
  for (const char* k : keys)
    if (view.Has(k)) return view.Get<int>(k);
  return fallback;
}
bool BoolField(const json& obj, const char* key, bool fallback, const std::string& where) {
  return JsonView(obj, where).Get<bool>(key, fallback);
}
std::string StringField(const json& obj, const char* key, std::string fallback, const std::string& where) {
  return JsonView(obj, where).Get<std::string>(key, std::move(fallback));
}
// A block size [rows, cols] of positive integers.
std::pair<uint32_t, uint32_t> BlockField(const json& value, const std::string& where) {
  const std::vector<JsonView> dims = JsonView(value, where).Items();
  if (dims.size() != 2) JsonView(value, where).Fail("must be [rows, cols]");
  const uint32_t rows = dims[0].As<uint32_t>(), cols = dims[1].As<uint32_t>();
  if (rows == 0 || cols == 0) JsonView(value, where).Fail("must hold positive sizes");
  return {rows, cols};
}

// A Python-style re.match (anchored at the start) over a module name; the config's spelling is
// checked up front so a bad pattern names the config key.
std::regex CompileRegex(const std::string& pattern, const std::string& where) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    Fail("{}: regex '{}' does not compile: {}", where, pattern, e.what());
  }
}
bool MatchAtStart(const std::regex& re, const std::string& s) {
  return std::regex_search(s, re, std::regex_constants::match_continuous);
}

std::string GroupText(const LayerInfo& l) {
  if (l.block_rows) return fmt::format("block{}x{}", l.block_rows, l.block_cols);
  return l.group == -1 ? "channel" : l.group == 0 ? "tensor" : fmt::format("g{}", l.group);
}

std::string SchemeText(const LayerInfo& l) {
  if (l.type == "int")
    return fmt::format("int{} {} {}{}", l.bits, GroupText(l), l.symmetric ? "sym" : "asym",
                       l.act_order ? " act-order" : "");
  if (l.type == "fp8") return "fp8_e4m3 " + GroupText(l);
  if (l.type == "fp6") return "fp6_e2m3 " + GroupText(l);
  if (l.type == "fp4")
    return l.group == 16   ? "nvfp4 (fp4_e2m1 g16, e4m3 scales)"
           : l.group == 32 ? "mxfp4 (fp4_e2m1 g32, e8m0 scales)"
                           : "fp4_e2m1 " + GroupText(l);
  return l.type;
}

struct Module {
  std::string name;
  std::map<std::string, const TensorView*, std::less<>> leaves;
  const TensorView* Leaf(std::string_view leaf) const {
    const auto it = leaves.find(leaf);
    return it == leaves.end() ? nullptr : it->second;
  }
};

// One compressed-tensors config group, with its targets compiled.
struct CtGroup {
  std::string name, format, where;
  std::vector<std::string> names;
  std::vector<std::regex> regexes;
  bool all_linears = false;
  json weights, input;
};

class Walker {
 public:
  Walker(const SafetensorsModel& st, const QuantConfig& cfg, CheckpointInfo& info) : st_(st), cfg_(cfg), info_(info) {}

  const CtUse& ct_use() const { return ct_use_; }

  void Run() {
    std::map<std::string, Module> modules;
    for (const std::string& name : st_.names()) {
      const TensorView& t = st_.Get(name);
      info_.bytes += t.data.size();
      const size_t dot = name.rfind('.');
      const std::string prefix = dot == std::string::npos ? "" : name.substr(0, dot);
      Module& m = modules[prefix];
      m.name = prefix;
      m.leaves[dot == std::string::npos ? name : name.substr(dot + 1)] = &t;
    }
    if (cfg_.format == CheckpointFormat::kGptq) PrepareGptq();
    if (cfg_.format == CheckpointFormat::kCompressedTensors) PrepareCt();
    std::set<uint32_t> kv_layers;
    for (const auto& [prefix, m] : modules) {
      Visit(m);
      for (const auto& [leaf, t] : m.leaves)
        if (IsKvScale(m.name, leaf)) {
          ++info_.kv.tensors;
          if (info_.kv.spelling.empty()) info_.kv.spelling = KvSpelling(m.name, leaf);
          if (const auto layer = LayerIndex(m.name)) kv_layers.insert(*layer);
        }
      if (const auto layer = LayerIndex(m.name)) info_.n_layers = std::max(info_.n_layers, *layer + 1);
    }
    info_.kv.layers = kv_layers.size();
  }

 private:
  static std::optional<uint32_t> LayerIndex(const std::string& name) {
    const size_t at = name.find("layers.");
    if (at == std::string::npos) return std::nullopt;
    uint32_t v = 0;
    size_t i = at + 7, digits = 0;
    for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i, ++digits)
      v = v * 10 + (name[i] - '0');
    if (digits == 0) return std::nullopt;
    return v;
  }
  // Every spelling vLLM's maybe_remap_kv_scale_name accepts (formats.md 6.2).
  static bool IsKvScale(const std::string& module, std::string_view leaf) {
    if (leaf == "k_scale" || leaf == "v_scale" || leaf == "kv_scale") return true;
    return leaf == "output_scale" && (module.ends_with("k_proj") || module.ends_with("v_proj"));
  }
  static std::string KvSpelling(const std::string& module, std::string_view leaf) {
    const size_t at = module.find("layers.");
    std::string tail = module;
    if (at != std::string::npos) {
      const size_t dot = module.find('.', at + 7);
      tail = dot == std::string::npos ? "" : module.substr(dot + 1);
    }
    return tail.empty() ? std::string(leaf) : tail + "." + std::string(leaf);
  }

  std::string FileOf(const std::string& tensor) const {
    for (const SafetensorsFile& f : st_.shards())
      if (f.Find(tensor)) return f.path().string();
    return st_.path().string();
  }
  template <class... Args>
  [[noreturn]] void Bad(const TensorView& t, fmt::format_string<Args...> format, Args&&... args) const {
    Fail("{}: tensor '{}': {}", FileOf(t.name), t.name, fmt::format(format, std::forward<Args>(args)...));
  }
  const TensorView& Need(const Module& m, std::string_view leaf, const TensorView& primary) const {
    const TensorView* t = m.Leaf(leaf);
    if (!t)
      Fail("{}: tensor '{}.{}' is missing ({} is present; {})", FileOf(primary.name), m.name, leaf, primary.name,
           cfg_.where);
    return *t;
  }

  void Visit(const Module& m) {
    std::set<std::string, std::less<>> used;  // leaves a quantized layer consumed
    if (const TensorView* q = m.Leaf("qweight")) {
      if (cfg_.format == CheckpointFormat::kGptq)
        Gptq(m, *q);
      else if (cfg_.format == CheckpointFormat::kAwq)
        Awq(m, *q);
      else
        Bad(*q, "a GPTQ/AWQ qweight, but {}", Described());
      used = {"qweight", "qzeros", "scales", "g_idx"};
    } else if (const TensorView* p = m.Leaf("weight_packed")) {
      if (cfg_.format == CheckpointFormat::kLowbit)
        Lowbit(m, *p);
      else if (cfg_.format == CheckpointFormat::kCompressedTensors)
        Ct(m, *p);
      else
        Bad(*p, "a packed weight, but {}", Described());
      used = {"weight_packed"};
    } else if (const TensorView* w = m.Leaf("weight"); w && !IsFloat(w->dtype)) {
      if (cfg_.format == CheckpointFormat::kCompressedTensors)
        Ct(m, *w);
      else if (cfg_.format == CheckpointFormat::kFp8 || cfg_.format == CheckpointFormat::kModelOpt)
        FloatQuant(m, *w);
      else
        Bad(*w, "{} weight, but {}", DTypeName(w->dtype), Described());
      used = {"weight"};
    }
    if (!used.empty()) {
      LayerInfo& l = info_.layers.back();
      for (const auto& [leaf, t] : m.leaves)
        if (leaf != "bias" && (used.contains(leaf) || kSideLeaves.contains(leaf)) && !IsKvScale(m.name, leaf))
          l.bytes += t->data.size();
      info_.params += l.params;
      info_.linear_params += l.params;
      info_.linear_bytes += l.bytes;
    }
    if (m.name.ends_with(".experts")) Mxfp4Experts(m, used);
    for (const auto& [leaf, t] : m.leaves) {
      if (used.contains(leaf) || kSideLeaves.contains(leaf) || !IsFloat(t->dtype)) continue;
      info_.params += t->numel();
      if (leaf == "weight" && t->shape.size() == 2) Dense(m, *t);
      if (t->shape.size() == 3 && m.name.ends_with(".experts")) DenseExperts(m, leaf, *t);
    }
  }

  // GPT-OSS's experts as openai/gpt-oss ships them (io/stacked_experts.h): NAME_blocks U8 [E, out, in / 32, 16]
  // and NAME_scales U8 [E, out, in / 32], one mxfp4 matrix per expert.
  void Mxfp4Experts(const Module& m, std::set<std::string, std::less<>>& used) {
    for (const auto& [leaf, blocks] : m.leaves) {
      if (!leaf.ends_with("_blocks")) continue;
      if (cfg_.format != CheckpointFormat::kMxfp4) Bad(*blocks, "MXFP4 expert blocks, but {}", Described());
      const std::string base = leaf.substr(0, leaf.size() - 7);
      const TensorView& scales = Need(m, base + "_scales", *blocks);
      const std::vector<uint64_t>& b = blocks->shape;
      if (blocks->dtype != DType::kU8 || b.size() != 4 || b[3] != 16)
        Bad(*blocks, "MXFP4 blocks must be U8 [experts, out, in / 32, 16]");
      if (scales.dtype != DType::kU8 || scales.shape != std::vector<uint64_t>{b[0], b[1], b[2]})
        Bad(scales, "MXFP4 scales must be U8 [{}, {}, {}] beside blocks [{}, {}, {}, 16]", b[0], b[1], b[2], b[0], b[1],
            b[2]);
      LayerInfo& l = Add(m, b[1], b[2] * 32);
      l.name = m.name + "." + base;
      l.experts = b[0];
      l.params *= b[0];
      l.type = "fp4";
      l.bits = 4;
      l.group = 32;
      l.scheme = SchemeText(l);
      l.bytes = blocks->data.size() + scales.data.size();
      info_.params += l.params;
      info_.linear_params += l.params;
      info_.linear_bytes += l.bytes;
      used.insert(leaf);
      used.insert(base + "_scales");
    }
  }

  // A 16/32-bit stack of expert matrices: [E, in, out] applied as x W (GPT-OSS), else [E, out, in].
  void DenseExperts(const Module& m, const std::string& leaf, const TensorView& w) {
    Dense(m, w);
    LayerInfo& l = info_.layers.back();
    l.name = m.name + "." + leaf;
    l.experts = w.shape[0];
    l.rows = w.shape[cfg_.experts_input_major ? 2 : 1];
    l.cols = w.shape[cfg_.experts_input_major ? 1 : 2];
  }

  std::string Described() const {
    return cfg_.where.empty() ? "the checkpoint has no quantization config"
                              : "the config is " + info_.format_name + " (" + cfg_.where + ")";
  }

  LayerInfo& Add(const Module& m, uint64_t rows, uint64_t cols) {
    LayerInfo& l = info_.layers.emplace_back();
    l.name = m.name;
    l.rows = rows;
    l.cols = cols;
    l.params = rows * cols;
    l.quantized = true;
    return l;
  }

  void Dense(const Module& m, const TensorView& w) {
    LayerInfo& l = info_.layers.emplace_back();
    l.name = m.name;
    l.type = "float";
    l.scheme = std::string(DTypeName(w.dtype));
    l.bits = static_cast<int>(8 * DTypeSize(w.dtype));
    l.rows = w.shape[0];
    l.cols = w.shape.size() > 1 ? w.shape[1] : 1;
    l.params = w.numel();
    l.bytes = w.data.size();
    l.ignored = cfg_.format != CheckpointFormat::kDense && !IsEmbedding(m.name);
  }

  // ---- GPTQ (formats.md 3): qweight [K*b/32, N] int32, scales [ceil(K/G), N], g_idx [K]. ----
  struct DynamicRule {
    bool negative;
    std::regex re;
    json overrides;
  };
  std::vector<DynamicRule> dynamic_;
  bool zeros_checked_ = false;

  void PrepareGptq() {
    const json& qc = cfg_.qc;
    if (!qc.contains("dynamic") || !qc["dynamic"].is_object()) return;
    for (const auto& [key, value] : qc["dynamic"].items()) {
      const bool negative = key.starts_with("-:");
      const std::string pattern = key.starts_with("+:") || negative ? key.substr(2) : key;
      dynamic_.push_back({negative, CompileRegex(pattern, cfg_.where + ".dynamic"), value});
    }
  }

  void Gptq(const Module& m, const TensorView& qweight) {
    const json& qc = cfg_.qc;
    int bits = IntField(qc, {"bits", "w_bit"}, 0, cfg_.where), group = IntField(qc, {"group_size", "q_group_size"}, -1, cfg_.where);
    bool sym = BoolField(qc, "sym", true, cfg_.where), desc_act = BoolField(qc, "desc_act", false, cfg_.where);
    for (const DynamicRule& r : dynamic_) {
      if (!MatchAtStart(r.re, m.name)) continue;
      if (r.negative) Bad(qweight, "is quantized, but {}.dynamic excludes '{}'", cfg_.where, m.name);
      if (r.overrides.is_object()) {
        const std::string where = cfg_.where + ".dynamic";
        bits = IntField(r.overrides, {"bits"}, bits, where);
        group = IntField(r.overrides, {"group_size"}, group, where);
        sym = BoolField(r.overrides, "sym", sym, where);
        desc_act = BoolField(r.overrides, "desc_act", desc_act, where);
      }
      break;
    }
    if (bits < 2 || bits > 8) Fail("{}: bits {} is not a GPTQ width (2, 3, 4, 8)", cfg_.where, bits);
    const TensorView& scales = Need(m, "scales", qweight);
    const TensorView& qzeros = Need(m, "qzeros", qweight);
    if (qweight.shape.size() != 2 || scales.shape.size() != 2) Bad(qweight, "qweight and scales must be 2-D");
    const uint64_t n = qweight.shape[1];
    const TensorView* g_idx = m.Leaf("g_idx");
    const uint64_t k = g_idx ? g_idx->numel() : qweight.shape[0] * 32 / bits;
    if ((k * bits + 31) / 32 != qweight.shape[0])
      Bad(qweight, "{} rows, but {} input features at {} bits pack into {} int32 rows", qweight.shape[0], k, bits,
          (k * bits + 31) / 32);
    const uint64_t want_groups = group <= 0 ? 1 : (k + group - 1) / group;
    if (scales.shape[0] != want_groups || scales.shape[1] != n)
      Bad(scales, "shape [{}, {}], but group_size {} over {} inputs x {} outputs needs [{}, {}]", scales.shape[0],
          scales.shape[1], group, k, n, want_groups, n);
    LayerInfo& l = Add(m, n, k);
    l.type = "int";
    l.bits = bits;
    l.group = group <= 0 ? -1 : group;
    l.symmetric = sym;
    l.zero_points = !sym;
    l.act_order = desc_act && l.group != -1;  // one group per row: act-order changes nothing (vLLM drops it)
    l.scheme = SchemeText(l);
    if (!zeros_checked_ && sym && (bits == 4 || bits == 8) && qzeros.data.size() >= 4) CheckZeros(qzeros, bits);
  }

  // Symmetric GPTQ stores one zero point, 2^(b-1), in every field: v1 writes it minus one
  // (0x77777777 for 4-bit), v2 as-is (0x88888888). A word that matches the other version means the
  // config's checkpoint_format is wrong, and the wrong offset shifts every weight by one step.
  void CheckZeros(const TensorView& qzeros, int bits) {
    zeros_checked_ = true;
    uint32_t word = 0;
    std::memcpy(&word, qzeros.data.data(), 4);
    const uint32_t unit = bits == 4 ? 0x11111111u : 0x01010101u;
    const uint32_t v2 = unit * (1u << (bits - 1)), v1 = v2 - unit;
    const bool says_v2 = info_.format_name == "GPTQ v2";
    if (word == (says_v2 ? v1 : v2))
      info_.notes.push_back(
          fmt::format("{}: first word 0x{:08x} is the {} layout of a symmetric zero point, but the "
                      "config says {}",
                      qzeros.name, word, says_v2 ? "v1 (zeros minus one)" : "v2", info_.format_name));
  }

  // ---- AWQ GEMM (formats.md 4): qweight [K, N*b/32], qzeros [K/G, N*b/32], scales [K/G, N]. ----
  void Awq(const Module& m, const TensorView& qweight) {
    const json& qc = cfg_.qc;
    const int bits = IntField(qc, {"w_bit", "bits"}, 4, cfg_.where);
    const int group = IntField(qc, {"q_group_size", "group_size"}, 128, cfg_.where);
    const bool zero_point = BoolField(qc, "zero_point", true, cfg_.where);
    if (bits < 2 || bits > 8) Fail("{}: w_bit {} is not an AWQ width", cfg_.where, bits);
    const TensorView& scales = Need(m, "scales", qweight);
    if (qweight.shape.size() != 2 || scales.shape.size() != 2) Bad(qweight, "qweight and scales must be 2-D");
    const uint64_t k = qweight.shape[0], n = scales.shape[1];
    if (qweight.shape[1] * 32 != n * bits)
      Bad(qweight, "{} int32 columns, but {} outputs at {} bits need {}", qweight.shape[1], n, bits, n * bits / 32);
    const uint64_t want_groups = group <= 0 ? 1 : (k + group - 1) / group;
    if (scales.shape[0] != want_groups)
      Bad(scales, "{} rows, but group {} over {} inputs needs {}", scales.shape[0], group, k, want_groups);
    LayerInfo& l = Add(m, n, k);
    l.type = "int";
    l.bits = bits;
    l.group = group <= 0 ? -1 : group;
    l.symmetric = !zero_point;
    l.zero_points = zero_point && m.Leaf("qzeros");
    l.scheme = SchemeText(l);
  }

  // ---- lowbit's own folder: the scheme string per linear (io/quantized_checkpoint.h). ----
  void Lowbit(const Module& m, const TensorView& packed) {
    const json& tensors = cfg_.qc["lowbit"]["tensors"];
    if (!tensors.is_object() || !tensors.contains(m.name) || !tensors[m.name].is_string())
      Bad(packed, "not listed in {}.lowbit.tensors", cfg_.where);
    const QuantScheme s = ParseScheme(tensors[m.name].get<std::string>());
    if (packed.shape.size() != 2) Bad(packed, "must be 2-D [rows, row bytes]");
    const TensorView* g_idx = m.Leaf("weight_g_idx");
    const uint64_t cols = g_idx ? g_idx->numel() : packed.shape[1] * 8 / s.element->bits;
    LayerInfo& l = Add(m, packed.shape[0], cols);
    const ElementKind kind = s.element->kind;
    l.type = kind == ElementKind::kInt       ? "int"
             : s.element->name == "fp8_e4m3" ? "fp8"
             : s.element->name == "fp4_e2m1" ? "fp4"
                                             : std::string(s.element->name);
    l.bits = s.element->bits;
    const Granularity& g = s.granularity;
    l.group = g.kind == GranularityKind::kGroup     ? static_cast<int>(g.group)
              : g.kind == GranularityKind::kChannel ? -1
                                                    : 0;
    if (g.kind == GranularityKind::kBlock) {
      l.block_rows = g.block_rows;
      l.block_cols = g.block_cols;
    }
    l.symmetric = !s.asymmetric();
    l.zero_points = s.asymmetric();
    l.act_order = m.Leaf("input_order") != nullptr;  // groups in processing order, a stored column order
    l.scheme = s.ToString();
  }

  // ---- compressed-tensors (formats.md 5). ----
  std::vector<CtGroup> ct_groups_;

  void PrepareCt() {
    const json& qc = cfg_.qc;
    if (!qc.contains("config_groups") || !qc["config_groups"].is_object())
      Fail("{}: compressed-tensors config without config_groups", cfg_.where);
    for (const auto& [name, g] : qc["config_groups"].items()) {
      CtGroup group;
      group.name = name;
      if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object())
        Fail("{}.config_groups.{}: no 'weights' arguments", cfg_.where, name);
      group.where = cfg_.where + ".config_groups." + name;
      group.format = StringField(g, "format", StringField(qc, "format", "", cfg_.where), group.where);
      group.weights = g["weights"];
      group.input = g.contains("input_activations") ? g["input_activations"] : json(nullptr);
      for (const json& t : g.contains("targets") && g["targets"].is_array() ? g["targets"] : json::array()) {
        if (!t.is_string()) continue;
        const std::string target = t.get<std::string>();
        if (target == "Linear")
          group.all_linears = true;
        else if (target.starts_with("re:"))
          group.regexes.push_back(CompileRegex(target.substr(3), cfg_.where + ".config_groups." + name));
        else
          group.names.push_back(target);
      }
      ct_groups_.push_back(std::move(group));
    }
  }

  const CtGroup& CtGroupFor(const Module& m, const TensorView& w) const {
    for (const CtGroup& g : ct_groups_) {
      if (g.all_linears) return g;
      for (const std::string& n : g.names)
        if (m.name == n || m.name.ends_with("." + n)) return g;
      for (const std::regex& re : g.regexes)
        if (MatchAtStart(re, m.name)) return g;
    }
    if (ct_groups_.size() == 1) return ct_groups_.front();
    Bad(w, "no config group of {} targets '{}'", cfg_.where, m.name);
  }

  void Ct(const Module& m, const TensorView& w) {
    const CtGroup& g = CtGroupFor(m, w);
    const json& a = g.weights;
    const std::string where = g.where + ".weights";
    const int bits = IntField(a, {"num_bits"}, 8, where);
    if (bits < 1 || bits > 32) Fail("{}: num_bits {} is not a weight width", where, bits);
    const std::string type = StringField(a, "type", "int", where);
    const int group_size = IntField(a, {"group_size"}, 0, where);
    std::string strategy = StringField(a, "strategy", "", where);
    if (strategy.empty()) strategy = !JsonView(a, where).Has("group_size") ? "tensor" : group_size > 0 ? "group" : "channel";
    if (w.shape.size() != 2) Bad(w, "must be 2-D");
    uint64_t rows = w.shape[0], cols = w.shape[1];
    if (w.name.ends_with("weight_packed")) {
      if (type == "float") {
        if (8 % bits != 0 && bits != 6) Bad(w, "{}-bit float codes are not a compressed-tensors packing", bits);
        cols = cols * 8 / bits;  // bytes of FP4 (two per byte) or MXFP6 (four in three) codes
      } else if (const TensorView* shape = m.Leaf("weight_shape")) {
        const std::vector<float> dims = ToFloat32(*shape);
        if (dims.size() != 2) Bad(*shape, "must hold [out, in]");
        rows = static_cast<uint64_t>(dims[0]);
        cols = static_cast<uint64_t>(dims[1]);
      } else if (32 % bits == 0) {
        cols = cols * 32 / bits;
      } else {
        Bad(w, "{}-bit packing needs weight_shape to know the input size", bits);
      }
    }
    LayerInfo& l = Add(m, rows, cols);
    l.bits = bits;
    l.type = type == "int" ? "int" : bits == 8 ? "fp8" : bits == 6 ? "fp6" : bits == 4 ? "fp4" : "float" + std::to_string(bits);
    if (strategy == "channel")
      l.group = -1;
    else if (strategy == "group" || strategy == "tensor_group")
      l.group = group_size;
    else if (strategy == "block" && JsonView(a, where).Has("block_structure"))
      std::tie(l.block_rows, l.block_cols) = BlockField(a["block_structure"], where + ".block_structure");
    l.symmetric = BoolField(a, "symmetric", true, where);
    l.zero_points = !l.symmetric || m.Leaf("weight_zero_point");
    // actorder "weight" / "static" keeps the codes in column order (nothing stored); "group" /
    // "dynamic" (or true) stores a weight_g_idx.
    const nlohmann::json order = a.contains("actorder") ? a["actorder"] : nlohmann::json();
    l.act_order = order == true || order == "group" || order == "dynamic" || m.Leaf("weight_g_idx");
    l.scheme = SchemeText(l);
    if (g.input.is_object()) {
      const int abits = IntField(g.input, {"num_bits"}, 8, g.where + ".input_activations");
      const std::string atype = StringField(g.input, "type", "int", g.where + ".input_activations");
      const bool asym = !BoolField(g.input, "symmetric", true, g.where + ".input_activations");
      l.scheme += fmt::format(" + {}{}{} activations", asym ? "asym " : "", atype == "int" ? "int" : "fp", abits);
      ct_use_.activations.insert(atype + std::to_string(abits));
      if (StringField(g.input, "strategy", "", g.where + ".input_activations") == "token") ct_use_.token_inputs = true;
    }
    if (!g.format.empty()) ct_use_.formats.insert(g.format);
  }

  // ---- FP8 (quant_method fp8, ModelOpt FP8) and ModelOpt NVFP4 (formats.md 6). ----
  void FloatQuant(const Module& m, const TensorView& w) {
    if (w.shape.size() != 2) Bad(w, "must be 2-D");
    if (w.dtype == DType::kU8) {  // ModelOpt NVFP4: two E2M1 codes per byte, E4M3 scale per 16
      const TensorView& scale = Need(m, "weight_scale", w);
      LayerInfo& l = Add(m, w.shape[0], w.shape[1] * 2);
      if (scale.shape.size() != 2 || scale.shape[1] * 16 != l.cols)
        Bad(scale, "NVFP4 block scales must be [{}, {}]", l.rows, l.cols / 16);
      l.type = "fp4";
      l.bits = 4;
      l.group = 16;
      l.scheme = SchemeText(l);
      return;
    }
    if (!IsFp8(w.dtype)) Bad(w, "{} weight in an FP8 checkpoint", DTypeName(w.dtype));
    LayerInfo& l = Add(m, w.shape[0], w.shape[1]);
    l.type = "fp8";
    l.bits = 8;
    if (const TensorView* inv = m.Leaf("weight_scale_inv")) {  // block-wise: a multiplier despite the name
      if (!cfg_.qc.contains("weight_block_size"))
        Bad(*inv, "block scales, but {} has no two-element weight_block_size", cfg_.where);
      std::tie(l.block_rows, l.block_cols) = BlockField(cfg_.qc["weight_block_size"], cfg_.where + ".weight_block_size");
      const uint64_t gr = (l.rows + l.block_rows - 1) / l.block_rows, gc = (l.cols + l.block_cols - 1) / l.block_cols;
      if (inv->shape.size() != 2 || inv->shape[0] != gr || inv->shape[1] != gc)
        Bad(*inv, "block {}x{} over [{}, {}] needs scales [{}, {}]", l.block_rows, l.block_cols, l.rows, l.cols, gr,
            gc);
    } else {
      const TensorView& scale = Need(m, "weight_scale", w);
      l.group = scale.numel() == 1 ? 0 : scale.numel() == l.rows ? -1 : 0;
    }
    l.scheme = SchemeText(l);
  }

  const SafetensorsModel& st_;
  const QuantConfig& cfg_;
  CheckpointInfo& info_;
  CtUse ct_use_;
};

}  // namespace

CtUse CollectSafetensors(const SafetensorsModel& st, const QuantConfig& cfg, CheckpointInfo& info) {
  Walker w(st, cfg, info);
  w.Run();
  return w.ct_use();
}

}  // namespace lowbit::inspect_detail
