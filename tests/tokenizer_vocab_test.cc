// GGUF vocabulary tokenizers: llama.cpp's own conformance data (test-tokenizer-0's .inp/.out pairs
// for the llama-spm and gpt-2 vocabularies, every case), llama.cpp's ids under every
// tokenizer.ggml.pre name lowbit reads (a fixture made by llama.cpp), decode round trips, the GPT-2
// pre-tokenizer split, and small in-memory vocabularies for the rules the real files do not reach
// (byte fallback, score order, user-defined tokens, error messages).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/config.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/gguf_pre_tokenizers.h"
#include "tokenizer/gguf_vocab_export.h"
#include "tokenizer/hf_tokenizer_export.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/vocab.h"
#include "test_util.h"

namespace lowbit {
namespace {

using testing_util::ExpectError;

namespace fs = std::filesystem;

const fs::path kVocabDir = LOWBIT_SOURCE_DIR "/../shared/tokenizers/ggml-vocab";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads the pair the way llama.cpp's tests/test-tokenizer-0.cpp does: inputs are separated by
// "\n__ggml_vocab_test__\n" (so a case's own trailing newline is part of the separator), outputs
// are one line of space-separated ids per case, surrounding white space ignored.
std::vector<Case> ReadCases(const fs::path& gguf) {
  const std::string inp = ReadAll(gguf.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    const size_t len = next == std::string::npos ? std::string::npos : next - pos;
    cases.push_back({inp.substr(pos, len), {}});
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::ifstream out(gguf.string() + ".out");
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    if (i >= cases.size()) throw std::runtime_error("more .out lines than .inp cases");
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
  }
  if (i != cases.size()) throw std::runtime_error(".inp and .out hold different case counts");
  return cases;
}

// Shows control and non-ASCII bytes so a failing case is readable in a terminal.
std::string Escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (b < 0x20 || b >= 0x7F) out += fmt::format("\\x{:02x}", b);
    else out += c;
  }
  return out;
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

std::unique_ptr<Tokenizer> LoadGguf(const fs::path& path) {
  return MakeGgufTokenizer(ReadGgufVocab(GgufFile::Open(path)));
}

// Encodes every case of llama.cpp's vocabulary `name` without BOS with `tokenizer`; reports the first
// mismatch in full and the pass count.
void ExpectLlamaCppIds(const std::string& name, const std::unique_ptr<Tokenizer>& tokenizer) {
  const fs::path path = kVocabDir / name;
  const std::vector<Case> cases = ReadCases(path);
  ASSERT_GT(cases.size(), 40u);
  size_t passed = 0;
  bool reported = false;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = tokenizer->Encode(cases[i].text, false);
    if (got == cases[i].ids) {
      ++passed;
    } else if (!reported) {
      reported = true;
      ADD_FAILURE() << name << " case " << i << " \"" << Escape(cases[i].text) << "\"\n  expected: "
                    << Join(cases[i].ids) << "\n  got:      " << Join(got);
    }
  }
  std::cout << name << ": " << passed << "/" << cases.size() << " cases match llama.cpp\n";
  EXPECT_EQ(passed, cases.size());
}

void RunConformance(const std::string& name) {
  const fs::path path = kVocabDir / name;
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not available";
  ExpectLlamaCppIds(name, LoadGguf(path));
}

// The Hugging Face files written for a GGUF vocabulary (hf_tokenizer_export.h), loaded back as a model
// folder's tokenizer: tokenizer.model through SentencePiece, tokenizer.json through lowbit's reader.
std::unique_ptr<Tokenizer> HfFilesOf(const VocabData& vocab, const fs::path& dir) {
  fs::create_directories(dir);
  WriteHfTokenizerFiles(vocab, "", dir);
  return LoadTokenizer(dir);
}

