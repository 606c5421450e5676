// `lowbit tokenize`: the ids (and pieces) a model's tokenizer gives for a text.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output.h"
#include "pipeline/session.h"
#include "core/error.h"
#include "core/file_util.h"
#include "io/gguf.h"
#include "tokenizer/hf_tokenizer_export.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {

void AddTokenizeCommand(CLI::App& app) {
  struct Options {
    std::string model, text, file, system, save_hf;
    bool json = false, no_bos = false, chat = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("tokenize", "Token ids of a text under a model's tokenizer");
  cmd->add_option("--model", o->model, "Model folder, tokenizer.model, or GGUF file (vocabulary-only files too)")
      ->required();
  auto* text = cmd->add_option("--text", o->text, "Text to tokenize");
  auto* file = cmd->add_option("--file", o->file, "File to tokenize");
  text->excludes(file);
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
  cmd->add_flag("--chat", o->chat,
                "Tokenize the text as a user message under the model's chat template, the assistant's turn opened "
                "(the template's special tokens only; no BOS is added)");
  cmd->add_option("--system", o->system, "With --chat: a system message first");
  cmd->add_option("--save-hf", o->save_hf,
                  "GGUF file: write its vocabulary as Hugging Face tokenizer files into this folder (tokenizer.model "
                  "or tokenizer.json, tokenizer_config.json with its chat template, generation_config.json)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    if (!o->save_hf.empty()) {
      if (std::filesystem::path(o->model).extension() != ".gguf")
        Fail("tokenize: --save-hf writes a GGUF file's vocabulary; {} is not a .gguf file", o->model);
      std::filesystem::create_directories(o->save_hf);
      if (!WriteHfTokenizerFiles(GgufFile::Open(o->model), o->save_hf))
        Fail("{}: no vocabulary (tokenizer.ggml.model) to write", o->model);
      std::printf("Wrote the tokenizer of %s to %s\n", o->model.c_str(), o->save_hf.c_str());
      if (o->text.empty() && o->file.empty()) return;
    }
    if (o->text.empty() && o->file.empty()) Fail("tokenize: give --text or --file");
    if (!o->system.empty() && !o->chat) Fail("tokenize: --system needs --chat");
    const auto tokenizer = LoadTokenizer(o->model);
    const std::string text = o->file.empty() ? o->text : ReadTextFile(o->file);
    const std::string input = o->chat ? ChatPrompt(o->model, o->system, text) : text;
    const std::vector<int32_t> ids = o->chat ? tokenizer->EncodeWithSpecialTokens(input) : tokenizer->Encode(input, !o->no_bos);
    if (o->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (const int32_t id : ids) pieces.push_back(tokenizer->Piece(id));
      nlohmann::json out = {{"ids", ids}, {"pieces", pieces}};
      if (o->chat) out["prompt"] = input;
      std::puts(out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < ids.size(); ++i)
      rows.push_back({std::to_string(i), std::to_string(ids[i]), fmt::format("'{}'", tokenizer->Piece(ids[i]))});
    PrintTable({"#", "id", "piece"}, rows);
    std::printf("\n%zu tokens\n", ids.size());
  });
}

}  // namespace lowbit::cli
