// SwiGLU and GeGLU with a vector exp / tanh (Highway's contrib Exp, within a few ulp of std::exp): the scalar
// std::exp loop was a single-threaded hot spot of calibration passes over 32k tokens.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>

#include "kernels/activation.h"

#ifndef LOWBIT_KERNELS_ACTIVATION_SCALAR_  // once, not per target
#define LOWBIT_KERNELS_ACTIVATION_SCALAR_
namespace lowbit {
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): the same function without the cancellation of 1 + tanh(u)
// near -1, which loses every digit for g below about -5.
constexpr float kTwoSqrt2OverPi = 1.5957691216057308f, kGeluCubic = 0.044715f;
inline float GeluTanh(float g) {
  return g / (1.0f + std::exp(std::min(-kTwoSqrt2OverPi * (g + kGeluCubic * g * g * g), 88.0f)));
}
}  // namespace lowbit
#endif

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SiluMulImpl(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f), exp_limit = hn::Set(d, 88.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    // Exp is valid up to 104; past 88 std::exp overflows and silu is 0 to float precision anyway.
    const auto silu = hn::Div(g, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(g), exp_limit))));
    hn::StoreU(hn::Mul(silu, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMulImpl(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f), k = hn::Set(d, -kTwoSqrt2OverPi), c = hn::Set(d, kGeluCubic);
  const auto exp_limit = hn::Set(d, 88.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto minus_2u = hn::Mul(k, hn::MulAdd(hn::Mul(c, g), hn::Mul(g, g), g));
    const auto gelu = hn::Div(g, hn::Add(one, hn::Exp(d, hn::Min(minus_2u, exp_limit))));
    hn::StoreU(hn::Mul(gelu, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lowbit {
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(GeluTanhMulImpl);

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n, out);
}

void SiluMulRef(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMulImpl)(gate, up, n, out);
}

void GeluTanhMulRef(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

void SwigluClampedMul(const float* gate, const float* up, size_t n, float alpha, float limit, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(std::min(-alpha * g, 88.0f))) * (u + 1.0f);
  }
}
}  // namespace lowbit
#endif
