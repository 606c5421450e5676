// `lowbit synth --preset P [--layers N] -o DIR`: a checkpoint with a real model's shapes and
// deterministic random weights, for speed and memory measurements.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/error.h"
#include "plan/synth.h"

namespace lowbit::cli {

void AddSynthCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a random-weight checkpoint with a preset's real shapes");
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("BF16");
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--preset", o->preset, "llama2-7b, llama3-8b, qwen2.5-7b, ... (see `lowbit plan --help`)")
      ->required()
      ->check(PresetName());
  cmd->add_option("--layers", o->layers, "Decoder layers (default: the preset's)")->check(Positive());
  cmd->add_option("--dtype", *dtype, "F32, BF16 or F16")->default_val("BF16");
  cmd->add_option("--seed", o->seed, "Random seed")->default_val(0);
  cmd->add_option("--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-o,--out", *out, "Output folder")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([o, out, dtype, json] {
    const auto parsed = ParseDType(*dtype);
    if (!parsed) Fail("synth: unknown --dtype '{}' (F32, BF16, F16)", *dtype);
    o->dtype = *parsed;
    const SynthResult r = WriteSynthModel(*o, *out);
    if (*json) {
      std::puts(SynthJson(r, *out).dump(2).c_str());
      return;
    }
    PrintTable({"preset", "layers", "parameters", "dtype", "size"},
               {{r.arch.name, std::to_string(r.arch.n_layers), fmt::format("{:.3f} B", r.parameters / 1e9), *dtype,
                 fmt::format("{:.2f} GiB", static_cast<double>(r.bytes) / (1 << 30))}});
    std::printf("\nWrote %s/config.json and model.safetensors (seed %llu).\n", out->c_str(),
                static_cast<unsigned long long>(o->seed));
  });
}

}  // namespace lowbit::cli