TEST(GgufVocab, LlamaSpmMatchesLlamaCpp) { RunConformance("ggml-vocab-llama-spm.gguf"); }
TEST(GgufVocab, Gpt2MatchesLlamaCpp) { RunConformance("ggml-vocab-gpt-2.gguf"); }
// The pre-tokenizers run as regex lists.
TEST(GgufVocab, DeepseekLlmMatchesLlamaCpp) { RunConformance("ggml-vocab-deepseek-llm.gguf"); }
TEST(GgufVocab, FalconMatchesLlamaCpp) { RunConformance("ggml-vocab-falcon.gguf"); }
TEST(GgufVocab, StarcoderMatchesLlamaCpp) { RunConformance("ggml-vocab-starcoder.gguf"); }
TEST(GgufVocab, RefactMatchesLlamaCpp) { RunConformance("ggml-vocab-refact.gguf"); }
TEST(GgufVocab, MptMatchesLlamaCpp) { RunConformance("ggml-vocab-mpt.gguf"); }

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A gpt2-model GGUF vocabulary from a SentencePiece-style tokenizer.json, as Gemma 4's GGUF files
// hold one (and as tests/interop/gguf_pre_tokenizers.py writes it for llama.cpp): added tokens
// control (special) or user-defined, "<0xAB>" pieces byte tokens, the rest normal; the merges.
void WriteSentencePieceStyleVocab(const nlohmann::json& tokenizer_json, const std::string& pre, const fs::path& out) {
  std::vector<std::string> tokens(tokenizer_json["model"]["vocab"].size());
  for (const auto& [piece, id] : tokenizer_json["model"]["vocab"].items()) tokens.at(id.get<size_t>()) = piece;
  std::vector<int32_t> types(tokens.size(), kTokenNormal);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].size() == 6 && tokens[i].starts_with("<0x") && tokens[i].ends_with(">")) types[i] = kTokenByte;
  for (const nlohmann::json& added : tokenizer_json["added_tokens"]) {
    const auto id = added["id"].get<size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, kTokenNormal);
    tokens[id] = added["content"].get<std::string>();
    types[id] = added["special"].get<bool>() ? kTokenControl : kTokenUserDefined;
  }
  std::vector<std::string> merges;
  for (const nlohmann::json& m : tokenizer_json["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  GgufWriter w(out);
  w.Set("general.architecture", std::string("gpt2"));
  w.Set("tokenizer.ggml.model", std::string("gpt2"));
  w.Set("tokenizer.ggml.pre", pre);
  w.Set("tokenizer.ggml.tokens", GgufArray{std::move(tokens)});
  w.Set("tokenizer.ggml.token_type", GgufArray{std::move(types)});
  w.Set("tokenizer.ggml.merges", GgufArray{std::move(merges)});
  w.Set("tokenizer.ggml.bos_token_id", uint32_t{1});
  w.Set("tokenizer.ggml.eos_token_id", uint32_t{2});
  w.Commit();
}

// Every tokenizer.ggml.pre name lowbit reads, on llama.cpp's GPT-2 test vocabulary written again
// under that name: llama.cpp's own ids, with its add-BOS default for the name (the file has no
// add_bos_token), from tests/data/gguf_pre_tokenizer_cases.json (tests/interop/gguf_pre_tokenizers.py
// regenerates it with the pinned llama.cpp). The names lowbit cannot split are refused by name.
TEST(GgufVocab, EveryPreTokenizerNameMatchesLlamaCpp) {
  const nlohmann::json fixture = ReadJson(LOWBIT_SOURCE_DIR "/tests/data/gguf_pre_tokenizer_cases.json");
  if (!fs::exists(kVocabDir / fixture["vocab"].get<std::string>())) GTEST_SKIP() << kVocabDir << " is not available";
  const GgufFile original = GgufFile::Open(kVocabDir / fixture["vocab"].get<std::string>());
  const testing_util::ScratchDir dir("lowbit-gguf-pre");
  const auto vocab_named = [&](const std::string& pre) {
    const fs::path path = dir.path() / (pre + ".gguf");
    GgufWriter writer(path);
    for (const GgufKeyValue& kv : original.metadata())
      writer.Set(kv.key, kv.key == "tokenizer.ggml.pre" ? GgufValue(pre) : kv.value);
    writer.Commit();
    return ReadGgufVocab(GgufFile::Open(path));
  };
  const auto strings = fixture["strings"].get<std::vector<std::string>>();
  size_t names = 0, with_bos = 0;
  for (const nlohmann::json& group : fixture["cases"]) {
    const auto ids = group["ids"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(ids.size(), strings.size());
    for (const std::string pre : group["names"]) {
      const VocabData vocab = vocab_named(pre);
      const auto tokenizer = MakeGgufTokenizer(vocab);
      for (size_t i = 0; i < strings.size(); ++i)
        EXPECT_EQ(tokenizer->Encode(strings[i], true), ids[i]) << pre << " string " << i << ": " << Escape(strings[i]);
      ++names;
      with_bos += vocab.add_bos;
    }
  }
  EXPECT_GE(names, 70u);
  EXPECT_GE(with_bos, 10u);  // Llama-3's, Tekken's and Chameleon's names put BOS first
  for (const std::string pre : fixture["refused"]) {
    const std::string quoted = "'" + pre + "'";
    ExpectError([&] { MakeGgufTokenizer(vocab_named(pre)); }, {quoted, "tokenizer.ggml.pre"});
  }

  // Gemma 4's SentencePiece-style BPE, on the gpt2-model vocabulary the script builds from a
  // SentencePiece-style tokenizer.json: U+2581 pieces, <0xAB> byte tokens, merges.
  const nlohmann::json& spm = fixture["sentencepiece_style"];
  const nlohmann::json source = ReadJson(kVocabDir.parent_path() / spm["source"].get<std::string>());
  for (const nlohmann::json& group : spm["cases"]) {
    const auto ids = group["ids"].get<std::vector<std::vector<int32_t>>>();
    for (const std::string pre : group["names"]) {
      const fs::path path = dir.path() / (pre + "-spm.gguf");
      WriteSentencePieceStyleVocab(source, pre, path);
      const auto tokenizer = LoadGguf(path);
      for (size_t i = 0; i < strings.size(); ++i) {
        const std::vector<int32_t> got = tokenizer->Encode(strings[i], true);
        EXPECT_EQ(got, ids[i]) << pre << " string " << i << ": " << Escape(strings[i]);
        // Decoding gives the text back where every byte had a token (llama.cpp drops the others).
        if (got == ids[i] && strings[i].find('<') == std::string::npos) {
          EXPECT_EQ(tokenizer->Decode(got), strings[i]) << pre << " string " << i;
        }
      }
      ++names;
    }
  }
  EXPECT_GE(names, 74u);
}

// GGUF -> Hugging Face: llama.cpp's own test vectors, tokenized by the files written from its vocabularies
// (a SentencePiece tokenizer.model from the llama-spm vocabulary, tokenizer.json from the byte-level ones).
// llama.cpp clears the default BOS of the GLM names (chatglm-bpe, glm4, glm5): a vocabulary without its own
// bos_token_id has none, where gpt-2's name keeps the gpt2 model's default (11); the file's own id stands in both.
TEST(GgufVocab, GlmNamesHaveNoDefaultBos) {
  const fs::path source = kVocabDir / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(source)) GTEST_SKIP() << source << " is not available";
  const GgufFile original = GgufFile::Open(source);
  const testing_util::ScratchDir dir("lowbit-gguf-glm-bos");
  const auto vocab = [&](const std::string& pre, bool own_bos) {
    const fs::path path = dir.path() / fmt::format("{}-{}.gguf", pre, own_bos);
    GgufWriter writer(path);
    for (const GgufKeyValue& kv : original.metadata())
      if (kv.key != "tokenizer.ggml.bos_token_id")
        writer.Set(kv.key, kv.key == "tokenizer.ggml.pre" ? GgufValue(pre) : kv.value);
    if (own_bos) writer.Set("tokenizer.ggml.bos_token_id", uint32_t{7});
    writer.Commit();
    return ReadGgufVocab(GgufFile::Open(path));
  };
  for (const char* pre : {"chatglm-bpe", "glm4", "glm5"}) {
    EXPECT_EQ(vocab(pre, false).bos_id, -1) << pre;
    EXPECT_EQ(vocab(pre, true).bos_id, 7) << pre;
  }
  EXPECT_EQ(vocab("gpt-2", false).bos_id, 11);
}

TEST(HfTokenizerExport, FilesWrittenFromLlamaCppVocabulariesTokenizeAsLlamaCpp) {
  const testing_util::ScratchDir dir("lowbit-hf-export");
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf",
                           "ggml-vocab-falcon.gguf", "ggml-vocab-starcoder.gguf", "ggml-vocab-refact.gguf",
                           "ggml-vocab-mpt.gguf"}) {
    if (!fs::exists(kVocabDir / name)) GTEST_SKIP() << kVocabDir << " is not available";
    SCOPED_TRACE(name);
    const VocabData vocab = ReadGgufVocab(GgufFile::Open(kVocabDir / name));
    const auto tokenizer = HfFilesOf(vocab, dir.path() / name);
    EXPECT_TRUE(fs::exists(dir.path() / name / (vocab.model == "llama" ? "tokenizer.model" : "tokenizer.json")));
    ExpectLlamaCppIds(name, tokenizer);
    EXPECT_EQ(tokenizer->bos_id(), vocab.bos_id);
    EXPECT_EQ(tokenizer->eos_id(), vocab.eos_id);
    EXPECT_EQ(tokenizer->Encode("Hello", true).front() == vocab.bos_id, vocab.add_bos);
    const nlohmann::json config = ReadJson(dir.path() / name / "tokenizer_config.json");
    EXPECT_EQ(config["add_bos_token"], vocab.add_bos);
    EXPECT_EQ(ReadJson(dir.path() / name / "generation_config.json")["eos_token_id"], vocab.eos_id);
  }
}

