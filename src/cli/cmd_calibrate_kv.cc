// `lowbit calibrate-kv --model M --calib FILE`: the flags of a KvScalesJob (pipeline/kv_scales_job.h)
// and its scales as a table or JSON.
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/kv_scales_job.h"

namespace lowbit::cli {

void AddCalibrateKvCommand(CLI::App& app) {
  struct Options {
    KvScalesJob job;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  KvScalesJob& j = o->job;
  auto* cmd = app.add_subcommand("calibrate-kv", "Static FP8 KV-cache scales from calibration text");
  cmd->add_option("--model", j.model, "Model folder or file")->required();
  cmd->add_option("--calib", j.calib, "Calibration text")->required();
  cmd->add_option("--dtype", j.dtype, "fp8_e4m3 or fp8_e5m2")->default_val("fp8_e4m3");
  cmd->add_option("--samples", j.samples, "Windows")->default_val(32)->check(Positive());
  cmd->add_option("--len", j.length, "Tokens per window")->default_val(256)->check(Positive());
  cmd->add_option("--seed", j.seed, "Window sampling seed")->default_val(0);
  cmd->add_option("--threads", j.threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("-o,--out", j.out, "Output (default: MODEL/kv_cache_scales.json)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    const nlohmann::json r = RunKvScalesJob(o->job);
    if (o->json) {
      std::puts(r.dump(2).c_str());
      return;
    }
    const auto k = r["k_scales"].get<std::vector<float>>(), v = r["v_scales"].get<std::vector<float>>();
    std::vector<std::vector<std::string>> rows;
    for (size_t l = 0; l < k.size(); ++l) rows.push_back({std::to_string(l), FormatNumber(k[l]), FormatNumber(v[l])});
    PrintTable({"layer", "K scale", "V scale"}, rows);
    std::printf("\nWrote %s (%zu windows of %zu tokens from %s).\n", r["out"].get<std::string>().c_str(),
                r["windows"].get<size_t>(), o->job.length, o->job.calib.c_str());
  });
}

}  // namespace lowbit::cli
