#include "tokenizer/hf_tokenizer_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include "core/error.h"
#include "core/file_util.h"
#include "io/gguf.h"
#include "tokenizer/gguf_pre_tokenizers.h"
#include "tokenizer/utf8.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

int32_t TypeOf(const VocabData& v, size_t id) { return v.token_types.empty() ? kTokenNormal : v.token_types[id]; }

std::string TokenOrNull(const VocabData& v, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? v.tokens[id] : std::string();
}

bool IsValidUtf8(std::string_view s) { return ToValidUtf8(s) == s; }

// Pieces a Hugging Face tokenizer can hold: non-empty, valid UTF-8 (JSON text), each once.
void CheckPieces(const VocabData& v) {
  std::unordered_set<std::string_view> seen;
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id].empty() || !IsValidUtf8(v.tokens[id]))
      Fail("{}: key 'tokenizer.ggml.tokens': token {} is {}; a Hugging Face tokenizer's pieces are non-empty UTF-8 text",
           v.source, id, v.tokens[id].empty() ? "empty" : "not valid UTF-8");
    else if (!seen.insert(v.tokens[id]).second)
      Fail("{}: key 'tokenizer.ggml.tokens': token {} ('{}') is listed twice; a Hugging Face tokenizer maps each piece "
           "to one id", v.source, id, v.tokens[id]);
}

// --- SentencePiece's ModelProto (sentencepiece_model.proto), written field by field -------------------

void Varint(std::string& out, uint64_t value) {
  do {
    const uint8_t low = value & 0x7F;
    value >>= 7;
    out.push_back(static_cast<char>(low | (value ? 0x80 : 0)));
  } while (value);
}
void Tag(std::string& out, uint32_t field, uint32_t wire) { Varint(out, (uint64_t{field} << 3) | wire); }
void IntField(std::string& out, uint32_t field, int64_t value) {  // int32 / enum / bool: negative as 10 bytes
  Tag(out, field, 0);
  Varint(out, static_cast<uint64_t>(value));
}
void BytesField(std::string& out, uint32_t field, std::string_view bytes) {
  Tag(out, field, 2);
  Varint(out, bytes.size());
  out.append(bytes);
}
void FloatField(std::string& out, uint32_t field, float value) {
  Tag(out, field, 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);  // little-endian, as the machine and the wire format are
  out.append(bytes, 4);
}

std::string SentencePieceModel(const VocabData& v) {
  size_t unknown = 0, bytes = 0;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    unknown += TypeOf(v, id) == kTokenUnknown;
    bytes += TypeOf(v, id) == kTokenByte;
  }
  if (unknown != 1)
    Fail("{}: key 'tokenizer.ggml.token_type': {} unknown tokens; a SentencePiece model has exactly one", v.source,
         unknown);
  if (bytes != 0 && bytes != 256)
    Fail("{}: key 'tokenizer.ggml.token_type': {} byte tokens; byte fallback needs all 256", v.source, bytes);
  std::string model;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& token = v.tokens[id];
    const int32_t type = TypeOf(v, id);
    const auto hex = [&](size_t i) { return std::isxdigit(static_cast<unsigned char>(token[i])) != 0; };
    if (type == kTokenByte && !(token.size() == 6 && token.starts_with("<0x") && hex(3) && hex(4) && token[5] == '>'))
      Fail("{}: key 'tokenizer.ggml.tokens': byte token {} is '{}', not <0xHH>", v.source, id, token);
    std::string piece;
    BytesField(piece, 1, token);
    FloatField(piece, 2, v.scores.empty() ? 0.0f : v.scores[id]);
    IntField(piece, 3, type >= kTokenNormal && type <= kTokenByte ? type : kTokenNormal);
    BytesField(model, 1, piece);
  }
  std::string trainer;
  IntField(trainer, 3, 2);  // model_type BPE: pieces merge by score, as llama.cpp's SPM tokenizer does
  IntField(trainer, 4, static_cast<int64_t>(v.tokens.size()));
  IntField(trainer, 35, bytes != 0);  // byte_fallback
  for (const auto& [id_field, piece_field, id] : {std::tuple{40, 45, v.unk_id}, std::tuple{41, 46, v.bos_id},
                                                  std::tuple{42, 47, v.eos_id}}) {
    IntField(trainer, id_field, id);
    if (const std::string piece = TokenOrNull(v, id); !piece.empty()) BytesField(trainer, piece_field, piece);
  }
  IntField(trainer, 43, -1);  // pad_id
  BytesField(model, 2, trainer);
  std::string normalizer;
  BytesField(normalizer, 1, "identity");
  IntField(normalizer, 3, v.add_space_prefix);  // add_dummy_prefix
  IntField(normalizer, 4, 0);                   // remove_extra_whitespaces: llama.cpp's SPM keeps them
  IntField(normalizer, 5, 1);                   // escape_whitespaces: spaces are U+2581
  BytesField(model, 3, normalizer);
  return model;
}

// --- tokenizer.json -----------------------------------------------------------------------------------

