#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace lowbit {

int32_t Sampler::Sample(std::span<const float> logits) {
  if (options_.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  size_t keep = logits.size();
  if (options_.top_k > 0) keep = std::min(keep, static_cast<size_t>(options_.top_k));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(keep), idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(keep);
  const double max = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[idx[i]] - max) / options_.temperature);
  if (options_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += p[i] / sum;
      if (mass >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
    p.resize(keep);
  }
  std::discrete_distribution<size_t> pick(p.begin(), p.end());
  return idx[pick(rng_)];
}

}  // namespace lowbit
