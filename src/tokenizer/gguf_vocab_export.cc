#include "tokenizer/gguf_vocab_export.h"

#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"
#include "core/file_util.h"
#include "tokenizer/gguf_pre_tokenizers.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace lowbit {
namespace {

// tokenizer_config.json's add_bos_token / add_eos_token, when the folder has one.
void AddSpecialFlags(const std::filesystem::path& folder, std::vector<GgufKeyValue>& kvs) {
  const std::filesystem::path path = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return;
  const nlohmann::json parsed = ReadJsonFile(path);
  const JsonView j = JsonView(parsed, path.string()).ExpectObject();
  for (const char* key : {"add_bos_token", "add_eos_token"})
    if (j.Has(key)) kvs.push_back({std::string("tokenizer.ggml.") + key, j.Get<bool>(key)});
}

std::vector<GgufKeyValue> FromSentencePiece(const std::filesystem::path& file, const ModelConfig& c) {
  sentencepiece::SentencePieceProcessor sp;
  if (const auto status = sp.Load(file.string()); !status.ok())
    Fail("{}: cannot load SentencePiece model: {}", file.string(), status.ToString());
  const int n = sp.GetPieceSize();
  if (static_cast<uint32_t>(n) > c.vocab_size)
    Fail("{}: {} tokens, more than the model's vocab_size {}", file.string(), n, c.vocab_size);
  std::vector<std::string> tokens(c.vocab_size);
  std::vector<float> scores(c.vocab_size, -10000.0f);
  std::vector<int32_t> types(c.vocab_size, kTokenUnused);
  for (uint32_t id = 0; id < c.vocab_size; ++id) tokens[id] = "[PAD" + std::to_string(id) + "]";
  for (int id = 0; id < n; ++id) {
    tokens[id] = sp.IdToPiece(id);
    scores[id] = sp.GetScore(id);
    types[id] = SentencePieceTokenType(sp, id);
  }
  std::vector<GgufKeyValue> kvs;
  kvs.push_back({"tokenizer.ggml.model", std::string("llama")});
  kvs.push_back({"tokenizer.ggml.pre", std::string("default")});
  kvs.push_back({"tokenizer.ggml.tokens", GgufArray{std::move(tokens)}});
  kvs.push_back({"tokenizer.ggml.scores", GgufArray{std::move(scores)}});
  kvs.push_back({"tokenizer.ggml.token_type", GgufArray{std::move(types)}});
  kvs.push_back({"tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_id)});
  kvs.push_back({"tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_id)});
  if (sp.unk_id() >= 0) kvs.push_back({"tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(sp.unk_id())});
  if (sp.pad_id() >= 0) kvs.push_back({"tokenizer.ggml.padding_token_id", static_cast<uint32_t>(sp.pad_id())});
  AddSpecialFlags(file.parent_path(), kvs);
  return kvs;
}

// The llama.cpp name of a tokenizer.json pre_tokenizer: ByteLevel alone (GPT-2's regex), or a
// Split by one known family regex followed by ByteLevel without its own regex.
std::string PreNameOf(const JsonView& pre) {
  const auto byte_level = [](const JsonView& step, bool with_regex) {
    return step.Get<std::string>("type") == "ByteLevel" && step.Get<bool>("use_regex", true) == with_regex &&
           !step.Get<bool>("add_prefix_space", true);
  };
  if (!pre.is_null()) {
    pre.ExpectObject();
    if (byte_level(pre, true)) return "gpt-2";
    if (pre.Get<std::string>("type") == "Sequence") {
      const std::vector<JsonView> steps = pre["pretokenizers"].Items();
      if (steps.size() == 2 && steps[0].Get<std::string>("type") == "Split" && steps[0]["pattern"].Has("Regex") &&
          byte_level(steps[1], false)) {
        const std::string regex = steps[0]["pattern"].Get<std::string>("Regex");
        if (const std::string_view name = GgufPreNameOfRegex(regex); !name.empty()) return std::string(name);
      }
    }
  }
  pre.Fail(fmt::format("this pre-tokenizer has no llama.cpp name lowbit knows (GPT-2's ByteLevel, or a Split by "
                       "the regex of: {}); llama.cpp could not tokenize like it",
                       KnownGgufPreTokenizers()));
}

std::vector<GgufKeyValue> FromTokenizerJson(const std::filesystem::path& file, const ModelConfig& c) {
  const HfTokenizer tokenizer(file);  // validates the whole file first
  const nlohmann::json parsed = ReadJsonFile(file);
  const JsonView root(parsed, file.string());
  const JsonView decoder = root["decoder"];
  if (decoder.is_null() || decoder.Get<std::string>("type") != "ByteLevel")
    decoder.Fail("only byte-level BPE tokenizer.json files (decoder ByteLevel) become a GGUF vocabulary here; for a "
                 "SentencePiece-style one, pass --tokenizer with its tokenizer.model");
  static const nlohmann::json kNull;
  const std::string pre = PreNameOf(root.Has("pre_tokenizer") ? root["pre_tokenizer"] : JsonView(kNull, file.string(), "pre_tokenizer"));
  if (static_cast<uint32_t>(tokenizer.vocab_size()) > c.vocab_size)
    Fail("{}: {} tokens, more than the model's vocab_size {}", file.string(), tokenizer.vocab_size(), c.vocab_size);

  std::vector<std::string> tokens(c.vocab_size);
  std::vector<int32_t> types(c.vocab_size, kTokenUnused);
  for (uint32_t id = 0; id < c.vocab_size; ++id) tokens[id] = "[PAD" + std::to_string(id) + "]";
  for (const auto& [token, id] : parsed["model"]["vocab"].items()) {
    tokens[id.get<uint32_t>()] = token;
    types[id.get<uint32_t>()] = kTokenNormal;
  }
  for (const JsonView& added : root["added_tokens"].Items()) {
    const auto id = added.Get<uint32_t>("id");
    tokens[id] = added.Get<std::string>("content");
    types[id] = added.Get<bool>("special", false) ? kTokenControl : kTokenUserDefined;
  }
  std::vector<std::string> merges;
  for (const nlohmann::json& merge : parsed["model"]["merges"])
    merges.push_back(merge.is_string() ? merge.get<std::string>()
                                       : merge[0].get<std::string>() + " " + merge[1].get<std::string>());

  std::vector<GgufKeyValue> kvs;
  kvs.push_back({"tokenizer.ggml.model", std::string("gpt2")});
  kvs.push_back({"tokenizer.ggml.pre", pre});
  kvs.push_back({"tokenizer.ggml.tokens", GgufArray{std::move(tokens)}});
  kvs.push_back({"tokenizer.ggml.token_type", GgufArray{std::move(types)}});
  kvs.push_back({"tokenizer.ggml.merges", GgufArray{std::move(merges)}});
  const int32_t bos = tokenizer.bos_id() >= 0 ? tokenizer.bos_id() : c.bos_id;
  const int32_t eos = tokenizer.eos_id() >= 0 ? tokenizer.eos_id() : c.eos_id;
  if (bos >= 0 && static_cast<uint32_t>(bos) < c.vocab_size)
    kvs.push_back({"tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos)});
  if (eos >= 0 && static_cast<uint32_t>(eos) < c.vocab_size)
    kvs.push_back({"tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos)});
  kvs.push_back({"tokenizer.ggml.add_bos_token", tokenizer.adds_bos()});
  return kvs;
}

std::vector<GgufKeyValue> FromGguf(const std::filesystem::path& file, const ModelConfig& c) {
  const GgufFile f = GgufFile::Open(file);
  std::vector<GgufKeyValue> kvs;
  for (const GgufKeyValue& kv : f.metadata())
    if (kv.key.starts_with("tokenizer.")) kvs.push_back(kv);
  if (kvs.empty()) Fail("{}: no tokenizer.* keys to copy", file.string());
  if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens"); tokens && f.GetArray("tokenizer.ggml.tokens").size() != c.vocab_size)
    Fail("{}: key 'tokenizer.ggml.tokens' has {} entries, the model has {} rows", file.string(),
         f.GetArray("tokenizer.ggml.tokens").size(), c.vocab_size);
  return kvs;
}

}  // namespace

std::filesystem::path GgufVocabularyFile(const std::filesystem::path& tokenizer) {
  namespace fs = std::filesystem;
  if (fs::is_directory(tokenizer)) {
    for (const char* name : {"tokenizer.model", "tokenizer.json"})
      if (fs::exists(tokenizer / name)) return tokenizer / name;
    Fail("{}: no tokenizer.model or tokenizer.json in this folder (pass --tokenizer)", tokenizer.string());
  }
  if (!fs::exists(tokenizer)) Fail("{}: no such file or folder", tokenizer.string());
  if (tokenizer.extension() == ".bin")
    Fail("{}: llama2.c checkpoints carry no tokenizer; pass --tokenizer with a tokenizer.model", tokenizer.string());
  return tokenizer;
}

std::vector<GgufKeyValue> GgufVocabularyFor(const std::filesystem::path& tokenizer, const ModelConfig& config) {
  const std::filesystem::path file = GgufVocabularyFile(tokenizer);
  if (file.extension() == ".gguf") return FromGguf(file, config);
  if (file.extension() == ".json") return FromTokenizerJson(file, config);
  return FromSentencePiece(file, config);
}

}  // namespace lowbit
