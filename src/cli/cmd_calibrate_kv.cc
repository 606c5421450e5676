// `lowbit calibrate-kv --model M --calib FILE`: static FP8 KV-cache scales, written beside the
// model (kv_cache_scales.json), where ppl, compare and bench pick them up.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/session.h"
#include "core/file_util.h"
#include "model/calibration.h"
#include "model/kv_calibration.h"

namespace lowbit::cli {

void AddCalibrateKvCommand(CLI::App& app) {
  struct Options {
    std::string model, calib, out, dtype = "fp8_e4m3";
    size_t samples = 32, length = 256, threads = 0;
    uint64_t seed = 0;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("calibrate-kv", "Static FP8 KV-cache scales from calibration text");
  cmd->add_option("--model", o->model, "Model folder or file")->required();
  cmd->add_option("--calib", o->calib, "Calibration text")->required();
  cmd->add_option("--dtype", o->dtype, "fp8_e4m3 or fp8_e5m2")->default_val("fp8_e4m3");
  cmd->add_option("--samples", o->samples, "Windows")->default_val(32)->check(Positive());
  cmd->add_option("--len", o->length, "Tokens per window")->default_val(256)->check(Positive());
  cmd->add_option("--seed", o->seed, "Window sampling seed")->default_val(0);
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("-o,--out", o->out, "Output (default: MODEL/kv_cache_scales.json)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    const LoadedModel m = LoadModelWithTokenizer(o->model, "");
    const auto windows =
        CalibrationWindows(*m.tokenizer, ReadTextFile(o->calib), o->calib, o->samples, o->length, o->seed);
    const KvScales s = CalibrateKvScales(m.model, windows, ParseKvDtype(o->dtype), o->threads);
    const std::filesystem::path out = o->out.empty() ? KvScalesPathFor(o->model) : std::filesystem::path(o->out);
    WriteKvScales(s, out);
    if (o->json) {
      std::puts(nlohmann::json({{"out", out.string()}, {"dtype", o->dtype}, {"k_scales", s.k}, {"v_scales", s.v}})
                    .dump(2)
                    .c_str());
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (size_t l = 0; l < s.k.size(); ++l)
      rows.push_back({std::to_string(l), FormatNumber(s.k[l]), FormatNumber(s.v[l])});
    PrintTable({"layer", "K scale", "V scale"}, rows);
    std::printf("\nWrote %s (%zu windows of %zu tokens from %s).\n", out.string().c_str(), windows.size(),
                o->length, o->calib.c_str());
  });
}

}  // namespace lowbit::cli