// Every tokenizer.ggml.pre name as a tokenizer.json (its regexes as Split steps), on llama.cpp's ids for
// that name (the fixture of EveryPreTokenizerNameMatchesLlamaCpp), BOS where llama.cpp adds it.
TEST(HfTokenizerExport, EveryPreTokenizerNameBecomesATokenizerJsonThatSplitsAlike) {
  const nlohmann::json fixture = ReadJson(LOWBIT_SOURCE_DIR "/tests/data/gguf_pre_tokenizer_cases.json");
  if (!fs::exists(kVocabDir / fixture["vocab"].get<std::string>())) GTEST_SKIP() << kVocabDir << " is not available";
  VocabData vocab = ReadGgufVocab(GgufFile::Open(kVocabDir / fixture["vocab"].get<std::string>()));
  const testing_util::ScratchDir dir("lowbit-hf-export-pre");
  const auto strings = fixture["strings"].get<std::vector<std::string>>();
  // Names of one table entry write the same file: the first of each. The strings that hold a control
  // token's text differ by design: transformers reads it as the token, llama.cpp (parse_special off, as
  // the fixture was made) as text; there, the files give what llama.cpp gives with parse_special on.
  std::set<std::pair<const GgufPreTokenizer*, bool>> written;
  size_t entries = 0, with_specials = 0;
  for (const nlohmann::json& group : fixture["cases"]) {
    const auto ids = group["ids"].get<std::vector<std::vector<int32_t>>>();
    for (const std::string pre : group["names"]) {
      vocab.pre = pre;
      const GgufPreTokenizer* entry = FindGgufPreTokenizer(pre);
      vocab.add_bos = entry != nullptr && entry->add_bos;
      if (!written.insert({entry, vocab.add_bos}).second) continue;
      const auto tokenizer = HfFilesOf(vocab, dir.path() / pre);
      const auto gguf = MakeGgufTokenizer(vocab);
      for (size_t i = 0; i < strings.size(); ++i) {
        std::vector<int32_t> expected = ids[i];
        if (strings[i].find("<|endoftext|>") != std::string::npos) {
          expected = gguf->EncodeWithSpecialTokens(strings[i]);
          if (vocab.add_bos) expected.insert(expected.begin(), vocab.bos_id);
          ++with_specials;
        }
        EXPECT_EQ(tokenizer->Encode(strings[i], true), expected)
            << pre << " string " << i << ": " << Escape(strings[i]);
      }
      ++entries;
    }
  }
  EXPECT_GE(entries, 14u);
  EXPECT_GE(with_specials, 14u);
  vocab.pre = "no-such-pre";
  ExpectError([&] { HfFilesOf(vocab, dir.path() / "unknown"); }, {"tokenizer.ggml.pre", "'no-such-pre'"});
  vocab.pre = "gpt-2";
  vocab.tokens[7] = vocab.tokens[8];
  ExpectError([&] { HfFilesOf(vocab, dir.path() / "twice"); }, {"tokenizer.ggml.tokens", "token 8", "listed twice"});
  vocab.tokens[7] = "";
  ExpectError([&] { HfFilesOf(vocab, dir.path() / "empty"); }, {"tokenizer.ggml.tokens", "token 7 is empty"});
  vocab.tokens[7] = "\xff";
  ExpectError([&] { HfFilesOf(vocab, dir.path() / "utf8"); }, {"tokenizer.ggml.tokens", "token 7 is not valid UTF-8"});
  vocab.model = "t5";
  ExpectError([&] { HfFilesOf(vocab, dir.path() / "t5"); }, {"tokenizer.ggml.model", "'t5'"});
  // SentencePiece refuses what it cannot load, by token: byte pieces must read <0xHH>.
  VocabData spm = ReadGgufVocab(GgufFile::Open(kVocabDir / "ggml-vocab-llama-spm.gguf"));
  spm.tokens[3] = "<0xZZ>";
  ExpectError([&] { HfFilesOf(spm, dir.path() / "byte"); }, {"tokenizer.ggml.tokens", "byte token 3", "<0xZZ>"});
}

