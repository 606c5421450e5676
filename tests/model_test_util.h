// Helpers for tests that compare whole models.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "core/file_util.h"
#include "eval/scoring.h"
#include "model/calibration.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "quant/scheme.h"
#include "tokenizer/tokenizer.h"

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

// Calibration windows from the KJV training text, as `lowbit quantize --calib` draws them.
inline std::vector<std::vector<int32_t>> KjvCalibration(const Tokenizer& tok, size_t samples, size_t length) {
  const std::string text = ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-train.txt");
  return SampleTextWindows(
      text, [&](std::string_view line) { return tok.Encode(line, false); }, samples, length, 0);
}

// W8A8 with int8 per-channel weights and `act` inputs, calibrated on `samples` KJV windows of `length`
// tokens, on 2 threads (RTN unless the caller sets another method).
inline QuantizeRequest Int8ChannelW8A8Request(const Tokenizer& tok, std::string_view act, size_t samples,
                                              size_t length) {
  QuantizeRequest req;
  req.scheme = ParseScheme("int8:channel");
  req.act_scheme = ParseScheme(act);
  req.calibration = KjvCalibration(tok, samples, length);
  req.threads = 2;
  return req;
}

}  // namespace lowbit::testing_util
