#include "plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/json_util.h"
#include "core/file_util.h"
#include "plan/report_charts.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using report::Escape;
using report::Num;

// Larger JSON files are tokenizers and the like, never a command's output.
constexpr uintmax_t kMaxJsonBytes = 32u << 20;

double Get(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}
std::string Str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}
std::string Gb(double bytes) { return std::isfinite(bytes) ? fmt::format("{:.2f}", bytes / 1e9) : "-"; }
std::string Pct(double v) { return std::isfinite(v) ? fmt::format("{:.2f} %", 100 * v) : "-"; }

bool IsRecipeCard(const json& j) {
  return j.is_object() && j.contains("recipe") && j["recipe"].is_object() &&
         (j.contains("bits_per_weight") || j.contains("tensors"));
}
bool IsBench(const json& j) {
  return j.is_array() && !j.empty() && std::all_of(j.begin(), j.end(), [](const json& e) {
           return e.is_object() && e.contains("format") && e.contains("op") && e.contains("gbps");
         });
}
bool IsPlan(const json& j) {
  return j.is_object() && j.contains("formats") && j["formats"].is_array() && j.contains("hardware") &&
         std::all_of(j["formats"].begin(), j["formats"].end(),
                     [](const json& f) { return f.is_object() && f.contains("format") && f.contains("weight_bytes"); });
}

RecipeRun ReadRecipe(const json& j, std::string name) {
  RecipeRun r;
  r.name = std::move(name);
  r.method = Str(j["recipe"], "method");
  r.format = Str(j["recipe"], "format");
  r.scheme = Str(j, "scheme");
  r.bits_per_weight = Get(j, "bits_per_weight");
  if (j.contains("eval") && j["eval"].is_object()) {
    const json& e = j["eval"];
    r.has_eval = true;
    r.kld_mean = Get(e, "kld_mean");
    r.ppl = Get(e, "ppl");
    r.ppl_base = Get(e, "ppl_base");
    r.top1_agreement = Get(e, "top1_agreement");
  }
  if (j.contains("tensors") && j["tensors"].is_array())
    for (const json& t : j["tensors"])
      if (t.is_object()) r.tensors.push_back({Str(t, "name"), Get(t, "output_mse"), Get(t, "weight_mse")});
  return r;
}

std::string Table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table><tr>";
  for (const std::string& h : header) s += "<th>" + Escape(h) + "</th>";
  s += "</tr>";
  for (const auto& row : rows) {
    s += "<tr>";
    for (const std::string& c : row) s += "<td>" + Escape(c) + "</td>";
    s += "</tr>";
  }
  return s + "</table>";
}

// "model.layers.12.mlp.down_proj" -> (12, "down_proj"); -1 when there is no layer index.
std::pair<int, std::string> LayerAndKind(std::string name) {
  if (name.ends_with(".weight")) name.resize(name.size() - 7);
  const size_t dot = name.rfind('.');
  const std::string kind = dot == std::string::npos ? name : name.substr(dot + 1);
  const size_t at = name.find("layers.");
  if (at == std::string::npos) return {-1, kind};
  int layer = 0, digits = 0;
  for (size_t i = at + 7; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i, ++digits)
    layer = layer * 10 + (name[i] - '0');
  return {digits ? layer : -1, kind};
}

