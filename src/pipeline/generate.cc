#include "pipeline/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace lowbit {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int32_t> PromptIds(const LoadedModel& m, const std::string& prompt, bool chat) {
  std::vector<int32_t> ids = chat ? m.tokenizer->EncodeWithSpecialTokens(prompt) : m.tokenizer->Encode(prompt, true);
  if (ids.empty()) Fail("generate: the prompt is empty and the tokenizer adds no BOS");
  return ids;
}

}  // namespace

TextGenerator::TextGenerator(const LoadedModel& m, const std::string& prompt, bool chat, size_t max_tokens,
                             const SamplerOptions& sampler, size_t threads)
    : m_(m),
      prompt_ids_(PromptIds(m, prompt, chat)),
      max_tokens_(max_tokens),
      capacity_(std::min<size_t>(m.model.config.max_position, prompt_ids_.size() + max_tokens)),
      engine_(m.model, threads, {}, Activations::kFast),
      cache_(m.model.config, std::max(capacity_, prompt_ids_.size())),
      sampler_(sampler),
      previous_(prompt_ids_.back()) {
  if (prompt_ids_.size() >= m.model.config.max_position)
    Fail("the prompt has {} tokens; the model's context is {}", prompt_ids_.size(), m.model.config.max_position);
  result_.prompt_tokens = prompt_ids_.size();
  const auto start = Clock::now();
  logits_ = engine_.Forward(cache_, prompt_ids_, false);
  prompt_seconds_ = SecondsSince(start);
}

std::optional<GeneratedToken> TextGenerator::Next() {
  if (done_ || result_.generated >= max_tokens_ || cache_.size() >= capacity_) {
    done_ = true;
    return std::nullopt;
  }
  const auto start = Clock::now();
  const int32_t next = sampler_.Sample(logits_);
  // config.json's end token, or the tokenizer's (a chat model's end of turn, e.g. <|im_end|>).
  if (next == m_.model.config.eos_id || next == m_.tokenizer->eos_id()) {
    done_ = true;
    decode_seconds_ += SecondsSince(start);
    return std::nullopt;
  }
  GeneratedToken token{next, m_.tokenizer->DecodeToken(next, previous_)};
  ++result_.generated;
  result_.text += token.text;
  previous_ = next;
  // The last token's logits are never needed: no forward pass once the budget or context is spent.
  if (result_.generated < max_tokens_ && cache_.size() < capacity_)
    logits_ = engine_.Forward(cache_, std::span(&next, 1), false);
  decode_seconds_ += SecondsSince(start);
  return token;
}

GenerationResult TextGenerator::result() const {
  GenerationResult r = result_;
  r.prompt_tps = prompt_seconds_ > 0 ? static_cast<double>(r.prompt_tokens) / prompt_seconds_ : 0;
  r.decode_tps = r.generated && decode_seconds_ > 0 ? static_cast<double>(r.generated) / decode_seconds_ : 0;
  return r;
}

nlohmann::json GenerationResultJson(const GenerationResult& r) {
  return {{"text", r.text},
          {"prompt_tokens", r.prompt_tokens},
          {"generated_tokens", r.generated},
          {"prompt_tokens_per_second", r.prompt_tps},
          {"decode_tokens_per_second", r.decode_tps}};
}

GenerationResult Generate(const LoadedModel& m, const std::string& prompt, bool chat, size_t max_tokens,
                          const SamplerOptions& sampler, size_t threads,
                          const std::function<void(std::string_view)>& on_piece) {
  TextGenerator generator(m, prompt, chat, max_tokens, sampler, threads);
  while (const std::optional<GeneratedToken> token = generator.Next())
    if (on_piece) on_piece(token->text);
  return generator.result();
}

}  // namespace lowbit
