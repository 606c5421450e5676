// Helpers for tests that compare whole models.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "eval/scoring.h"
#include "model/forward.h"

namespace lowbit::testing_util {

// Mean over positions of KL(base || model) of the next-token distributions of one sequence.
inline double MeanKl(const Model& base, const Model& model, const std::vector<int32_t>& ids) {
  Engine eb(base, 2), em(model, 2);
  KvCache cb = eb.NewCache(ids.size()), cm = em.NewCache(ids.size());
  const auto lb = eb.Forward(cb, ids, true), lm = em.Forward(cm, ids, true);
  const size_t vocab = base.config.vocab_size;
  double kl = 0;
  std::vector<double> pb, pm;
  for (size_t t = 0; t < ids.size(); ++t) {
    LogSoftmax(std::span(&lb[t * vocab], vocab), pb);
    LogSoftmax(std::span(&lm[t * vocab], vocab), pm);
    for (size_t i = 0; i < vocab; ++i) kl += std::exp(pb[i]) * (pb[i] - pm[i]);
  }
  return kl / static_cast<double>(ids.size());
}

}  // namespace lowbit::testing_util
