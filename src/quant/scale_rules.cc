#include "quant/scale_rules.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace lowbit {

void CellStats::AddSpan(const float* x, uint64_t n) {
  if (n == 0) return;
  float lo = count ? min : x[0], hi = count ? max : x[0], a = amax, sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    const float ax = std::fabs(x[i]);
    a = ax > a ? ax : a;
    sum += ax;
  }
  min = lo;
  max = hi;
  amax = a;
  abs_sum += sum;
  count += n;
}

float ChooseTensorScale(const QuantScheme& s, float tensor_amax) {
  if (!s.tensor_scale) return 1.0f;
  const float global = static_cast<float>(ScaleDivisor(*s.element) * MaxFinite(kUE4M3)) / tensor_amax;
  const float t = 1.0f / global;
  return t > 0 && std::isfinite(t) && std::isfinite(global) ? t : 1.0f;
}

namespace {
// x rounded half up to `mantissa` bits, as compressed-tensors' round_to_power_2 does on fp32 bits
// before it keeps the exponent alone.
float RoundedToMantissa(float x, int mantissa) {
  const uint32_t bits = std::bit_cast<uint32_t>(x) + (uint32_t{1} << (23 - mantissa - 1));
  const float rounded = std::bit_cast<float>(bits);
  return std::isfinite(rounded) ? rounded : x;  // the top binade stays where it is
}

float ZeroRounded(ZeroType z, float v) {
  switch (z) {
    case ZeroType::kF32: return v;
    case ZeroType::kF16: return RoundScale(ScaleType::kF16, v);
    case ZeroType::kBF16: return RoundScale(ScaleType::kBF16, v);
    default: return v;
  }
}
}  // namespace

CellParams ChooseCellParams(const QuantScheme& s, const CellStats& st, float tensor_scale) {
  const ElementFormat& e = *s.element;
  if (s.mx_scales()) {
    const int emax = e.kind == ElementKind::kMxInt8 ? 0 : MaxExponent(*e.minifloat);
    const float amax = s.e8m0_round ? RoundedToMantissa(st.amax, e.name == "fp6_e2m3" ? 3 : 1) : st.amax;
    const int amax_exp = amax > 0 ? std::ilogb(amax) : -126;  // FP32 min normal when 0
    const int shared = std::clamp(amax_exp - emax, -127, 127);
    return {std::ldexp(1.0f, shared), 0};
  }
  if (e.kind == ElementKind::kTernary) {
    const double mean = st.count ? st.abs_sum / static_cast<double>(st.count) : 0.0;
    return {RoundScale(s.scale_type, static_cast<float>(std::max(mean, 1e-5))), 0};
  }
  if (s.asymmetric()) {
    const float lo = std::min(st.min, 0.0f), hi = std::max(st.max, 0.0f);
    const float qmax = static_cast<float>((1u << e.bits) - 1);
    const float scale = RoundScale(s.scale_type, (hi - lo) / qmax);
    if (scale == 0) return {0, 0};
    const float zero = -lo / scale;
    if (s.zero_type == ZeroType::kInt) return {scale, std::clamp(std::nearbyint(zero), 0.0f, qmax)};
    return {scale, ZeroRounded(s.zero_type, zero)};
  }
  float scale = RoundScale(s.scale_type, st.amax / static_cast<float>(ScaleDivisor(e)) / tensor_scale);
  if (s.tensor_scale && scale == 0) scale = 1.0f;  // all-zero NVFP4 block (ModelOpt)
  return {scale, 0};
}

}  // namespace lowbit
