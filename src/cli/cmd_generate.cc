// `lowbit generate`: stream a continuation of a prompt, then report prompt and decode speed.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/sampler.h"

namespace lowbit::cli {
namespace {

struct GenerateOptions {
  std::string model, prompt, tokenizer, system;
  bool chat = false;
  size_t n = 64, threads = 0;
  SamplerOptions sampler;
  bool json = false;
  LoadOptions load;  // --allow-nonfinite
};

}  // namespace

GenerationResult Generate(const LoadedModel& m, const std::string& prompt, bool chat, size_t n, const SamplerOptions& so,
                          size_t threads, std::FILE* stream) {
  using Clock = std::chrono::steady_clock;
  const std::vector<int32_t> ids = chat ? m.tokenizer->EncodeWithSpecialTokens(prompt) : m.tokenizer->Encode(prompt, true);
  Engine engine(m.model, threads, {}, Activations::kFast);
  const size_t capacity = std::min<size_t>(m.model.config.max_position, ids.size() + n);
  if (ids.size() >= capacity)
    Fail("the prompt has {} tokens; the model's context is {}", ids.size(), m.model.config.max_position);
  KvCache cache = engine.NewCache(capacity);
  Sampler sampler(so);
  GenerationResult r;
  r.prompt_tokens = ids.size();
  if (stream) std::fputs(prompt.c_str(), stream), std::fflush(stream);
  auto t0 = Clock::now();
  std::vector<float> logits = engine.Forward(cache, ids, false);
  const double prompt_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  int32_t previous = ids.back();
  while (r.generated < n && cache.size() < capacity) {
    const int32_t next = sampler.Sample(logits);
    // config.json's end token, or the tokenizer's (a chat model's end of turn, e.g. <|im_end|>).
    if (next == m.model.config.eos_id || next == m.tokenizer->eos_id()) break;
    ++r.generated;
    const std::string piece = m.tokenizer->DecodeToken(next, previous);
    r.text += piece;
    if (stream) std::fputs(piece.c_str(), stream), std::fflush(stream);
    previous = next;
    if (cache.size() >= capacity) break;
    logits = engine.Forward(cache, std::span(&next, 1), false);
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.prompt_tps = static_cast<double>(ids.size()) / prompt_s;
  r.decode_tps = r.generated ? static_cast<double>(r.generated) / decode_s : 0;
  return r;
}

void AddGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("--model", o->model, "Model folder or file")->required();
  cmd->add_option("--prompt", o->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o->chat,
                "Send the prompt as a user message through the model's chat template (tokenizer_config.json, "
                "chat_template.jinja or the GGUF's tokenizer.chat_template), with the assistant's turn opened");
  cmd->add_option("--system", o->system, "With --chat: a system message first");
  cmd->add_option("-n,--tokens", o->n, "Tokens to generate")->default_val(64);
  cmd->add_option("--temp", o->sampler.temperature, "Temperature (0 = greedy)")->default_val(0.0f);
  cmd->add_option("--top-k", o->sampler.top_k, "Top-k filter (0 = off)")->default_val(40);
  cmd->add_option("--top-p", o->sampler.top_p, "Top-p (nucleus) filter (1 = off)")->default_val(0.95f);
  cmd->add_option("--seed", o->sampler.seed, "Random seed")->default_val(0);
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->default_val(0);
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer (default: the model's own)");
  cmd->add_flag("--json", o->json, "Print JSON instead of streaming");
  AddAllowNonfiniteFlag(cmd, o->load);
  cmd->callback([o] {
    if (!o->system.empty() && !o->chat) Fail("generate: --system needs --chat");
    const LoadedModel m = LoadModelWithTokenizer(o->model, o->tokenizer, "", o->load);
    const std::string prompt =
        o->chat ? ChatPrompt(o->tokenizer.empty() ? o->model : o->tokenizer, o->system, o->prompt) : o->prompt;
    const GenerationResult r = Generate(m, prompt, o->chat, o->n, o->sampler, o->threads, o->json ? nullptr : stdout);
    if (o->json) {
      const nlohmann::json out = {{"prompt", prompt},
                                  {"text", r.text},
                                  {"prompt_tokens", r.prompt_tokens},
                                  {"generated_tokens", r.generated},
                                  {"prompt_tokens_per_second", r.prompt_tps},
                                  {"decode_tokens_per_second", r.decode_tps}};
      std::puts(out.dump(2).c_str());
      return;
    }
    std::printf("\n\nprompt: %zu tokens, %.1f tokens/s | decode: %zu tokens, %.1f tokens/s\n", r.prompt_tokens,
                r.prompt_tps, r.generated, r.decode_tps);
  });
}

}  // namespace lowbit::cli
