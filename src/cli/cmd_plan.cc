// `lowbit plan` and `lowbit advise`: memory and roofline arithmetic for a model on a hardware
// target, and the format decision tree on top of it. The arithmetic lives in src/plan/; this file
// reads flags, resolves the model, and prints tables or JSON.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/error.h"
#include "plan/advise.h"
#include "plan/arch.h"
#include "plan/hardware.h"
#include "plan/plan.h"
#include "plan/presets.h"

namespace lowbit::cli {
namespace {

struct PlanFlags {
  std::string params, active_params, model, preset;
  std::vector<std::string> formats = {"fp16", "fp8_e4m3", "int8", "int4:g128"};
  std::string kv_cache_dtype = "fp16";
  uint64_t ctx = 4096, batch = 1, prefill_chunk = 2048;
  std::string hw = "H100-SXM";
  double cpu_bandwidth = kDefaultCpuBandwidthGBs;
  double memory_utilization = 0.9;
  bool quantize_embeddings = false;
  bool json = false;
  bool list = false;
  // advise only
  uint32_t devices = 1;
  std::string checkpoint;
};

ModelSpec ResolveModel(const PlanFlags& f) {
  const int given = !f.params.empty() + !f.model.empty() + !f.preset.empty();
  if (given != 1) Fail("give exactly one of --params, --model or --preset (presets: {})", KnownPresetNames());
  if (!f.active_params.empty() && f.params.empty()) Fail("--active-params goes with --params");
  if (!f.params.empty()) {
    const uint64_t total = ParseParamCount(f.params);
    const uint64_t active = f.active_params.empty() ? total : ParseParamCount(f.active_params);
    return SpecFromParams(total, active, f.params);
  }
  ModelSpec spec = SpecFromArch(f.preset.empty() ? ArchFromPath(f.model) : FindPreset(f.preset));
  spec.source = f.preset.empty() ? "model" : "preset";
  return spec;
}

PlanOptions OptionsOf(const PlanFlags& f) {
  PlanOptions o;
  o.ctx = f.ctx;
  o.batch = f.batch;
  o.kv_cache_dtype = f.kv_cache_dtype;
  o.quantize_embeddings = f.quantize_embeddings;
  o.prefill_chunk = f.prefill_chunk;
  o.memory_utilization = f.memory_utilization;
  return o;
}

// GB with two decimals (the figures: 1.34, 10.74, 42.95), three significant digits below 1 GB.
std::string Gb(uint64_t bytes) {
  const double gb = bytes / 1e9;
  return gb >= 1 || bytes == 0 ? fmt::format("{:.2f}", gb) : fmt::format("{:.3g}", gb);
}

std::string Count(uint64_t n) { return n >= 1e9 ? fmt::format("{:.2f} B", n / 1e9) : fmt::format("{:.2f} M", n / 1e6); }

std::string Thousands(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Three significant digits without exponents: 41.8, 4.64, 0.139, 1234.
std::string Ms(double v) { return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}", v); }

std::string Batch(const std::optional<uint64_t>& b) { return b ? std::to_string(*b) : "never"; }

std::string Describe(const ModelSpec& spec, const Hardware& hw) {
  std::string params = Count(spec.TotalParams()) + " params";
  if (spec.ActiveParams() != spec.TotalParams()) params += ", " + Count(spec.ActiveParams()) + " active";
  return fmt::format("{} ({}) on {} ({:.0f} GiB, {:.3g} TB/s, {:.4g} TFLOPS bf16{})", spec.name, params, hw.name,
                     hw.memory_bytes / double(uint64_t{1} << 30), hw.bandwidth / 1e12, hw.bf16_flops / 1e12,
                     hw.fp8_native() ? fmt::format(", {:.4g} fp8", hw.fp8_flops / 1e12) : "");
}

void PrintPlanTables(const std::vector<FormatPlan>& plans, uint64_t batch) {
  std::vector<std::vector<std::string>> mem, speed;
  for (const FormatPlan& p : plans) {
    mem.push_back({p.format, fmt::format("{:.3f}", p.linear_bits_per_weight), fmt::format("{:.3f}", p.bits_per_weight),
                   Gb(p.weight_bytes), Gb(p.quantized.codes), Gb(p.quantized.scales), Gb(p.quantized.zeros),
                   Gb(p.unquantized_bytes), Thousands(p.kv_bytes_per_token), Gb(p.kv_bytes), Gb(p.activation_bytes),
                   Gb(p.total_bytes), p.devices_needed ? std::to_string(p.devices_needed) : "-"});
    speed.push_back({p.format, Ms(p.decode_ms_per_token_lower_bound),
                     fmt::format("{:.1f}", p.tokens_per_s_per_sequence), fmt::format("{:.1f}", p.tokens_per_s_total),
                     p.memory_ms >= p.compute_ms ? "memory" : "compute", p.compute_path,
                     fmt::format("{:.2f}", p.arithmetic_intensity_batch1), fmt::format("{:.0f}", p.ridge_point),
                     Batch(p.ridge_batch), Batch(p.ridge_batch_at_ctx)});
  }
  PrintTable({"format", "bits/w linear", "bits/w all", "weights GB", "codes GB", "scales GB", "zeros GB", "unquant GB",
              "KV B/token", "KV GB", "act GB", "total GB", "devices"},
             mem);
  std::puts("");
  PrintTable({"format", "ms/token", "tok/s/seq", fmt::format("tok/s x{}", batch), "bound", "matmul", "FLOP/B @b1",
              "ridge FLOP/B", "ridge batch", "ridge @ctx"},
             speed);
}

void PrintFootnotes(const PlanOptions& o, const ModelSpec& spec) {
  std::puts("");
  std::puts("GB = 1e9 bytes. ms/token: one decode step, max(bytes read / bandwidth, FLOPs / peak), single device.");
  if (spec.bare) {
    std::puts("--params: weights only, the format applied to every parameter (bits/weight of a 4096 x 4096 weight).");
    return;
  }
  std::puts(fmt::format("unquant: embeddings/lm_head{}, norms, biases, MoE routers in 16 bits (or the plain float "
                        "format). devices: weights and KV split, {:.0f}% of memory usable.",
                        o.quantize_embeddings ? " (quantized: --quantize-embeddings)" : "", o.memory_utilization * 100)
                .c_str());
  std::puts(fmt::format("act: {}-token prefill chunk of one layer's bf16 tensors + fp32 logits + 1 GiB runtime "
                        "reserve (accelerators).",
                        o.prefill_chunk)
                .c_str());
  if (spec.kv_window)
    std::puts(fmt::format("KV B/token: every layer; KV GB and the bytes read per step: {} of {} layers see at most {} "
                          "tokens (a sliding window, or Llama 4's chunk) and cache no more ({} per sequence at ctx {}).",
                          spec.window_layers, spec.n_layers, spec.kv_window,
                          o.ctx > spec.kv_window ? fmt::format("{:.2f}x less KV",
                                                               double(spec.n_layers) * o.ctx / KvLayerTokens(spec, o.ctx))
                                                 : std::string("no saving"),
                          o.ctx)
                  .c_str());
}

void PrintList() {
  std::vector<std::vector<std::string>> rows;
  for (const Hardware& h : HardwareTable())
    rows.push_back({h.name, h.vendor, fmt::format("{:.0f}", h.memory_bytes / double(uint64_t{1} << 30)),
                    fmt::format("{:.3g}", h.bandwidth / 1e12), fmt::format("{:.4g}", h.bf16_flops / 1e12),
                    h.fp8_native() ? fmt::format("{:.4g}", h.fp8_flops / 1e12) : "-",
                    h.int8_ops > 0 ? fmt::format("{:.4g}", h.int8_ops / 1e12) : "-",
                    h.fp4_native() ? fmt::format("{:.4g}", h.fp4_flops / 1e12) : "-", h.compute_capability(), h.source});
  PrintTable({"hardware", "vendor", "GiB", "TB/s", "bf16 TFLOPS", "fp8", "int8 TOPS", "fp4", "cc", "source"}, rows);
  std::puts("cpu: this machine; --cpu-bandwidth GB/s (`lowbit bench memory` measures it)\n");
  rows.clear();
  for (const ModelArch& a : ModelPresets()) {
    const ModelSpec s = SpecFromArch(a);
    rows.push_back({a.name, fmt::format("{:.2f}", s.TotalParams() / 1e9), fmt::format("{:.2f}", s.ActiveParams() / 1e9),
                    std::to_string(a.n_layers), std::to_string(a.hidden), std::to_string(a.n_heads),
                    a.mla() ? "MLA" : std::to_string(a.n_kv_heads), std::to_string(a.vocab), a.tied ? "yes" : "no",
                    a.source});
  }
  PrintTable({"preset", "params B", "active B", "layers", "hidden", "heads", "kv heads", "vocab", "tied", "source"}, rows);
}

void RunPlan(const PlanFlags& f) {
  if (f.list) return PrintList();
  const ModelSpec spec = ResolveModel(f);
  const Hardware hw = FindHardware(f.hw, f.cpu_bandwidth);
  const PlanOptions o = OptionsOf(f);
  if (f.formats.empty()) Fail("--formats needs at least one format");
  std::vector<FormatPlan> plans;
  for (const std::string& format : f.formats) plans.push_back(PlanFormat(spec, hw, format, o));
  if (f.json) {
    std::puts(PlanReportJson(spec, hw, o, plans).dump(2).c_str());
    return;
  }
  std::puts(fmt::format("lowbit plan: {}\nctx {} x batch {}, KV cache {}\n", Describe(spec, hw), o.ctx, o.batch,
                        plans.front().kv_scheme)
                .c_str());
  PrintPlanTables(plans, o.batch);
  PrintFootnotes(o, spec);
}

void RunAdvise(const PlanFlags& f) {
  const ModelSpec spec = ResolveModel(f);
  const Hardware hw = FindHardware(f.hw, f.cpu_bandwidth);
  AdviseOptions o;
  o.plan = OptionsOf(f);
  o.devices = f.devices;
  o.checkpoint_format = f.checkpoint;
  const Advice a = Advise(spec, hw, o);
  if (f.json) {
    nlohmann::json out = AdviceToJson(a);
    out["model"] = ModelToJson(spec);
    out["hardware"] = HardwareToJson(hw);
    out["devices"] = o.devices;
    out["ctx"] = o.plan.ctx;
    out["batch"] = o.plan.batch;
    std::puts(out.dump(2).c_str());
    return;
  }
  std::puts(fmt::format("lowbit advise: {}\n{} device(s), ctx {} x batch {}\n", Describe(spec, hw), o.devices,
                        o.plan.ctx, o.plan.batch)
                .c_str());
  std::puts(fmt::format("recipe: {}   KV cache: {}{}\n", a.recipe(), a.kv_cache_dtype,
                        a.fits ? "" : "   (does not fit: see notes)")
                .c_str());
  std::vector<std::vector<std::string>> rows;
  for (const AdviceStep& s : a.steps) rows.push_back({s.question, s.answer, s.reason});
  PrintTable({"question", "answer", "why"}, rows);
  if (!a.notes.empty()) {
    std::puts("");
    for (const std::string& n : a.notes) std::puts(("note: " + n).c_str());
  }
  std::puts("");
  PrintPlanTables({a.plan}, o.plan.batch);
  PrintFootnotes(o.plan, spec);
}

void AddModelFlags(CLI::App* cmd, PlanFlags& f) {
  cmd->add_option("--params", f.params, "Bare parameter count, e.g. 70B (weights only)");
  cmd->add_option("--active-params", f.active_params, "Active parameters per token for a bare MoE count");
  cmd->add_option("--model", f.model, "config.json, a Hugging Face folder, or a .gguf file");
  cmd->add_option("--preset", f.preset, "Model preset: " + KnownPresetNames())->check(PresetName());
  cmd->add_option("--hw", f.hw, "Hardware: " + KnownHardwareNames())->capture_default_str();
  cmd->add_option("--ctx", f.ctx, "Context length (tokens cached per sequence)")->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--batch", f.batch, "Concurrent sequences")->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_option("--cpu-bandwidth", f.cpu_bandwidth, "Memory bandwidth of --hw cpu in GB/s (lowbit bench memory)")
      ->capture_default_str();
  cmd->add_option("--memory-utilization", f.memory_utilization, "Share of device memory usable")->capture_default_str();
  cmd->add_option("--prefill-chunk", f.prefill_chunk, "Tokens per prefill step (activation estimate)")
      ->capture_default_str()->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_flag("--quantize-embeddings", f.quantize_embeddings, "Quantize embeddings and lm_head too");
  cmd->add_flag("--json", f.json, "Print JSON");
}

}  // namespace

void AddPlanCommands(CLI::App& app) {
  auto plan = std::make_shared<PlanFlags>();
  auto* p = app.add_subcommand("plan", "Memory, KV cache and decode roofline of a model per format on a hardware target");
  AddModelFlags(p, *plan);
  p->add_option("--formats", plan->formats, "Formats, comma-separated (any lowbit format, e.g. int4:g128)")
      ->delimiter(',')->capture_default_str();
  p->add_option("--kv-cache-dtype", plan->kv_cache_dtype, "KV cache format (fp16, bf16, fp8, int8, int4:g32:asym, ...)")
      ->capture_default_str();
  p->add_flag("--list", plan->list, "List the hardware table and the model presets");
  p->callback([plan] { RunPlan(*plan); });

  auto advise = std::make_shared<PlanFlags>();
  auto* a = app.add_subcommand("advise", "Walk the format decision tree and recommend a quantization recipe");
  AddModelFlags(a, *advise);
  a->add_option("--devices", advise->devices, "Devices available (tensor parallel)")->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  a->add_option("--checkpoint", advise->checkpoint,
                "A trusted pre-quantized checkpoint exists in this format (e.g. int4:g128, fp8_e4m3:channel)");
  a->callback([advise] { RunAdvise(*advise); });
}

}  // namespace lowbit::cli
