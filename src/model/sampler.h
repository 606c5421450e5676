// Picks the next token from logits: greedy at temperature 0, else temperature, then top-k, then
// top-p (nucleus) filtering, then a draw from a seeded generator (reproducible runs).
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace lowbit {

struct SamplerOptions {
  float temperature = 0.0f;
  int top_k = 40;       // <= 0: off
  float top_p = 0.95f;  // >= 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options) : options_(options), rng_(options.seed) {}
  int32_t Sample(std::span<const float> logits);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lowbit