std::string RecipeSection(const std::vector<RecipeRun>& recipes) {
  std::string s = "<h2>Quantization recipes</h2>";
  std::vector<std::vector<std::string>> rows;
  std::vector<report::ScatterPoint> kl, ppl;
  double ppl_base = NAN;
  for (const RecipeRun& r : recipes) {
    rows.push_back({r.name, r.method, r.format, r.scheme, Num(r.bits_per_weight, 5), r.has_eval ? Num(r.kld_mean) : "-",
                    r.has_eval ? Num(r.ppl, 6) : "-", r.has_eval ? Num(r.ppl_base, 6) : "-",
                    r.has_eval ? Pct(r.top1_agreement) : "-"});
    if (!r.has_eval) continue;
    const std::string label = r.method.empty() ? r.format : r.method + " " + r.format;
    const std::string tip = fmt::format("{}: {} bits/weight, KL {}, PPL {}", r.name, Num(r.bits_per_weight, 5),
                                        Num(r.kld_mean), Num(r.ppl, 6));
    kl.push_back({r.bits_per_weight, r.kld_mean, label, r.method, tip});
    ppl.push_back({r.bits_per_weight, r.ppl, label, r.method, tip});
    if (!std::isfinite(ppl_base) && std::isfinite(r.ppl_base)) ppl_base = r.ppl_base;
  }
  s += Table({"recipe", "method", "format", "scheme", "bits/weight", "KL mean", "PPL", "PPL base", "top-1"}, rows);
  if (kl.empty())
    return s +
           "<p class=\"note\">No recipe card has an eval block (quantize --eval), so there is no "
           "quality-vs-size chart.</p>";
  s += "<div class=\"row\">";
  s += report::ScatterSvg(kl, {"KL divergence vs bits/weight", "bits per weight (linears)", "mean KL divergence (nats)",
                               true, true, 0, ""});
  s += report::ScatterSvg(ppl, {"Perplexity vs bits/weight", "bits per weight (linears)", "perplexity", false, true,
                                std::isfinite(ppl_base) ? ppl_base : 0, "base " + Num(ppl_base, 6)});
  return s +
         "</div><p class=\"note\">Dashed: the Pareto frontier (no recipe is both smaller and better). Hover a point "
         "for its numbers.</p>";
}

