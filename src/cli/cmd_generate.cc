// `lowbit generate`: stream a continuation of a prompt, then report prompt and decode speed.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "core/error.h"
#include "model/sampler.h"
#include "pipeline/generate.h"

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
  cmd->add_option("--temp", o->sampler.temperature, "Temperature (0 = greedy)")->default_val(0.0f)->check(NonNegative());
  cmd->add_option("--top-k", o->sampler.top_k, "Top-k filter (0 = off)")->default_val(40)->check(NonNegative());
  cmd->add_option("--top-p", o->sampler.top_p, "Top-p (nucleus) filter (1 = off)")->default_val(0.95f)->check(Between(0, 1));
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
    if (!o->json) std::fputs(prompt.c_str(), stdout), std::fflush(stdout);
    const GenerationResult r = Generate(m, prompt, o->chat, o->n, o->sampler, o->threads, [&](std::string_view piece) {
      if (!o->json) std::fwrite(piece.data(), 1, piece.size(), stdout), std::fflush(stdout);
    });
    if (o->json) {
      nlohmann::json out = {{"prompt", prompt}};
      out.update(GenerationResultJson(r));
      std::puts(out.dump(2).c_str());
      return;
    }
    std::printf("\n\nprompt: %zu tokens, %.1f tokens/s | decode: %zu tokens, %.1f tokens/s\n", r.prompt_tokens,
                r.prompt_tps, r.generated, r.decode_tps);
  });
}

}  // namespace lowbit::cli
