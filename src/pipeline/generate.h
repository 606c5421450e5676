// Text generation: the prompt is prefilled once, then one sampled token per step until the end token
// or the budget. A TextGenerator is pulled a token at a time (the Python package's iterator);
// Generate runs one to the end, handing each piece of text to a callback (the CLI's stream).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/forward.h"
#include "model/sampler.h"
#include "pipeline/session.h"

namespace lowbit {

struct GeneratedToken {
  int32_t id = 0;
  std::string text;  // its bytes in the running text (a leading space of the first piece kept)
};

struct GenerationResult {
  std::string text;
  size_t prompt_tokens = 0, generated = 0;
  double prompt_tps = 0, decode_tps = 0;
};

class TextGenerator {
 public:
  // `prompt` is plain text (BOS is added as the tokenizer's model expects) or, with `chat`, the output
  // of ApplyChatTemplate (which carries its own special tokens: nothing is added). Prefills at once;
  // Error when the prompt does not fit the model's context. `m` must outlive the generator.
  TextGenerator(const LoadedModel& m, const std::string& prompt, bool chat, size_t max_tokens,
                const SamplerOptions& sampler, size_t threads);

  // The next token, or nullopt at the model's or the tokenizer's end token, the budget or the context.
  std::optional<GeneratedToken> Next();
  // Text and speeds so far.
  GenerationResult result() const;

 private:
  const LoadedModel& m_;
  std::vector<int32_t> prompt_ids_;
  size_t max_tokens_, capacity_;
  Engine engine_;
  KvCache cache_;
  Sampler sampler_;
  std::vector<float> logits_;
  int32_t previous_;
  bool done_ = false;
  GenerationResult result_;
  double prompt_seconds_ = 0, decode_seconds_ = 0;
};

// The fields `lowbit generate --json` prints and Generation.result returns (text, token counts, speeds).
nlohmann::json GenerationResultJson(const GenerationResult& r);

// Runs a TextGenerator to the end; `on_piece` (may be empty) gets each piece as it is sampled.
GenerationResult Generate(const LoadedModel& m, const std::string& prompt, bool chat, size_t max_tokens,
                          const SamplerOptions& sampler, size_t threads,
                          const std::function<void(std::string_view)>& on_piece = nullptr);

}  // namespace lowbit
