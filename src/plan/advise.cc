#include "plan/advise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lowbit {
namespace {

struct Tier {
  std::string label;   // "16-bit", "8-bit", "4-bit"
  std::string format;  // lowbit format string
  std::string method;
};

std::string GB(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

class Advisor {
 public:
  Advisor(const ModelSpec& spec, const Hardware& hw, const AdviseOptions& o) : spec_(spec), hw_(hw), o_(o) {
    if (o.devices == 0) Fail("--devices must be at least 1");
    t16_ = {"16-bit", "bf16", "none"};
    t8_ = hw.fp8_native() ? Tier{"8-bit", "fp8_e4m3:channel", "rtn"} : Tier{"8-bit", "int8:channel", "rtn"};
    t4_ = hw.fp4_native() ? Tier{"4-bit", "nvfp4", "rtn"} : Tier{"4-bit", "int4:g128", "gptq"};
    kv_tiers_ = {"fp16", hw.fp8_native() ? "fp8_e4m3" : "int8", "int4:g32:asym"};
  }

  Advice Run();

 private:
  FormatPlan Plan(const std::string& format, const std::string& kv) const {
    PlanOptions p = o_.plan;
    p.kv_cache_dtype = kv;
    return PlanFormat(spec_, hw_, format, p);
  }
  bool Fits(const FormatPlan& p) const { return p.devices_needed != 0 && p.devices_needed <= o_.devices; }
  double Budget(const FormatPlan& p) const { return double(p.usable_bytes_per_device) * o_.devices; }
  bool WeightsFit(const FormatPlan& p) const { return p.weight_bytes <= kMaxWeightShare * Budget(p); }
  // Devices the advisor would accept for `p`: everything fits and weights keep to their share.
  uint64_t DevicesFor(const FormatPlan& p) const {
    const double share = kMaxWeightShare * double(p.usable_bytes_per_device);
    const auto by_share = static_cast<uint64_t>(std::ceil(double(p.weight_bytes) / share));
    return p.devices_needed == 0 ? 0 : std::max<uint64_t>(p.devices_needed, by_share);
  }
  void Step(std::string q, std::string a, std::string r) { advice_.steps.push_back({std::move(q), std::move(a), std::move(r)}); }

  void AskFp8();
  Tier AskCompression(const FormatPlan& bf16, bool tight);
  void AskCheckpoint(const Tier& tier);
  void AskKv(Tier& tier);

  const ModelSpec& spec_;
  const Hardware& hw_;
  const AdviseOptions& o_;
  Tier t16_, t8_, t4_;
  std::vector<std::string> kv_tiers_;
  Advice advice_;
};

void Advisor::AskFp8() {
  std::string reason;
  if (hw_.is_cpu()) {
    reason = "no FP8 matrix units on a CPU; INT8/INT4 weight-only kernels are the fast path";
  } else if (hw_.is_nvidia()) {
    reason = hw_.fp8_native()
                 ? fmt::format("compute capability {} >= 8.9: FP8 tensor cores ({:.0f} TFLOPS dense)",
                               hw_.compute_capability(), hw_.fp8_flops / 1e12)
                 : fmt::format("compute capability {} < 8.9: FP8 weights would only run dequantized to "
                               "bf16 (weight-only); INT8/INT4 kernels are the fast path",
                               hw_.compute_capability());
  } else {
    reason = hw_.fp8_native() ? fmt::format("FP8 matrix units ({:.0f} TFLOPS dense)", hw_.fp8_flops / 1e12)
                              : "no FP8 matrix units; INT8/INT4 kernels are the fast path";
  }
  Step(fmt::format("FP8 kernel on {}?", hw_.name), hw_.fp8_native() ? "yes" : "no", reason);
}

Tier Advisor::AskCompression(const FormatPlan& bf16, bool tight) {
  if (!tight) {
    // Memory is not the constraint; speed is. Decode below the ridge batch is bound by weight
    // bytes, so 8 bits halve the step time, and the 8-bit tiers are close to lossless.
    const FormatPlan p8 = Plan(t8_.format, kv_tiers_[0]);
    const bool compute_bound = bf16.ridge_batch && o_.plan.batch >= *bf16.ridge_batch;
    if (hw_.fp8_native()) {
      Step("2x or 4x compression needed?", "no (8-bit for speed)",
           fmt::format("FP8 W8A8 halves the weight bytes and doubles the matrix peak: decode lower bound "
                       "{:.2f} -> {:.2f} ms/token, near-lossless", bf16.decode_ms_per_token_lower_bound,
                       p8.decode_ms_per_token_lower_bound));
      return t8_;
    }
    if (compute_bound) {
      const bool int8_w8a8 = hw_.int8_ops > 0 && !(hw_.is_nvidia() && hw_.cc_major >= 10);
      if (int8_w8a8) {
        Step("2x or 4x compression needed?", "no (INT8 W8A8 for compute)",
             fmt::format("batch {} >= ridge batch {}: compute-bound, so weight-only kernels gain nothing; "
                         "SmoothQuant W8A8 uses the {:.0f} TOPS INT8 units", o_.plan.batch, *bf16.ridge_batch,
                         hw_.int8_ops / 1e12));
        return {"8-bit", "int8:channel", "smoothquant"};
      }
      Step("2x or 4x compression needed?", "no",
           fmt::format("batch {} >= ridge batch {}: compute-bound and no usable INT8 matrix path, so bf16 "
                       "stays", o_.plan.batch, *bf16.ridge_batch));
      return t16_;
    }
    Step("2x or 4x compression needed?", "no (8-bit for speed)",
         fmt::format("decode is memory-bound (batch {} below the ridge): INT8 weight-only (W8A16) halves the "
                     "weight bytes, lower bound {:.2f} -> {:.2f} ms/token, near-lossless per channel",
                     o_.plan.batch, bf16.decode_ms_per_token_lower_bound, p8.decode_ms_per_token_lower_bound));
    return t8_;
  }
  const double budget = kMaxWeightShare * Budget(bf16);
  std::string tried;
  for (const Tier* t : {&t8_, &t4_}) {
    const FormatPlan p = Plan(t->format, kv_tiers_[0]);
    if (WeightsFit(p)) {
      Step("2x or 4x compression needed?", t == &t8_ ? "yes, 2x (8-bit)" : "yes, 4x (4-bit)",
           fmt::format("{}{} weights {} fit in {:.0f}% of {} usable ({})", tried, t->format, GB(p.weight_bytes),
                       kMaxWeightShare * 100, GB(Budget(p)), GB(budget)));
      return *t;
    }
    tried += fmt::format("{} weights {} > {}; ", t->format, GB(p.weight_bytes), GB(budget));
  }
  Step("2x or 4x compression needed?", "yes, more than 4x",
       fmt::format("{}add devices (3-bit and below cost real quality)", tried));
  return t4_;
}

void Advisor::AskCheckpoint(const Tier& tier) {
  const std::string q = "trusted pre-quantized checkpoint?";
  if (o_.checkpoint_format.empty()) {
    Step(q, "no", "none given (--checkpoint FORMAT names one); calibrate locally");
    return;
  }
  const FormatPlan cp = Plan(o_.checkpoint_format, kv_tiers_[0]);
  const FormatPlan want = Plan(tier.format, kv_tiers_[0]);
  if (!WeightsFit(cp)) {
    Step(q, "yes, not used",
         fmt::format("{} weights {} exceed {:.0f}% of {}", cp.scheme, GB(cp.weight_bytes), kMaxWeightShare * 100,
                     GB(Budget(cp))));
    return;
  }
  // Half a bit of slack so a g128 checkpoint (4.125) counts as the 4-bit tier it is.
  if (cp.linear_bits_per_weight + 0.5 < want.linear_bits_per_weight) {
    Step(q, "yes, not used",
         fmt::format("{} is {:.3f} bits/weight but {} ({:.3f}) fits: calibrate the more precise format",
                     cp.scheme, cp.linear_bits_per_weight, tier.format, want.linear_bits_per_weight));
    return;
  }
  Step(q, "yes, use it",
       fmt::format("{} ({:.3f} bits/weight) fits and is at least as precise as the {} tier: no calibration run",
                   cp.scheme, cp.linear_bits_per_weight, tier.label));
  const QuantScheme s = ParseScheme(o_.checkpoint_format);
  if (s.element->kind == ElementKind::kFloat && s.element->bits == 8 && !hw_.fp8_native())
    advice_.notes.push_back(fmt::format("an FP8 checkpoint on {} runs weight-only (dequantized to bf16)", hw_.name));
  advice_.method = "pre-quantized";
  advice_.format = o_.checkpoint_format;
}

void Advisor::AskKv(Tier& tier) {
  const std::string q = fmt::format("KV the bottleneck at {} x {}?", o_.plan.ctx, o_.plan.batch);
  if (spec_.bare) {
    advice_.kv_cache_dtype = kv_tiers_[0];
    Step(q, "unknown", "a bare --params count has no KV shape (use --preset or --model)");
    return;
  }
  const std::string& format = advice_.format;
  const FormatPlan p16 = Plan(format, kv_tiers_[0]);
  const bool traffic = p16.kv_bytes > p16.weight_bytes;
  if (!WeightsFit(p16) && !traffic) {  // more devices are the answer, not a smaller cache
    advice_.kv_cache_dtype = kv_tiers_[0];
    Step(q, "no", fmt::format("fp16 KV {} < weights {}; the weights are what does not fit", GB(p16.kv_bytes),
                              GB(p16.weight_bytes)));
    return;
  }
  if (Fits(p16) && !traffic) {
    advice_.kv_cache_dtype = kv_tiers_[0];
    Step(q, "no", fmt::format("fp16 KV {} < weights {}, and everything fits", GB(p16.kv_bytes), GB(p16.weight_bytes)));
    return;
  }
  const std::string why = !Fits(p16)
      ? fmt::format("fp16 KV {} does not fit next to {} weights {}", GB(p16.kv_bytes), format, GB(p16.weight_bytes))
      : fmt::format("fp16 KV {} > weights {}: each decode step reads more cache than weights", GB(p16.kv_bytes),
                    GB(p16.weight_bytes));
  // Prefer the 8-bit cache; go to 4 bits only when 8 does not fit, and drop a weight tier only when
  // no cache dtype fits (a pre-quantized checkpoint keeps its format).
  std::vector<std::string> formats = {format};
  if (advice_.method != "pre-quantized" && format != t4_.format) formats.push_back(t4_.format);
  for (const std::string& f : formats) {
    for (size_t k = 1; k < kv_tiers_.size(); ++k) {
      const FormatPlan p = Plan(f, kv_tiers_[k]);
      if (!Fits(p)) continue;
      advice_.kv_cache_dtype = kv_tiers_[k];
      std::string extra;
      if (f != format) {
        extra = fmt::format("; weights drop to {} to make room", f);
        tier = t4_;
        advice_.format = f;
        advice_.method = t4_.method;
      }
      Step(q, "yes", fmt::format("{}: {} KV {}{}", why, kv_tiers_[k], GB(p.kv_bytes), extra));
      return;
    }
  }
  advice_.kv_cache_dtype = kv_tiers_[1];
  const FormatPlan p = Plan(format, kv_tiers_[1]);
  Step(q, "yes", fmt::format("{}; even with {} KV ({}) it needs {} x {}: cut the batch or context, or add devices",
                             why, kv_tiers_[1], GB(p.kv_bytes), DevicesFor(p), hw_.name));
}

Advice Advisor::Run() {
  AskFp8();
  const FormatPlan bf16 = Plan(t16_.format, kv_tiers_[0]);
  const bool tight = !WeightsFit(bf16) || !Fits(bf16);
  Step("memory tight?", tight ? "yes" : "no",
       fmt::format("bf16 weights {} + KV {} + activations {} = {} on {} x {} ({} usable at {:.0f}%; weights may "
                   "take {:.0f}%)", GB(bf16.weight_bytes), GB(bf16.kv_bytes), GB(bf16.activation_bytes),
                   GB(bf16.total_bytes), o_.devices, hw_.name, GB(Budget(bf16)), o_.plan.memory_utilization * 100,
                   kMaxWeightShare * 100));
  Tier tier = AskCompression(bf16, tight);
  advice_.method = tier.method;
  advice_.format = tier.format;
  AskCheckpoint(tier);
  AskKv(tier);

  advice_.plan = Plan(advice_.format, advice_.kv_cache_dtype);
  advice_.fits = Fits(advice_.plan);
  if (!advice_.fits || !WeightsFit(advice_.plan)) {
    const uint64_t n = DevicesFor(advice_.plan);
    const std::string need = n ? fmt::format("{} x {} (tensor parallel)", n, hw_.name) : "a device with more memory";
    advice_.notes.push_back(advice_.fits ? fmt::format("loads on {} x {} but leaves little KV-cache room: {} recommended",
                                                       o_.devices, hw_.name, need)
                                         : fmt::format("does not fit on {} x {}: needs {}", o_.devices, hw_.name, need));
  }
  if (advice_.method == "rtn" && advice_.format.starts_with("fp8"))
    advice_.notes.push_back("FP8 weights with per-channel scales and dynamic per-token FP8 activations: no "
                            "calibration data needed");
  if (advice_.method == "gptq")
    advice_.notes.push_back("symmetric INT4, group 128, no zero points, no act-order: the layout the Hopper "
                            "(Machete) and Ampere (Marlin) mixed-precision kernels take; AWQ is an equal choice");
  if (advice_.kv_cache_dtype.starts_with("fp8"))
    advice_.notes.push_back("calibrate the FP8 KV-cache scales: engines fall back to scale 1.0 without them");
  return advice_;
}

}  // namespace

Advice Advise(const ModelSpec& spec, const Hardware& hw, const AdviseOptions& options) {
  return Advisor(spec, hw, options).Run();
}

nlohmann::json AdviceToJson(const Advice& a) {
  nlohmann::json steps = nlohmann::json::array();
  for (const AdviceStep& s : a.steps) steps.push_back({{"question", s.question}, {"answer", s.answer}, {"reason", s.reason}});
  return {{"recipe", a.recipe()},       {"method", a.method}, {"format", a.format},
          {"kv_cache_dtype", a.kv_cache_dtype}, {"fits", a.fits}, {"steps", steps},
          {"notes", a.notes},           {"plan", PlanToJson(a.plan)}};
}

}  // namespace lowbit
