// lowbit report: a RUN_DIR fixture (three recipe cards, a plan, compare/ppl/bench outputs and a
// foreign JSON file) becomes one self-contained page with every chart, no network references and no
// NaN; errors name the path; and, where Debian's chromium is installed, the page renders headless
// with no console errors into a screenshot that is not blank.
#include "plan/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/file_util.h"
#include "plan/hardware.h"
#include "plan/plan.h"
#include "plan/presets.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kChromium = "/usr/bin/chromium";

class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : dir_(fs::temp_directory_path() / ("lowbit_report_" + std::to_string(getpid())) / name) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::remove(dir_.parent_path(), ec);  // the per-process folder, once its last scratch is gone
  }
  const fs::path& dir() const { return dir_; }
  void Write(const std::string& rel, const std::string& text) const {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text;
  }

 private:
  fs::path dir_;
};

// A recipe card as `lowbit quantize --eval` writes it; errors grow with the layer and shrink with bits.
json RecipeCard(const std::string& method, const std::string& format, double bits, double kl, double ppl) {
  json tensors = json::array();
  const char* kinds[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  for (int layer = 0; layer < 4; ++layer)
    for (int k = 0; k < 7; ++k) {
      const double e = kl * (1 + layer) * (1 + 0.5 * k);
      tensors.push_back({{"name", "model.layers." + std::to_string(layer) + "." + kinds[k]},
                         {"scheme", format},
                         {"seconds", 0.01},
                         {"weight_mse", e / 10},
                         {"output_mse", e}});
    }
  return {{"lowbit_version", "0.1.0"},
          {"recipe",
           {{"method", method},
            {"format", format},
            {"config", json::object()},
            {"calibration", {{"file", "data/kjv-train.txt"}, {"samples", 128}, {"length", 256}, {"seed", 0}}}}},
          {"scheme", format + ":scale=f16"},
          {"tensors", tensors},
          {"bits_per_weight", bits},
          {"eval",
           {{"file", "data/kjv-test.txt"},
            {"ctx", 256},
            {"ppl_base", 76.18},
            {"ppl", ppl},
            {"kld_mean", kl},
            {"kld_median", kl / 2},
            {"kld_p99", kl * 8},
            {"top1_agreement", 1 - kl * 20},
            {"tokens", 15494}}}};
}

// `lowbit plan --json` for llama-2-7b on H100-SXM at batch 8, built as cmd_plan.cc builds it.
json PlanJson() {
  const ModelSpec spec = SpecFromArch(FindPreset("llama-2-7b"));
  const Hardware hw = FindHardware("H100-SXM");
  PlanOptions o;
  o.batch = 8;
  json formats = json::array();
  std::string kv;
  for (const char* f : {"fp16", "fp8_e4m3", "int8", "int4:g128"}) {
    const FormatPlan p = PlanFormat(spec, hw, f, o);
    kv = p.kv_scheme;
    formats.push_back(PlanToJson(p));
  }
  return {{"model", ModelToJson(spec)}, {"hardware", HardwareToJson(hw)}, {"ctx", o.ctx},
          {"batch", o.batch},           {"kv_cache_dtype", kv},           {"memory_utilization", o.memory_utilization},
          {"formats", formats}};
}

void WriteRunDir(const Scratch& s) {
  s.Write("rtn-int4/recipe.json", RecipeCard("rtn", "int4:g128", 4.125, 9.4e-4, 76.17).dump(2));
  s.Write("gptq-int4/recipe.json", RecipeCard("gptq", "int4:g128", 4.125, 1.2e-4, 76.20).dump(2));
  s.Write("rtn-int8/recipe.json", RecipeCard("rtn", "int8", 8.05, 2.0e-5, 76.18).dump(2));
  s.Write("rtn-int8/config.json", R"({"model_type": "llama", "hidden_size": 256})");  // not a lowbit output
  s.Write("plan.json", PlanJson().dump(2));
  s.Write("evals/compare.json", R"({"kld_mean": 0.000936, "kld_median": 0.0006313, "kld_p99": 0.005137,
    "top1_agreement": 0.9743, "dp_rms": 0.0049, "ppl_base": 76.18, "ppl_base_stderr": 1.64, "ppl": 76.17,
    "ppl_stderr": 1.64, "tokens": 15494})");
  s.Write("evals/ppl.json", R"({"ppl": 76.18, "ppl_stderr": 1.64, "tokens": 15494, "tokens_per_second": 5668.6,
    "ctx": 256, "chunks": 122})");
  s.Write("bench.json", R"([{"format": "int4:g128", "scheme": "int4:g128:scale=f16", "op": "quantize", "gbps": 1.9},
    {"format": "int4:g128", "scheme": "int4:g128:scale=f16", "op": "dequantize", "gbps": 6.1}])");
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Report, ScanRecognisesEveryOutputByItsKeys) {
  Scratch s("scan");
  WriteRunDir(s);
  const RunDir run = ScanRunDir(s.dir());
  ASSERT_EQ(run.recipes.size(), 3u);
  EXPECT_EQ(run.recipes[0].name, "gptq-int4");  // path order
  EXPECT_EQ(run.recipes[0].method, "gptq");
  EXPECT_TRUE(run.recipes[0].has_eval);
  EXPECT_DOUBLE_EQ(run.recipes[0].kld_mean, 1.2e-4);
  EXPECT_EQ(run.recipes[0].tensors.size(), 28u);
  EXPECT_EQ(run.plans.size(), 1u);
  EXPECT_EQ(run.compares.size(), 1u);
  EXPECT_EQ(run.ppls.size(), 1u);
  EXPECT_EQ(run.benches.size(), 1u);
  EXPECT_EQ(run.skipped, std::vector<std::string>{"rtn-int8/config.json"});
}

