// How a scale (and zero-point) is chosen from the values it covers. Shared by RTN and, later,
// by GPTQ/AWQ which choose scales group by group as they go.
//
//   MX (E8M0 scales)   shared_exp = floor(log2(amax)) - emax_elem, clamped to [-127, 127]; the
//                      OCP MX v1.0 rule (amax == 0 uses FP32's min normal). With e8m0=round, the
//                      rule of compressed-tensors and vLLM's MX reference: amax rounded half up to
//                      m mantissa bits first (m = 3 for E2M3, 1 for E2M1 and E4M3, as theirs), so
//                      a block whose amax would land above the element's top binade goes up one
//                      exponent (FP4: amax >= 1.75 x 2^k).
//   NVFP4              tensor scale t = amax(W) / (6 * 448); block scale = E4M3(amax_b / (6 t)),
//                      0 replaced by 1 (ModelOpt); element scale = block scale * t.
//   ternary            gamma = max(mean |x|, 1e-5) (BitNet b1.58 absmean).
//   asymmetric int     [lo, hi] = [min(x, 0), max(x, 0)]; scale = (hi - lo) / (2^n - 1);
//                      zero = round(-lo / scale) (integer) or -lo / scale (float zero).
//   otherwise          scale = amax / ScaleDivisor(element), rounded to the scale type.
#pragma once

#include <cstdint>

#include "quant/scheme.h"

namespace lowbit {

struct CellStats {
  float amax = 0, min = 0, max = 0;
  double abs_sum = 0;
  uint64_t count = 0;
  void AddSpan(const float* x, uint64_t n);  // NaN/Inf input makes abs_sum non-finite
};

// The tensor-level scale of schemes that have one (NVFP4), from the tensor's absolute max: the
// reciprocal of the fp32 global scale compressed-tensors and vLLM store (6 * 448 / amax), so that a
// stored global scale g with 1 / g == this value exists and the engines' 1 / g is exactly it.
float ChooseTensorScale(const QuantScheme& s, float tensor_amax);

struct CellParams {
  float stored_scale = 0;  // the value to store (already representable in the scale type)
  float zero = 0;          // representable in the zero type; 0 when symmetric
};
CellParams ChooseCellParams(const QuantScheme& s, const CellStats& stats, float tensor_scale);

}  // namespace lowbit