OrderedJson ByteLevel(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

OrderedJson PreTokenizer(const VocabData& v) {
  if (SplitsLikeGpt2(v.pre)) return ByteLevel(true);
  const GgufPreTokenizer* pre = FindGgufPreTokenizer(v.pre);
  if (pre == nullptr)
    Fail("{}: key 'tokenizer.ggml.pre': '{}' is not a pre-tokenizer lowbit knows ({})", v.source, v.pre,
         KnownGgufPreTokenizers(/*gpt2_names=*/true));
  if (pre->raw_utf8)
    Fail("{}: key 'tokenizer.ggml.pre': '{}' is a SentencePiece-style BPE (raw UTF-8 pieces), not written as a "
         "tokenizer.json here", v.source, v.pre);
  // Each regex splits the pieces the previous one left, keeping matches and the text between them:
  // a Split with behavior Isolated. Where llama.cpp rewrote the family's regex, the family's own.
  OrderedJson steps = OrderedJson::array();
  const auto split = [&](std::string_view regex) {
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", std::string(regex)}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  };
  if (!pre->hf_regex.empty()) split(pre->hf_regex);
  else
    for (const std::string_view regex : pre->regexes) split(regex);
  steps.push_back(ByteLevel(false));
  return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
}

std::string TokenizerJson(const VocabData& v) {
  const GgufPreTokenizer* pre = SplitsLikeGpt2(v.pre) ? nullptr : FindGgufPreTokenizer(v.pre);
  OrderedJson added = OrderedJson::array();
  // In id order, as the families' files list them; appended without ordered_map's linear key search
  // (the caller's CheckPieces made the pieces unique).
  OrderedJson vocab = OrderedJson::object();
  OrderedJson::object_t& pieces = vocab.get_ref<OrderedJson::object_t&>();
  pieces.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    pieces.emplace_back(v.tokens[id], id);
    const int32_t type = TypeOf(v, id);
    if (type != kTokenControl && type != kTokenUserDefined) continue;
    // Matched in the raw text (llama.cpp does not normalize around them); control tokens are special.
    added.push_back({{"id", id},
                     {"content", v.tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type == kTokenControl}});
  }
  OrderedJson post = ByteLevel(true);
  if (v.add_bos) {
    const std::string bos = TokenOrNull(v, v.bos_id);
    if (bos.empty()) Fail("{}: key 'tokenizer.ggml.add_bos_token' is true, but there is no BOS token", v.source);
    const auto special = [&](int type_id) {
      return OrderedJson{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
    };
    const auto sequence = [](const char* id, int type_id) {
      return OrderedJson{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
    };
    post = {{"type", "TemplateProcessing"},
            {"single", {special(0), sequence("A", 0)}},
            {"pair", {special(0), sequence("A", 0), special(1), sequence("B", 1)}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {v.bos_id}}, {"tokens", {bos}}}}}}};
  }
  OrderedJson merges = OrderedJson::array();
  for (size_t i = 0; i < v.merges.size(); ++i) {
    if (!IsValidUtf8(v.merges[i]))
      Fail("{}: key 'tokenizer.ggml.merges': merge {} is not valid UTF-8 text", v.source, i);
    merges.push_back(v.merges[i]);
  }
  const OrderedJson root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer", PreTokenizer(v)},
      {"post_processor", std::move(post)},
      {"decoder", ByteLevel(true)},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", pre != nullptr && pre->ignore_merges},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}}};
  return root.dump(2, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
}

OrderedJson TokenizerConfig(const VocabData& v, const std::string& chat_template) {
  const bool spm = v.model == "llama";
  OrderedJson config = {{"tokenizer_class", spm ? "LlamaTokenizer" : "PreTrainedTokenizerFast"},
                        {"add_bos_token", v.add_bos},
                        {"add_eos_token", false},
                        {"clean_up_tokenization_spaces", false}};
  for (const auto& [key, id] : {std::pair{"bos_token", v.bos_id}, std::pair{"eos_token", v.eos_id},
                                std::pair{"unk_token", v.unk_id}})
    if (const std::string token = TokenOrNull(v, id); !token.empty()) config[key] = token;
  if (spm) {
    // The modern reading of special tokens, and the dummy prefix the model was trained with.
    config["legacy"] = false;
    config["add_prefix_space"] = v.add_space_prefix;
  }
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  return config;
}

}  // namespace

void WriteHfTokenizerFiles(const VocabData& vocab, const std::string& chat_template, const fs::path& dir) {
  if (!IsValidUtf8(chat_template))
    Fail("{}: key 'tokenizer.chat_template' is not valid UTF-8 text", vocab.source);
  const bool spm = vocab.model == "llama";
  if (!spm && vocab.model != "gpt2")
    Fail("{}: key 'tokenizer.ggml.model': '{}' has no Hugging Face tokenizer lowbit writes (llama: tokenizer.model, "
         "gpt2: tokenizer.json)", vocab.source, vocab.model);
  CheckPieces(vocab);
  if (spm) WriteFileAtomic(dir / "tokenizer.model", SentencePieceModel(vocab));
  else WriteFileAtomic(dir / "tokenizer.json", TokenizerJson(vocab));
  WriteFileAtomic(dir / "tokenizer_config.json", TokenizerConfig(vocab, chat_template).dump(2) + "\n");
  OrderedJson generation = {{"_from_model_config", true}};
  if (vocab.bos_id >= 0) generation["bos_token_id"] = vocab.bos_id;
  if (vocab.eos_id >= 0) generation["eos_token_id"] = vocab.eos_id;
  WriteFileAtomic(dir / "generation_config.json", generation.dump(2) + "\n");
}

bool WriteHfTokenizerFiles(const GgufFile& file, const fs::path& dir) {
  if (!file.Find("tokenizer.ggml.model")) return false;
  const GgufValue* chat = file.Find("tokenizer.chat_template");
  WriteHfTokenizerFiles(ReadGgufVocab(file), chat ? file.GetString("tokenizer.chat_template") : "", dir);
  return true;
}

}  // namespace lowbit