TEST(Report, PageHasEveryChartAndNothingExternal) {
  Scratch s("page");
  WriteRunDir(s);
  const fs::path out = s.dir() / "out" / "report.html";
  fs::create_directories(out.parent_path());
  WriteReport(s.dir(), out);
  EXPECT_EQ(std::distance(fs::directory_iterator(out.parent_path()), fs::directory_iterator()), 1);  // no temp file
  const std::string html = ReadTextFile(out);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("</html>"), std::string::npos);
  for (const char* title : {"KL divergence vs bits/weight", "Perplexity vs bits/weight", "Per-layer error",
                            "Roofline: H100-SXM", "Memory breakdown per format"})
    EXPECT_NE(html.find(title), std::string::npos) << title;
  EXPECT_EQ(Count(html, "<svg"), 2u + 3 + 2);  // Pareto x2, a heatmap per recipe, roofline + memory
  EXPECT_EQ(Count(html, "<svg"), Count(html, "</svg>"));
  EXPECT_EQ(Count(html, "<table"), Count(html, "</table>"));
  EXPECT_EQ(Count(html, "<text"), Count(html, "</text>"));
  EXPECT_NE(html.find("class=\"pareto\""), std::string::npos);
  for (const char* name : {"rtn-int4", "gptq-int4", "rtn-int8", "fp8_e4m3", "int4:g128", "97.43 %", "5668.6"})
    EXPECT_NE(html.find(name), std::string::npos) << name;
  // Self-contained and finite: no URLs, scripts or external resources, no NaN / inf anywhere.
  for (const char* bad : {"http://", "https://", "<script", "src=", "href=", "@import", "url("})
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((^|[^A-Za-z])(nan|NaN|inf|Infinity)([^A-Za-z]|$))")));
}