// A rendered chat template holds its special tokens as text: with parse_special (llama.cpp's, used
// by --chat) control tokens become their ids; plain Encode keeps reading them as text.
TEST(GgufVocab, SpecialTokensInTextBecomeIdsOnlyWhenAsked) {
  const fs::path spm = kVocabDir / "ggml-vocab-llama-spm.gguf", gpt2 = kVocabDir / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(spm) || !fs::exists(gpt2)) GTEST_SKIP() << kVocabDir << " is not available";
  const auto llama = LoadGguf(spm);
  const std::vector<int32_t> special = llama->EncodeWithSpecialTokens("<s>[INST] Hi [/INST]</s>");
  EXPECT_EQ(special.front(), 1);
  EXPECT_EQ(special.back(), 2);
  const std::vector<int32_t> plain = llama->Encode("<s>[INST] Hi [/INST]</s>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1) + std::count(plain.begin(), plain.end(), 2), 0);
  // Text after a special token gets the dummy-prefix space, as in llama.cpp.
  EXPECT_EQ(std::vector<int32_t>(special.begin() + 1, special.end() - 1), llama->Encode("[INST] Hi [/INST]", false));
  const auto bpe = LoadGguf(gpt2);
  EXPECT_EQ(bpe->EncodeWithSpecialTokens("a<|endoftext|>b"),
            (std::vector<int32_t>{bpe->Encode("a", false)[0], 50256, bpe->Encode("b", false)[0]}));
  EXPECT_GT(bpe->Encode("a<|endoftext|>b", false).size(), 3u);
}

