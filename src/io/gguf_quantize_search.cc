// The scale searches the ggml block encoders share (declared in gguf_quantize_internal.h):
// make_qx_quants, make_q3_quants, make_qkx2_quants / make_qkx3_quants, make_qp_quants and the
// per-32 scale search of quantize_row_iq4_nl_impl, each as ggml-quants.c computes it.
#include <algorithm>
#include <cmath>

#include "io/gguf_quantize_internal.h"

namespace lowbit::gguf_quant {
namespace {

// The body of make_qkx2_quants (kQkx3 false) and make_qkx3_quants (AffineSearch: the header).
template <bool kQkx3>
float MakeAffineQuants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min,
                       const AffineSearch& s) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (kQkx3 ? max <= min : max == min) {
    std::fill_n(L, n, uint8_t{0});
    the_min = -min;
    return 0.0f;
  }
  const auto error_of = [&](float diff) { return s.use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    best_error += w[i] * error_of(scale * static_cast<float>(L[i]) + min - x[i]);
  }
  uint8_t Laux[32];
  for (int is = 0; is <= s.nstep; ++is) {
    iscale = (s.rmin + s.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l;
      if constexpr (kQkx3) {
        // min may sit at or near max by now, so v can be huge, inf or NaN: clamp before rounding.
        const float v = iscale * (x[i] - min);
        l = v > 0 ? NearestInt(v < static_cast<float>(nmax) ? v : static_cast<float>(nmax)) : 0;
      } else {
        l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      }
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) error += w[i] * error_of(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
      if (error < best_error) {
        std::copy_n(Laux, n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  the_min = -min;
  return scale;
}


}  // namespace

// make_qx_quants with rmse_type 1: symmetric codes L = l + nmax, l in [-nmax, nmax - 1], weights
// qw (x^2 without), the scale chosen among 19 candidate grids by weighted least squares.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  const float max = SignedAbsMax(x, n), amax = std::fabs(max);
  if (amax < kGroupMaxEps) {
    std::fill_n(L, n, int8_t{0});
    return 0.0f;
  }
  const auto weight = [&](int i) { return qw ? qw[i] : x[i] * x[i]; };
  const auto level = [&](float iscale, int i) { return std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = weight(i);
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants with do_rmse: as MakeQxQuants' first grid (weights x^2), then up to 5 rounds of
// coordinate descent re-choosing one code at a time. Codes come back as l + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n), amax = std::fabs(max);
  if (amax < kGroupMaxEps) {
    std::fill_n(L, n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = L[i];
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = std::clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


// make_qkx2_quants (n <= 32): Q2_K / Q4_K / Q5_K without an importance matrix.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s) {
  return MakeAffineQuants<false>(n, nmax, x, w, L, the_min, s);
}
// make_qkx3_quants (n <= 32, weights given): the weighted Q2_K / Q4_K / Q5_K / Q4_1 / Q5_1 paths.
float MakeQkx3Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min, AffineSearch s) {
  return MakeAffineQuants<true>(n, nmax, x, w, L, the_min, s);
}

// make_qp_quants: non-negative values (sub-block scales or mins) onto 0..nmax with weights qw.
// Codes are bytes as in ggml, so a negative level (a negative input) wraps.
float MakeQpQuants(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < kGroupMaxEps) {
    std::fill_n(L, n, uint8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(NearestInt(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, NearestInt(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, NearestInt(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sumlx += qw[i] * x[i] * static_cast<float>(l);
    suml2 += qw[i] * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i], li = L[i];
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, NearestInt(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float Iq4BlockScale(const float* xb, const float* weight) {
  constexpr int kTries = 7;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0;
  float d = -max / kIq4nl[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = kIq4nl[BestIndexIq4nl(id * xb[j])];
    sumqx += weight[j] * q * xb[j];
    sumq2 += weight[j] * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + kIq4nl[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4nl[BestIndexIq4nl(id * xb[j])];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

}  // namespace lowbit::gguf_quant
