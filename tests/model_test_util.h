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

// `count` windows of `length` token ids below `vocab` from a fixed pseudo-random stream (`seed`).
inline std::vector<std::vector<int32_t>> RandomWindows(size_t count, size_t length, uint32_t vocab,
                                                       uint64_t seed = 12345) {
  std::vector<std::vector<int32_t>> out(count, std::vector<int32_t>(length));
  uint64_t state = seed;
  for (auto& w : out)
    for (int32_t& t : w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      t = static_cast<int32_t>((state >> 33) % vocab);
    }
  return out;
}

// Mean squared logit difference to the full-precision model over the windows.
inline double LogitError(const Model& reference, const Model& model, const std::vector<std::vector<int32_t>>& windows) {
  Engine a(reference, 2), b(model, 2);
  double sum = 0;
  size_t n = 0;
  for (const auto& w : windows) {
    KvCache ca = a.NewCache(w.size()), cb = b.NewCache(w.size());
    const std::vector<float> x = a.Forward(ca, w, true), y = b.Forward(cb, w, true);
    for (size_t i = 0; i < x.size(); ++i, ++n) sum += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  }
  return sum / static_cast<double>(n);
}

// `fp` quantized by RTN and by GPTQ at `scheme` (16 random calibration windows of 32 tokens), with each one's
// logit error on two other windows; `request` is the GPTQ run's, for more runs of the same settings.
struct RtnAndGptq {
  QuantizeRequest request;
  Model rtn, gptq;
  QuantizeReport gptq_report;
  double rtn_error = 0, gptq_error = 0;
};
inline RtnAndGptq QuantizeRtnAndGptq(const Model& fp, const char* scheme) {
  RtnAndGptq r{.rtn = fp, .gptq = fp};
  r.request.scheme = ParseScheme(scheme);
  r.request.calibration = RandomWindows(16, 32, fp.config.vocab_size);
  r.request.threads = 2;
  (void)QuantizeModel(r.rtn, r.request);
  r.request.method = "gptq";
  r.gptq_report = QuantizeModel(r.gptq, r.request);
  const auto windows = RandomWindows(2, 16, fp.config.vocab_size);
  r.rtn_error = LogitError(fp, r.rtn, windows);
  r.gptq_error = LogitError(fp, r.gptq, windows);
  return r;
}

// deepseek-ai/DeepSeek-V3's config.json.
inline constexpr const char* kDeepSeekV3Config = R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8,
    "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
    "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-06, "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
    "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
    "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1})";

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