// A tokenizer.model reads special tokens in text as llama.cpp reads them in the GGUF its converter
// makes of the same model (lowbit's own GgufVocabularyFor writes that vocabulary): Llama-2's <s> / </s>,
// Mistral v3's control tokens [INST] / [/INST] / [TOOL_CALLS], text around and between them; plain Encode
// keeps reading them as text.
TEST(SentencePieceModel, SpecialTokensInTextMatchTheGgufOfTheSameModel) {
  const fs::path shared = LOWBIT_SOURCE_DIR "/../shared/tokenizers";
  const std::vector<std::string> texts = {
      "<s>[INST] Hi there [/INST] Hello!</s>",  "<s>[INST]Hi[/INST]", "[INST]  two  spaces [/INST]</s>",
      "<s><s> x</s></s>", " leading<s>", "[TOOL_CALLS][{\"name\": \"f\"}]</s>", "no specials at all", "<unk>a<s>",
      "[INST]\n\tnewline[/INST]", "\xe2\x96\x81 mark <s>"};
  for (const fs::path& model : {shared / "llama2" / "tokenizer.model", shared / "hf" / "mistral-v0.3" / "tokenizer.model.v3"}) {
    if (!fs::exists(model)) GTEST_SKIP() << model << " is not available";
    SCOPED_TRACE(model.string());
    const auto sp = LoadTokenizer(model);
    ModelConfig c;
    c.vocab_size = static_cast<uint32_t>(sp->vocab_size());
    c.bos_id = sp->bos_id();
    c.eos_id = sp->eos_id();
    const fs::path gguf = fs::temp_directory_path() / ("lowbit-sp-special-" + std::to_string(::getpid()) + ".gguf");
    {
      GgufWriter writer(gguf);
      for (GgufKeyValue& kv : GgufVocabularyFor(model, c)) writer.Set(std::move(kv.key), std::move(kv.value));
      writer.Commit();
    }
    const auto llama = LoadTokenizer(gguf);
    fs::remove(gguf);
    size_t specials = 0;
    for (const std::string& text : texts) {
      const std::vector<int32_t> ids = sp->EncodeWithSpecialTokens(text);
      EXPECT_EQ(ids, llama->EncodeWithSpecialTokens(text)) << text;
      specials += std::count(ids.begin(), ids.end(), sp->bos_id());
    }
    EXPECT_GE(specials, 6u);
    EXPECT_EQ(sp->Encode("<s>", false), llama->Encode("<s>", false));  // text, not BOS
    EXPECT_NE(sp->Encode("<s>", false), std::vector<int32_t>{sp->bos_id()});
  }
}