// One heatmap per recipe over one colour scale; `output` picks output MSE (calibrated recipes) or
// weight MSE (recipes quantized without calibration data, whose output MSE is 0).
std::string HeatmapGroup(const std::vector<const RecipeRun*>& recipes, bool output) {
  static const std::vector<std::string> kKnown = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"};
  const std::string value_name = output ? "output MSE" : "weight MSE";
  std::vector<report::Heatmap> maps;
  double lo = INFINITY, hi = 0;
  for (const RecipeRun* r : recipes) {
    std::map<std::pair<int, std::string>, double> cells;
    std::vector<std::string> kinds;
    int layers = 0;
    for (const RecipeTensor& t : r->tensors) {
      const auto [layer, kind] = LayerAndKind(t.name);
      if (layer < 0) continue;
      const double v = output ? t.output_mse : t.weight_mse;
      cells[{layer, kind}] = v;
      layers = std::max(layers, layer + 1);
      if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
      if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (cells.empty()) continue;
    std::stable_sort(kinds.begin(), kinds.end(), [](const std::string& a, const std::string& b) {
      return std::find(kKnown.begin(), kKnown.end(), a) < std::find(kKnown.begin(), kKnown.end(), b);
    });
    report::Heatmap h;
    h.title = r->name + (r->format.empty() ? "" : " (" + r->format + ")");
    h.col_labels = kinds;
    for (int l = 0; l < layers; ++l) {
      h.row_labels.push_back(fmt::format("layer {}", l));
      std::vector<double>& row = h.values.emplace_back();
      for (const std::string& k : kinds) {
        const auto it = cells.find({l, k});
        row.push_back(it == cells.end() ? NAN : it->second);
      }
    }
    maps.push_back(std::move(h));
  }
  if (maps.empty()) return "";
  if (!(hi > 0)) lo = 1e-9, hi = 1e-8;
  if (hi <= lo) hi = lo * 10;
  std::string s = "<h2>Per-layer error (" + value_name + (output ? "" : ", recipes without calibration") +
                  ")</h2><div class=\"row\">";
  for (const report::Heatmap& h : maps) s += report::HeatmapSvg(h, lo, hi, value_name);
  return s +
         "</div><p class=\"note\">Rows: decoder layers; columns: linear kinds. One colour scale for the "
         "charts of this section; grey cells have no value.</p>";
}

std::string HeatmapSection(const std::vector<RecipeRun>& recipes) {
  std::vector<const RecipeRun*> with_output, weight_only;
  for (const RecipeRun& r : recipes) {
    auto any = [&](double RecipeTensor::*field) {
      return std::any_of(r.tensors.begin(), r.tensors.end(),
                         [&](const RecipeTensor& t) { return std::isfinite(t.*field) && t.*field > 0; });
    };
    if (any(&RecipeTensor::output_mse))
      with_output.push_back(&r);
    else if (any(&RecipeTensor::weight_mse))
      weight_only.push_back(&r);
  }
  return HeatmapGroup(with_output, true) + HeatmapGroup(weight_only, false);
}

std::string PlanSection(const NamedJson& plan, const char* kind) {
  const json& j = plan.json;
  const json& hw = j["hardware"];
  const double bw = Get(hw, "bandwidth_bytes_per_s");
  const std::map<std::string, double> peaks = {{"bf16", Get(hw, "bf16_tflops") * 1e12},
                                               {"fp8", Get(hw, "fp8_tflops") * 1e12},
                                               {"fp4", Get(hw, "fp4_tflops") * 1e12}};
  const double batch = std::isfinite(Get(j, "batch")) ? Get(j, "batch") : 1;
  const std::string model = j.contains("model") ? Str(j["model"], "name") : "";
  std::string s = fmt::format("<h2>{}: {} on {}</h2><p class=\"note\">{}; ctx {}, batch {}, KV cache {}</p>", kind,
                              Escape(model.empty() ? "model" : model), Escape(Str(hw, "name")), Escape(plan.name),
                              Num(Get(j, "ctx"), 10), Num(batch, 10), Escape(Str(j, "kv_cache_dtype")));
  std::vector<report::Roof> roofs;
  for (const char* path : {"bf16", "fp8", "fp4"})
    if (peaks.at(path) > 0) roofs.push_back({path, peaks.at(path)});
  std::vector<report::RooflinePoint> points;
  std::vector<report::StackedBar> bars;
  std::vector<std::vector<std::string>> rows;
  double usable = NAN, device = NAN;
  for (const json& f : j["formats"]) {
    const std::string name = Str(f, "format");
    const std::string path = Str(f, "compute_path").empty() ? "bf16" : Str(f, "compute_path");
    const double peak = peaks.contains(path) && peaks.at(path) > 0 ? peaks.at(path) : peaks.at("bf16");
    const double ai1 = Get(f, "arithmetic_intensity_batch1");
    if (std::isfinite(ai1) && bw > 0) points.push_back({name, ai1, std::min(peak, bw * ai1), batch > 1});
    // At the plan's batch: FLOPs from the compute time at this path's peak, bytes from the step.
    const double step_flops = Get(f, "compute_ms") / 1e3 * peak, step_bytes = Get(f, "step_bytes");
    const double ms = Get(f, "decode_ms_per_token_lower_bound");
    if (batch > 1 && step_bytes > 0 && ms > 0 && step_flops > 0)
      points.push_back(
          {fmt::format("{} @b{}", name, Num(batch, 10)), step_flops / step_bytes, step_flops / (ms / 1e3), false});
    bars.push_back({name,
                    {Get(f, "codes_bytes") / 1e9, Get(f, "scales_bytes") / 1e9, Get(f, "zeros_bytes") / 1e9,
                     Get(f, "unquantized_bytes") / 1e9, Get(f, "kv_bytes") / 1e9, Get(f, "activation_bytes") / 1e9}});
    usable = Get(f, "usable_bytes_per_device");
    device = Get(f, "device_memory_bytes");
    rows.push_back({name, Num(Get(f, "bits_per_weight"), 5), Gb(Get(f, "weight_bytes")), Gb(Get(f, "kv_bytes")),
                    Gb(Get(f, "total_bytes")), Num(Get(f, "devices_needed"), 6), Num(ms, 4),
                    Num(Get(f, "tokens_per_s"), 5), path});
  }
  s += Table({"format", "bits/weight", "weights GB", "KV GB", "total GB", "devices", "ms/token (bound)", "tok/s/seq",
              "matmul"},
             rows);
  s += "<div class=\"row\">";
  s += report::RooflineSvg(fmt::format("Roofline: {} ({} GB/s)", Str(hw, "name"), Num(bw / 1e9, 4)), bw, roofs, points);
  report::StackedBarOptions o;
  o.title = "Memory breakdown per format";
  o.unit = "GB";
  o.categories = {"codes", "scales", "zeros", "unquantized", "KV cache", "activations"};
  if (std::isfinite(usable)) o.limits.push_back({"usable per device", usable / 1e9});
  if (std::isfinite(device) && device != usable) o.limits.push_back({"device memory", device / 1e9});
  s += report::StackedBarsSvg(bars, o);
  return s +
         "</div><p class=\"note\">Roofline: hollow points are batch 1 (memory-bound decode), filled points the "
         "plan's batch. A format's point sits on the roof of its matmul path (bf16 for weight-only formats).</p>";
}

std::string OtherSections(const RunDir& run) {
  std::string s;
  if (!run.compares.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const NamedJson& c : run.compares)
      rows.push_back({c.name, Num(Get(c.json, "kld_mean")), Num(Get(c.json, "kld_median")), Num(Get(c.json, "kld_p99")),
                      Pct(Get(c.json, "top1_agreement")), Num(Get(c.json, "ppl_base"), 6), Num(Get(c.json, "ppl"), 6),
                      Num(Get(c.json, "tokens"), 10)});
    s += "<h2>compare</h2>" +
         Table({"file", "KL mean", "KL median", "KL p99", "top-1", "PPL base", "PPL", "tokens"}, rows);
  }
  if (!run.ppls.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const NamedJson& p : run.ppls)
      rows.push_back({p.name, Num(Get(p.json, "ppl"), 6), Num(Get(p.json, "ppl_stderr"), 4),
                      Num(Get(p.json, "tokens"), 10), Num(Get(p.json, "tokens_per_second"), 5)});
    s += "<h2>ppl</h2>" + Table({"file", "PPL", "+/-", "tokens", "tokens/s"}, rows);
  }
  for (const NamedJson& b : run.benches) {
    std::map<std::string, std::pair<double, double>> by_format;
    std::vector<std::string> order;
    for (const json& e : b.json) {
      const std::string f = Str(e, "format");
      if (!by_format.contains(f)) order.push_back(f), by_format[f] = {NAN, NAN};
      (Str(e, "op") == "quantize" ? by_format[f].first : by_format[f].second) = Get(e, "gbps");
    }
    std::vector<std::vector<std::string>> rows;
    for (const std::string& f : order) rows.push_back({f, Num(by_format[f].first), Num(by_format[f].second)});
    s += "<h2>bench codecs: " + Escape(b.name) + "</h2>" + Table({"format", "quantize GB/s", "dequantize GB/s"}, rows);
  }
  for (const NamedJson& a : run.advice) {
    std::vector<std::vector<std::string>> rows;
    if (a.json.contains("steps") && a.json["steps"].is_array())
      for (const json& st : a.json["steps"])
        rows.push_back({Str(st, "question"), Str(st, "answer"), Str(st, "reason")});
    s += fmt::format("<h2>advise: {}</h2><p>recipe <b>{}</b>, KV cache {}</p>", Escape(a.name),
                     Escape(Str(a.json, "recipe")), Escape(Str(a.json, "kv_cache_dtype")));
    s += Table({"question", "answer", "why"}, rows);
  }
  return s;
}