TEST(Report, RecipesWithoutEvalAndErrorsNameThePath) {
  Scratch s("errors");
  EXPECT_NE(ErrorOf([&] { ScanRunDir(s.dir() / "missing"); }).find("missing: not a folder"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ScanRunDir(s.dir()); }).find("no recipe.json"), std::string::npos);
  s.Write("broken.json", "{\"ppl\": ");
  const std::string e = ErrorOf([&] { ScanRunDir(s.dir()); });
  EXPECT_NE(e.find("broken.json: not valid JSON"), std::string::npos) << e;
  fs::remove(s.dir() / "broken.json");
  json card = RecipeCard("rtn", "int4:g128", 4.125, 1e-3, 77);
  card.erase("eval");
  for (json& t : card["tensors"]) t["output_mse"] = 0.0;  // RTN without calibration: weight MSE only
  s.Write("a/recipe.json", card.dump());
  const std::string html = RenderReportHtml(ScanRunDir(s.dir()));
  EXPECT_NE(html.find("has an eval block"), std::string::npos);
  EXPECT_NE(html.find("Per-layer error (weight MSE, recipes without calibration)"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((^|[^A-Za-z])(nan|NaN|inf)([^A-Za-z]|$))")));
}

// ---- Headless Chromium ---------------------------------------------------------------------------

struct Png {
  uint32_t width = 0, height = 0;
  uint64_t idat_bytes = 0;  // compressed pixel data: a blank page compresses to almost nothing
};

Png ReadPng(const fs::path& path) {
  const std::string b = ReadTextFile(path);
  Png png;
  if (b.size() < 8 || b.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return png;
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
           (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
  };
  for (size_t at = 8; at + 12 <= b.size();) {
    const uint32_t len = be32(at);
    const std::string type = b.substr(at + 4, 4);
    if (type == "IHDR") png.width = be32(at + 8), png.height = be32(at + 12);
    if (type == "IDAT") png.idat_bytes += len;
    at += 12 + uint64_t{len};
  }
  return png;
}

struct Render {
  int status = -1;
  std::string log;  // chromium's stderr
  Png png;
};

Render Screenshot(const fs::path& html, const fs::path& work) {
  const fs::path png = work / (html.stem().string() + ".png"), profile = work / ("profile-" + html.stem().string());
  fs::create_directories(profile);
  const std::string cmd = fmt::format(
      "timeout 120 {} --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --user-data-dir={} "
      "--enable-logging=stderr --v=0 --screenshot={} --window-size=1200,2000 file://{} 2>&1",
      kChromium, profile.string(), png.string(), fs::absolute(html).string());
  Render r;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.log.append(buf.data(), n);
  r.status = WEXITSTATUS(pclose(pipe));
  if (fs::exists(png)) r.png = ReadPng(png);
  return r;
}

// Console messages (page errors are logged as CONSOLE lines) and failed loads.
std::vector<std::string> ConsoleProblems(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("Uncaught") != std::string::npos || line.find("ERROR:CONSOLE") != std::string::npos ||
        line.find(":CONSOLE") != std::string::npos || line.find("net::ERR") != std::string::npos)
      out.push_back(line);
  return out;
}

TEST(ReportChromium, RendersWithoutConsoleErrorsAndIsNotBlank) {
  if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is not installed (Debian package chromium)";
  Scratch s("chromium");
  WriteRunDir(s);
  const fs::path work = s.dir() / "render";
  fs::create_directories(work);
  WriteReport(s.dir(), work / "report.html");
  WriteFileAtomic(work / "blank.html", "<!DOCTYPE html><html><body></body></html>");
  // The check itself must see a console error when there is one.
  WriteFileAtomic(work / "broken.html", "<!DOCTYPE html><html><body><script>notDefined()</script></body></html>");

  const Render blank = Screenshot(work / "blank.html", work);
  ASSERT_EQ(blank.status, 0) << blank.log;
  const Render broken = Screenshot(work / "broken.html", work);
  EXPECT_FALSE(ConsoleProblems(broken.log).empty()) << "chromium logged no console error for a broken page:\n"
                                                    << broken.log;
  const Render report = Screenshot(work / "report.html", work);
  ASSERT_EQ(report.status, 0) << report.log;
  EXPECT_TRUE(ConsoleProblems(report.log).empty()) << fmt::format("{}", fmt::join(ConsoleProblems(report.log), "\n"));
  EXPECT_EQ(report.png.width, 1200u);
  EXPECT_EQ(report.png.height, 2000u);
  EXPECT_GT(report.png.idat_bytes, 20'000u);
  EXPECT_GT(report.png.idat_bytes, 5 * blank.png.idat_bytes) << "blank page: " << blank.png.idat_bytes << " bytes";
}

#ifdef LOWBIT_BINARY
TEST(ReportCli, PlanAndBenchJsonFromTheBinary) {
  Scratch s("cli");
  WriteRunDir(s);
  fs::remove(s.dir() / "plan.json");
  fs::remove(s.dir() / "bench.json");
  const std::string bin = std::string("cd " LOWBIT_SOURCE_DIR " && " LOWBIT_BINARY " ");
  ASSERT_EQ(
      std::system((bin + "plan --preset llama-3-8b --hw B200 --json > " + (s.dir() / "plan.json").string()).c_str()),
      0);
  ASSERT_EQ(std::system(
                (bin + "bench codecs --format int8,nvfp4 --seconds 0.01 --json > " + (s.dir() / "bench.json").string())
                    .c_str()),
            0);
  const fs::path out = s.dir() / "report.html";
  ASSERT_EQ(std::system((bin + "report " + s.dir().string() + " -o " + out.string() + " > /dev/null").c_str()), 0);
  const std::string html = ReadTextFile(out);
  EXPECT_NE(html.find("Roofline: B200"), std::string::npos);
  EXPECT_NE(html.find("fp4 "), std::string::npos);  // B200's FP4 roof
  EXPECT_NE(html.find("bench codecs: bench.json"), std::string::npos);
  EXPECT_NE(std::system((bin + "report /nonexistent -o " + out.string() + " 2> /dev/null").c_str()), 0);
}
#endif

}  // namespace
}  // namespace lowbit