TEST(GgufVocab, ReadsLlamaSpmKeysAndDefaults) {
  const fs::path path = kVocabDir / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not available";
  const VocabData vocab = ReadGgufVocab(GgufFile::Open(path));
  EXPECT_EQ(vocab.model, "llama");
  EXPECT_EQ(vocab.pre, "default");
  ASSERT_EQ(vocab.tokens.size(), 32000u);
  EXPECT_EQ(vocab.scores.size(), 32000u);
  EXPECT_EQ(vocab.token_types[0], kTokenUnknown);
  EXPECT_EQ(vocab.token_types[3], kTokenByte);
  EXPECT_EQ(vocab.bos_id, 1);
  EXPECT_EQ(vocab.eos_id, 2);
  EXPECT_EQ(vocab.unk_id, 0);
  EXPECT_TRUE(vocab.add_space_prefix);  // absent from the file: llama.cpp's SPM default
  EXPECT_TRUE(vocab.add_bos);
  const auto tokenizer = MakeGgufTokenizer(vocab);
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  EXPECT_EQ(tokenizer->Piece(3), "<0x00>");
  EXPECT_EQ(tokenizer->Encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
}

// Decode(Encode(s)) gives s back: the encoder adds one space in front and DecodeToken drops one
// space from the first token (at the start of the stream or right after BOS).
TEST(GgufVocab, LlamaSpmDecodeRoundTrips) {
  const fs::path path = kVocabDir / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not available";
  const auto tokenizer = LoadGguf(path);
  size_t ascii = 0;
  for (const Case& c : ReadCases(path)) {
    if (std::any_of(c.text.begin(), c.text.end(), [](char ch) { return ch & 0x80; })) continue;
    ++ascii;
    EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(c.text, false)), c.text) << Escape(c.text);
    EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(c.text, true)), c.text) << Escape(c.text);
  }
  EXPECT_GT(ascii, 30u);
  // Byte-fallback tokens decode to their bytes, which reassemble the UTF-8 text.
  const std::string llama = " this is \xF0\x9F\xA6\x99.cpp";
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(llama, false)), llama);
  EXPECT_EQ(tokenizer->DecodeToken(29871, -1), "");    // the lone dummy-prefix space
  EXPECT_EQ(tokenizer->DecodeToken(29871, 15043), " ");
  EXPECT_EQ(tokenizer->DecodeToken(1, -1), "");        // <s> is a control token
  EXPECT_EQ(tokenizer->DecodeToken(13, 15043), "\n");  // <0x0A>
}

// Byte-level BPE loses nothing, so every valid UTF-8 case decodes back exactly.
TEST(GgufVocab, Gpt2DecodeRoundTrips) {
  const fs::path path = kVocabDir / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not available";
  const auto tokenizer = LoadGguf(path);
  for (const Case& c : ReadCases(path))
    EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(c.text, false)), c.text) << Escape(c.text);
  EXPECT_EQ(tokenizer->bos_id(), 50256);
  EXPECT_EQ(tokenizer->DecodeToken(50256, -1), "");  // <|endoftext|> is a control token
  EXPECT_EQ(tokenizer->Piece(220), "\xC4\xA0");      // "Ġ", the byte-level space
}