constexpr const char* kStyle = R"(<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px;background:#fff}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}
.row{display:flex;flex-wrap:wrap;gap:12px}.note{color:#666;font-size:12px}
svg.chart{border:1px solid #ddd;background:#fff}
.ct{font-size:14px;font-weight:600}.tick{font-size:10px;fill:#444}.label{font-size:12px;fill:#222}
.pl{font-size:10px;fill:#222}.grid{stroke:#eee}.frame{fill:none;stroke:#999}
.ref{stroke:#888;stroke-dasharray:4 3}.pareto{fill:none;stroke:#555;stroke-dasharray:6 4;stroke-width:1.5}
.roof{fill:none;stroke-width:2}.leader{stroke:#bbb}.pt{fill:#d62728}.pt.hollow{fill:#fff;stroke:#d62728;stroke-width:2}
</style>)";

}  // namespace

RunDir ScanRunDir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail("{}: not a folder (lowbit report RUN_DIR -o report.html)", dir.string());
  RunDir run;
  run.path = dir;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) Fail("{}: cannot list: {}", dir.string(), ec.message());
    if (it->is_regular_file() && it->path().extension() == ".json") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    const std::string name = fs::relative(file, dir).generic_string();
    if (fs::file_size(file) > kMaxJsonBytes) {
      run.skipped.push_back(name + " (too large)");
      continue;
    }
    const json j = ReadJsonFile(file);
    if (IsRecipeCard(j)) {
      const std::string folder = fs::relative(file.parent_path(), dir).generic_string();
      run.recipes.push_back(ReadRecipe(j, file.filename() == "recipe.json" && folder != "." ? folder : name));
    } else if (j.is_object() && j.contains("kld_mean") && j.contains("top1_agreement")) {
      run.compares.push_back({name, j});
    } else if (j.is_object() && j.contains("ppl") && j.contains("tokens_per_second")) {
      run.ppls.push_back({name, j});
    } else if (IsBench(j)) {
      run.benches.push_back({name, j});
    } else if (IsPlan(j)) {
      run.plans.push_back({name, j});
    } else if (j.is_object() && j.contains("steps") && j.contains("plan") && j["plan"].is_object() &&
               j.contains("hardware")) {
      run.advice.push_back({name, j});
      json as_plan = j;
      as_plan["formats"] = json::array({j["plan"]});
      as_plan["kv_cache_dtype"] = Str(j, "kv_cache_dtype");
      run.plans.push_back({name + " (advise)", as_plan});
    } else {
      run.skipped.push_back(name);
    }
  }
  if (run.recipes.empty() && run.compares.empty() && run.ppls.empty() && run.benches.empty() && run.plans.empty())
    Fail("{}: no recipe.json or compare/ppl/bench/plan JSON output found ({} JSON files, none recognised)",
         dir.string(), run.skipped.size());
  return run;
}

std::string RenderReportHtml(const RunDir& run) {
  std::string body = "<h1>lowbit report: " + Escape(run.path.string()) + "</h1>";
  body += fmt::format("<p class=\"note\">{} recipe cards, {} compare, {} ppl, {} bench, {} plan outputs.</p>",
                      run.recipes.size(), run.compares.size(), run.ppls.size(), run.benches.size(), run.plans.size());
  if (!run.recipes.empty()) body += RecipeSection(run.recipes) + HeatmapSection(run.recipes);
  for (const NamedJson& p : run.plans) body += PlanSection(p, p.name.ends_with("(advise)") ? "advise plan" : "plan");
  body += OtherSections(run);
  if (!run.skipped.empty()) {
    body += "<details><summary class=\"note\">" + std::to_string(run.skipped.size()) +
            " other JSON files (not a lowbit output)</summary><ul>";
    for (const std::string& s : run.skipped) body += "<li>" + Escape(s) + "</li>";
    body += "</ul></details>";
  }
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lowbit report</title>" +
         std::string(kStyle) + "</head><body>" + body + "</body></html>\n";
}

void WriteReport(const fs::path& run_dir, const fs::path& out) {
  WriteFileAtomic(out, RenderReportHtml(ScanRunDir(run_dir)));
}

}  // namespace lowbit
