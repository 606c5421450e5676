// `lowbit bench memory|gemv|decode|prefill|attention`: the runtime's speed against the machine's
// own limit (STREAM-like bandwidth measured in the same run).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/cpu.h"
#include "pipeline/bench_jobs.h"
#include "pipeline/session.h"
#include "pipeline/speed_job.h"
#include "quant/scheme.h"

namespace lowbit::cli {
namespace {

// The footers say when LOWBIT_CPU keeps the kernels below what this CPU has.
std::string CpuCapNote() {
  const CpuLevel cap = CpuLevelCap();
  return cap < CpuLevel::kAvx512 ? fmt::format(", kernels capped at {} (LOWBIT_CPU)", CpuLevelName(cap)) : "";
}

constexpr uint64_t kMiB = 1 << 20;

struct RuntimeOptions {
  size_t threads = 0;
  bool json = false;
  // memory
  size_t memory_mib = 1536;
  // gemv
  std::string format = "int4:g128";
  int group = 0;
  uint64_t rows = 4096, cols = 4096, working_set_mib = 512;
  double seconds = 1.0;
  // decode / prefill / attention
  std::string model, kv_dtype = "fp32";
  std::vector<std::string> formats{"loaded"};
  std::vector<size_t> batches{1};
  size_t ctx = 512, steps = 8, tokens = 1, rounds = 1, kv_heads = 8;
  size_t gemv_rounds = 3;  // its own field: options bound to one variable share the last default set
};

void RunMemory(const RuntimeOptions& o) {
  const nlohmann::json m = RunMemoryBench({o.memory_mib, o.threads});
  if (o.json) {
    std::puts(m.dump(2).c_str());
    return;
  }
  PrintTable({"kernel", "GB/s"}, {{"copy", fmt::format("{:.1f}", m["copy_gbps"].get<double>())},
                                  {"triad", fmt::format("{:.1f}", m["triad_gbps"].get<double>())}});
  std::printf("\n%zu threads, %.2f GiB of arrays, best of 5 passes (STREAM byte counting).\n",
              m["threads"].get<size_t>(), m["bytes"].get<double>() / (1 << 30));
}

void RunGemv(const RuntimeOptions& o) {
  const nlohmann::json s = RunGemvBench({.format = o.group ? fmt::format("{}:g{}", o.format, o.group) : o.format,
                                         .rows = o.rows, .cols = o.cols, .working_set_mib = o.working_set_mib,
                                         .tokens = o.tokens, .seconds = o.seconds, .rounds = o.gemv_rounds,
                                         .bandwidth_mib = o.memory_mib, .threads = o.threads});
  if (o.json) {
    std::puts(s.dump(2).c_str());
    return;
  }
  PrintTable({"format", "bits/weight", "matrices", "weight GB/s", "triad GB/s", "of triad"},
             {{s["format"].get<std::string>(), fmt::format("{:.3f}", s["bits_per_weight"].get<double>()),
               std::to_string(s["matrices"].get<size_t>()), fmt::format("{:.1f}", s["gbps"].get<double>()),
               fmt::format("{:.1f}", s["triad_gbps"].get<double>()),
               fmt::format("{:.0f}%", 100 * s["fraction_of_bandwidth"].get<double>())}});
  std::printf("\n%zu token(s), %llu x %llu, %.0f MiB of distinct weights, %zu threads; fastest pass of %zu rounds, "
              "each after its own triad%s.\n",
              o.tokens, static_cast<unsigned long long>(o.rows), static_cast<unsigned long long>(o.cols),
              s["working_set_bytes"].get<double>() / kMiB, s["threads"].get<size_t>(), o.gemv_rounds,
              CpuCapNote().c_str());
}

// Each format in turn on one loaded model, so the ratios come from one run (pipeline/speed_job.h).
void RunSpeeds(const RuntimeOptions& o, bool decode) {
  const std::vector<FormatSpeeds> results = RunSpeedJob(
      {o.model, decode, o.formats, o.batches, o.ctx, o.steps, o.rounds, o.threads, o.kv_dtype});
  if (o.json) {
    std::puts(SpeedsJson(results).dump(2).c_str());
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const FormatSpeeds& r : results)
    for (size_t i = 0; i < r.speeds.size(); ++i) {
      const BatchSpeed& s = r.speeds[i];
      rows.push_back({r.format, fmt::format("{}", r.weight_bytes / kMiB), std::to_string(s.batch),
                      fmt::format("{:.1f}", s.tokens_per_second), fmt::format("{:.2f}", s.ms_per_token),
                      fmt::format("{:.1f}", s.weight_gbps),
                      fmt::format("{:.2f}x", s.tokens_per_second / results.front().speeds[i].tokens_per_second)});
    }
  PrintTable({"format", "MiB", "batch", "tokens/s", decode ? "ms/step" : "ms/token", "weight GB/s",
              "vs " + results.front().format},
             rows);
  // Memory-bound while a step costs about the same at every batch; the crossover is the first
  // batch whose step takes 1.5x the batch-1 step.
  if (decode && o.batches.size() > 1)
    for (const FormatSpeeds& r : results) {
      std::string crossover = "beyond the largest batch measured";
      for (const BatchSpeed& s : r.speeds)
        if (s.ms_per_token > 1.5 * r.speeds.front().ms_per_token) {
          crossover = fmt::format("at batch {}", s.batch);
          break;
        }
      std::printf("\n%s: memory-bound to compute-bound crossover %s.", r.format.c_str(), crossover.c_str());
    }
  std::printf("\n%s: %s, ctx %zu, KV cache %s, fast kernels (kernels/matmul.h)%s%s.\n", decode ? "Decode" : "Prefill",
              o.model.c_str(), o.ctx, o.kv_dtype.c_str(),
              o.rounds > 1 ? fmt::format(", best of {} rounds", o.rounds).c_str() : "", CpuCapNote().c_str());
}

// One decode step's attention against the two-pass reference and the bandwidth bound (pipeline/bench_jobs.h).
void RunAttention(const RuntimeOptions& o) {
  const nlohmann::json r = RunAttentionBench({.ctx = o.ctx, .kv_cache_dtype = o.kv_dtype, .kv_heads = o.kv_heads,
                                              .seconds = o.seconds, .bandwidth_mib = o.memory_mib,
                                              .threads = o.threads});
  if (o.json) {
    std::puts(r.dump(2).c_str());
    return;
  }
  const double kv_bytes = r["kv_bytes"].get<double>(), bound_us = r["bandwidth_bound_us"].get<double>();
  const auto row = [&](const std::string& name, double us, size_t scores) {
    return std::vector<std::string>{name, fmt::format("{:.1f}", us), fmt::format("{:.1f}", kv_bytes / us / 1e3),
                                    fmt::format("{:.2f}", us / bound_us), std::to_string(scores)};
  };
  const size_t block = r["block_tokens"].get<size_t>();
  std::vector<std::vector<std::string>> rows = {row("blocked online softmax", r["blocked_us"].get<double>(), block)};
  if (r.contains("blocked_fp32_dots_us"))
    rows.push_back(row("blocked, fp32 dots (evaluation)", r["blocked_fp32_dots_us"].get<double>(), block));
  rows.push_back(row("two-pass", r["two_pass_us"].get<double>(), o.ctx));
  PrintTable({"kernel", "us per decode step", "KV GB/s", "x bandwidth bound", "scores held per query head"}, rows);
  std::printf("\nOne layer, 32 query heads over %zu KV heads of 128, ctx %zu, KV cache %s (%.1f MB), %zu threads;\n"
              "blocked splits each KV head's positions into %zu segment(s). Bound: the KV bytes at the triad's %.1f GB/s%s.\n",
              o.kv_heads, o.ctx, o.kv_dtype.c_str(), kv_bytes / 1e6, r["threads"].get<size_t>(),
              r["segments"].get<size_t>(), r["triad_gbps"].get<double>(), CpuCapNote().c_str());
}

}  // namespace

void AddBenchRuntimeCommands(CLI::App& bench) {
  auto o = std::make_shared<RuntimeOptions>();
  auto common = [o](CLI::App* cmd) {
    cmd->add_option("--threads", o->threads, "Threads (default: all cores)");
    cmd->add_flag("--json", o->json, "Print JSON");
  };
  auto* memory = bench.add_subcommand("memory", "Memory bandwidth (STREAM-like copy and triad)");
  memory->add_option("--size-mib", o->memory_mib, "Total size of the arrays")->default_val(1536)->check(Positive());
  common(memory);
  memory->callback([o] { RunMemory(*o); });

  auto* gemv = bench.add_subcommand("gemv", "Batch-1 matrix-vector speed per weight format, vs memory bandwidth");
  gemv->add_option("--format", o->format, "Weight format: a scheme, fp32, or a GGUF block type (Q4_K, Q6_K, ...)")->default_val("int4:g128");
  gemv->add_option("--group", o->group, "Group size (overrides the format's)")->check(Positive());
  gemv->add_option("--rows", o->rows, "Rows (outputs)")->default_val(4096)->check(Positive());
  gemv->add_option("--cols", o->cols, "Columns (inputs)")->default_val(4096)->check(Positive());
  gemv->add_option("--working-set-mib", o->working_set_mib, "Distinct weight bytes cycled through")->default_val(512)->check(Positive());
  gemv->add_option("--seconds", o->seconds, "Minimum measuring time")->default_val(1.0)->check(Positive());
  gemv->add_option("--tokens", o->tokens, "Activation rows (1 = matrix-vector)")->default_val(1)->check(Positive());
  gemv->add_option("--size-mib", o->memory_mib, "Bandwidth test size")->default_val(1536)->check(Positive());
  gemv->add_option("--rounds", o->gemv_rounds, "Rounds of (triad, GEMV), best of each")->default_val(3)->check(Positive());
  common(gemv);
  gemv->callback([o] { RunGemv(*o); });

  for (const bool decode : {true, false}) {
    auto* cmd = bench.add_subcommand(decode ? "decode" : "prefill",
                                     decode ? "Decode tokens/s per batch size" : "Prefill tokens/s per batch size");
    cmd->add_option("--model", o->model, "Model (folder, .gguf, .bin)")->required();
    cmd->add_option("--quantize", o->formats,
                    "Formats to run, e.g. fp32,bf16,int8,int4:g128 (RTN of every linear, lm_head too, in memory; "
                    "'loaded' = as loaded)")
        ->delimiter(',')
        ->check(ParsedBy([](const std::string& text) {
          if (text != "loaded") (void)ParseScheme(text);
        }));
    cmd->add_option("--batch", o->batches, "Batch sizes, e.g. 1,4,16,64")->delimiter(',')->check(Positive());
    cmd->add_option("--ctx", o->ctx, decode ? "Cached positions before the timed steps" : "Prompt length")
        ->default_val(decode ? 512 : 256)
        ->check(decode ? NonNegative() : Positive());
    if (decode) cmd->add_option("--steps", o->steps, "Timed decode steps")->default_val(8)->check(Positive());
    cmd->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache dtype: " + KnownKvDtypes())
        ->default_val("fp32")
        ->check(KvDtypeName());
    cmd->add_option("--rounds", o->rounds,
                    "Measure the formats round-robin this many times, best of each (holds every format's model)")
        ->default_val(1)
        ->check(Positive());
    common(cmd);
    cmd->callback([o, decode] { RunSpeeds(*o, decode); });
  }

  auto* attention = bench.add_subcommand("attention", "Blocked online-softmax attention vs the two-pass version");
  attention->add_option("--ctx", o->ctx, "Cached positions")->default_val(4096)->check(Positive());
  attention->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache dtype: " + KnownKvDtypes())
      ->default_val("fp32")
      ->check(KvDtypeName());
  attention->add_option("--kv-heads", o->kv_heads, "KV heads (of 32 query heads)")->default_val(8)->check(Positive());
  attention->add_option("--seconds", o->seconds, "Minimum measuring time")->default_val(1.0)->check(Positive());
  attention->add_option("--size-mib", o->memory_mib, "Bandwidth test size")->default_val(1536)->check(Positive());
  common(attention);
  attention->callback([o] { RunAttention(*o); });
}

}  // namespace lowbit::cli