TEST(Gpt2PreTokenizer, SplitsLikeTheRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(BpeTokenizer::PreTokenize("Hello, y'all! I've 3.14"),
            (V{"Hello", ",", " y", "'", "all", "!", " I", "'ve", " 3", ".", "14"}));
  // A run of white space leaves its last character to the word after it; at the end it stays.
  EXPECT_EQ(BpeTokenizer::PreTokenize("a   b  \n"), (V{"a", "  ", " b", "  \n"}));
  EXPECT_EQ(BpeTokenizer::PreTokenize("\n =\t\tx"), (V{"\n", " =", "\t", "\t", "x"}));
  // Contractions are lower case only; "'S" is punctuation followed by a letter.
  EXPECT_EQ(BpeTokenizer::PreTokenize("IT'S x's"), (V{"IT", "'", "S", " x", "'s"}));
  // Letters and numbers of any script; U+00BD is a number, U+3000 is white space.
  EXPECT_EQ(BpeTokenizer::PreTokenize("\xD0\xBD\xD0\xB5 4\xC2\xBD\xE3\x80\x80\xE5\xA4\xA9"),
            (V{"\xD0\xBD\xD0\xB5", " 4\xC2\xBD", "\xE3\x80\x80", "\xE5\xA4\xA9"}));
  // Invalid UTF-8 reads as U+FFFD (a symbol), one per bad byte.
  EXPECT_EQ(BpeTokenizer::PreTokenize("a\xFF\xC3"), (V{"a", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  EXPECT_TRUE(BpeTokenizer::PreTokenize("").empty());
}

// A tiny SPM vocabulary: <unk> <s> </s>, byte tokens for 'a' 'b' 'c' ' '... only where listed.
VocabData TinySpm() {
  VocabData v;
  v.source = "tiny-spm";
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "<0x63>", "<0xC3>", "<0xA9>", "\xE2\x96\x81",
              "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab", "bb", "<tag>"};
  v.scores = {0, 0, 0, 0, 0, 0, -1, -2, -2, -3, -1, -5, -0.5f, 0};
  v.token_types = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 4};
  v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
  v.add_space_prefix = true;
  v.add_bos = true;
  return v;
}

TEST(SpmTokenizer, MergesByScoreAndFallsBackToBytes) {
  const SpmTokenizer tok(TinySpm());
  // "▁abb": ▁a (-3) loses to bb (-0.5) and ab (-1); bb is taken first, then ▁a.
  EXPECT_EQ(tok.Encode("abb", false), (std::vector<int32_t>{9, 12}));
  // "▁ab": ab (-1) beats ▁a (-3), then ▁ab (-5) joins the rest.
  EXPECT_EQ(tok.Encode("ab", false), (std::vector<int32_t>{11}));
  // 'c' and 'é' are not pieces: their UTF-8 bytes become <0x63> <0xC3> <0xA9>.
  EXPECT_EQ(tok.Encode("c\xC3\xA9", true), (std::vector<int32_t>{1, 6, 3, 4, 5}));
  // A byte with no <0xXX> piece has no token at all: <unk> stands in.
  EXPECT_EQ(tok.Encode("d", false), (std::vector<int32_t>{6, 0}));
  EXPECT_TRUE(tok.Encode("", false).empty());
  EXPECT_EQ(tok.Decode(tok.Encode("ab c\xC3\xA9", false)), "ab c\xC3\xA9");
}

TEST(SpmTokenizer, UserDefinedTokensSplitTheTextAndRestartThePrefix) {
  const SpmTokenizer tok(TinySpm());
  // Text after a user-defined token gets the dummy-prefix space again, as in llama.cpp.
  EXPECT_EQ(tok.Encode("a<tag>a", false), (std::vector<int32_t>{9, 13, 9}));
  EXPECT_EQ(tok.Encode("<tag>", false), (std::vector<int32_t>{13}));
  EXPECT_EQ(tok.DecodeToken(13, 9), "<tag>");
  VocabData no_prefix = TinySpm();
  no_prefix.add_space_prefix = false;
  EXPECT_EQ(SpmTokenizer(no_prefix).Encode("ab", false), (std::vector<int32_t>{10}));
}

TEST(BpeTokenizer, MergesByRankAndKeepsTheFirstDuplicate) {
  VocabData v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"a", "b", "c", "ab", "bc", "abc", "\xC4\xA0", "\xC4\xA0" "a", "<|endoftext|>"};
  v.merges = {"b c", "a b", "a bc", "ab c", "b c", "\xC4\xA0 a", "nospace"};
  v.bos_id = v.eos_id = 8;
  v.add_bos = true;
  const BpeTokenizer tok(v);
  // "b c" (rank 0) first, then "a bc" (rank 2); "ab c" (rank 3) never gets a chance.
  EXPECT_EQ(tok.Encode("abc", false), (std::vector<int32_t>{5}));
  EXPECT_EQ(tok.Encode("ab a", true), (std::vector<int32_t>{8, 3, 7}));
  // A vocabulary without add_bos_token (GPT-2's, Qwen2's) gets no BOS, as llama.cpp's add_special.
  v.add_bos = false;
  EXPECT_EQ(BpeTokenizer(v).Encode("ab a", true), (std::vector<int32_t>{3, 7}));
  // 'd' has no token and no one-byte token: llama.cpp drops it.
  EXPECT_EQ(tok.Encode("dab", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.Decode({3, 7}), "ab a");
  EXPECT_EQ(tok.DecodeToken(8, -1), "");  // forced to a control token by its name
}


TEST(GgufVocab, RejectsWhatItCannotTokenizeFaithfully) {
  VocabData v = TinySpm();
  v.model = "bert";
  ExpectError([&] { MakeGgufTokenizer(v); }, {"tiny-spm", "'bert'", "'llama'", "'gpt2'"});
  v = TinySpm();
  v.tokens[8] = "a";
  ExpectError([&] { SpmTokenizer tok(v); }, {"tiny-spm", "tokenizer.ggml.tokens[8]", "duplicates token 7"});
  v = TinySpm();
  v.scores.pop_back();
  ExpectError([&] { SpmTokenizer tok(v); }, {"scores"});
  v = TinySpm();
  v.bos_id = 99;
  ExpectError([&] { SpmTokenizer tok(v); }, {"bos", "99"});
  v.model = "gpt2";
  v.bos_id = 1;
  v.pre = "kimi-k2";
  ExpectError([&] { MakeGgufTokenizer(v); }, {"tokenizer.ggml.pre", "'kimi-k2'", "'gpt-2'", "'llama-bpe'", "'tekken'"});
}

// Writes a GGUF file with only metadata: string, u32, bool and array values.
class GgufWriter {
 public:
  void String(std::string_view key, std::string_view value) { Key(key, 8); Str(value); }
  void U32(std::string_view key, uint32_t value) { Key(key, 4); Pod(value); }
  void Strings(std::string_view key, const std::vector<std::string>& values) {
    Key(key, 9), Pod(uint32_t{8}), Pod(uint64_t{values.size()});
    for (const auto& s : values) Str(s);
  }
  void Floats(std::string_view key, const std::vector<float>& values) {
    Key(key, 9), Pod(uint32_t{6}), Pod(uint64_t{values.size()});
    for (float f : values) Pod(f);
  }
  fs::path Write(const std::string& name) const {
    std::string bytes = "GGUF";
    const auto put = [&](auto v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(uint32_t{3}), put(uint64_t{0}), put(uint64_t{count_});
    bytes += body_;
    bytes.resize((bytes.size() + 31) / 32 * 32, '\0');  // an empty data section, aligned
    const fs::path path =
        fs::temp_directory_path() / (name + "-" + std::to_string(getpid()) + ".gguf");
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

 private:
  template <class T>
  void Pod(T v) { body_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Str(std::string_view s) { Pod(uint64_t{s.size()}), body_ += s; }
  void Key(std::string_view key, uint32_t type) { ++count_, Str(key), Pod(type); }
  std::string body_;
  uint64_t count_ = 0;
};

TEST(GgufVocab, ReadErrorsNameTheFileAndKey) {
  GgufWriter w;
  w.String("general.architecture", "llama");
  w.Strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "x"});
  const fs::path no_model = w.Write("vocab-no-model");
  ExpectError([&] { ReadGgufVocab(GgufFile::Open(no_model)); },
              {no_model.string(), "tokenizer.ggml.model"});

  w.String("tokenizer.ggml.model", "llama");
  w.Floats("tokenizer.ggml.scores", {0, 0, 0});
  const fs::path short_scores = w.Write("vocab-short-scores");
  ExpectError([&] { ReadGgufVocab(GgufFile::Open(short_scores)); },
              {short_scores.string(), "tokenizer.ggml.scores", "3"});

  GgufWriter ok;
  ok.String("tokenizer.ggml.model", "gpt2");
  ok.String("tokenizer.ggml.pre", "gpt-2");
  ok.Strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  const fs::path no_merges = ok.Write("vocab-no-merges");
  ExpectError([&] { ReadGgufVocab(GgufFile::Open(no_merges)); },
              {no_merges.string(), "tokenizer.ggml.merges"});
  ok.Strings("tokenizer.ggml.merges", {"a b"});
  ok.U32("tokenizer.ggml.bos_token_id", 7);  // outside the vocabulary: ignored, as llama.cpp does
  const fs::path good = ok.Write("vocab-good");
  const VocabData vocab = ReadGgufVocab(GgufFile::Open(good));
  EXPECT_EQ(vocab.bos_id, -1);  // the gpt2 default (11) does not fit either
  EXPECT_FALSE(vocab.add_space_prefix);
  EXPECT_EQ(MakeGgufTokenizer(vocab)->Encode("ab", false), (std::vector<int32_t>{2}));
  for (const auto& p : {no_model, short_scores, no_merges, good}) fs::remove(p);
}

}  // namespace
}  // namespace lowbit
