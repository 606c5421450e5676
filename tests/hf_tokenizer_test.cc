// Hugging Face tokenizer.json: lowbit's ids against the `tokenizers` library's, recorded in
// tests/data/hf_tokenizer_cases.json by tests/interop/hf_tokenizers.py (which `make test-interop`
// reruns with the pinned library). The cases are Phi-3.5's real file (and a Metaspace rewrite of
// it) and files built from llama.cpp's GGUF vocabularies with each family's pre-tokenizer; on
// llama.cpp's strings those also equal llama.cpp's own vectors, checked here too. Then BOS from
// tokenizer_config.json, folder loading, and errors that name the file and key path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "io/gguf.h"
#include "test_util.h"
#include "io/gguf_writer.h"
#include "model/config.h"
#include "tokenizer/gguf_vocab_export.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::ScratchDir;

const fs::path kShared = LOWBIT_SOURCE_DIR "/../shared/tokenizers";
const fs::path kFixture = LOWBIT_SOURCE_DIR "/tests/data/hf_tokenizer_cases.json";
const fs::path kPhi = kShared / "hf/phi-3.5-mini/tokenizer.json";

void WriteJson(const fs::path& path, const nlohmann::json& value) {
  std::ofstream(path, std::ios::binary) << value.dump();
}

// What tests/interop/hf_tokenizers.py's tokenizer_json_from_gguf writes for a GGUF vocabulary.
nlohmann::json TokenizerJsonFromGguf(const fs::path& path) {
  const VocabData vocab = ReadGgufVocab(GgufFile::Open(path));
  nlohmann::json ids = nlohmann::json::object(), added = nlohmann::json::array();
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    ids[vocab.tokens[i]] = i;
    const int32_t type = vocab.token_types.empty() ? kTokenNormal : vocab.token_types[i];
    if (type == kTokenControl || type == kTokenUserDefined)
      added.push_back({{"id", i}, {"content", vocab.tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", type == kTokenControl}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
            {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", ids}, {"merges", vocab.merges}}}};
}

struct FixtureCase {
  std::string name;
  fs::path tokenizer_json;
};

class HfTokenizerCases : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kPhi)) GTEST_SKIP() << kShared << " is not available";
    fixture_ = ReadJsonFile(kFixture);
  }
  // Builds the case's tokenizer.json as the script did.
  fs::path Build(const nlohmann::json& spec) {
    const std::string vocab = spec["vocab"].is_null() ? "" : spec["vocab"].get<std::string>();
    nlohmann::json data = vocab.empty()              ? ReadJsonFile(kPhi)
                          : vocab.ends_with(".json") ? ReadJsonFile(fs::path(LOWBIT_SOURCE_DIR) / vocab)
                                                     : TokenizerJsonFromGguf(kShared / "ggml-vocab" / vocab);
    for (const auto& [key, value] : spec["stages"].items()) data[key] = value;
    const fs::path path = dir_ / spec["name"].get<std::string>();
    fs::create_directories(path);
    WriteJson(path / "tokenizer.json", data);
    return path / "tokenizer.json";
  }

  ScratchDir dir_{"lowbit-hf-tokenizer"};
  nlohmann::json fixture_;
};

TEST_F(HfTokenizerCases, IdsAndDecodedTextMatchTheTokenizersLibrary) {
  const auto strings = fixture_["strings"].get<std::vector<std::string>>();
  ASSERT_GE(strings.size(), 50u);
  for (const nlohmann::json& spec : fixture_["cases"]) {
    const std::string name = spec["name"];
    const HfTokenizer tokenizer(Build(spec));
    const auto ids = spec["ids"].get<std::vector<std::vector<int32_t>>>();
    const auto decoded = spec["decoded"].get<std::vector<std::string>>();
    int mismatches = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::vector<int32_t> ours = tokenizer.Encode(strings[i], /*add_bos=*/false);
      if (ours != ids[i]) {
        ++mismatches;
        ADD_FAILURE() << name << " string " << i << " '" << strings[i] << "': " << ::testing::PrintToString(ours)
                      << " vs the library's " << ::testing::PrintToString(ids[i]);
      }
      EXPECT_EQ(tokenizer.Decode(ids[i]), decoded[i]) << name << " string " << i;
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

// The GGUF-derived files on llama.cpp's own test vectors: the same ids as llama.cpp.
TEST_F(HfTokenizerCases, ByteLevelFilesMatchLlamaCppVectors) {
  for (const nlohmann::json& spec : fixture_["cases"]) {
    if (spec["vocab"].is_null() || !spec["vocab"].get<std::string>().ends_with(".gguf") ||
        spec["name"] == "llama3-split" || spec["name"] == "qwen2-split-nfc")
      continue;
    const fs::path gguf = kShared / "ggml-vocab" / spec["vocab"].get<std::string>();
    std::ifstream inp(gguf.string() + ".inp", std::ios::binary), out(gguf.string() + ".out");
    const std::string text{std::istreambuf_iterator<char>(inp), std::istreambuf_iterator<char>()};
    const HfTokenizer tokenizer(Build(spec));
    const std::string sep = "\n__ggml_vocab_test__\n";
    int cases = 0;
    for (size_t pos = 0; pos < text.size(); ++cases) {
      const size_t next = text.find(sep, pos);
      ASSERT_NE(next, std::string::npos);
      std::string line;
      std::getline(out, line);
      std::vector<int32_t> expected;
      std::istringstream numbers(line);
      for (int32_t id; numbers >> id;) expected.push_back(id);
      EXPECT_EQ(tokenizer.Encode(text.substr(pos, next - pos), false), expected)
          << spec["name"] << " case " << cases;
      pos = next + sep.size();
    }
    EXPECT_EQ(cases, 46) << spec["name"];
  }
}

// A GGUF vocabulary whose tokenizer.ggml.pre is "llama-bpe" or "qwen2" splits with the same regex
// as the library's Split does: same ids on llama.cpp's strings (the extra strings hold control
// tokens, which llama.cpp reads as text).
TEST_F(HfTokenizerCases, GgufPreTokenizerRegexesMatchTheLibrary) {
  VocabData vocab = ReadGgufVocab(GgufFile::Open(kShared / "ggml-vocab/ggml-vocab-gpt-2.gguf"));
  const auto strings = fixture_["strings"].get<std::vector<std::string>>();
  int compared = 0;
  for (const auto& [pre, name] : {std::pair{"llama-bpe", "llama3-split"}, std::pair{"qwen2", "qwen2-split-nfc"}}) {
    vocab.pre = pre;
    const auto tokenizer = MakeGgufTokenizer(vocab);
    for (const nlohmann::json& spec : fixture_["cases"]) {
      if (spec["name"] != name) continue;
      const auto ids = spec["ids"].get<std::vector<std::vector<int32_t>>>();
      for (size_t i = 0; i < 46; ++i) {
        // llama.cpp does not apply Qwen2's NFC: compare where NFC changes nothing.
        if (std::string(name) == "qwen2-split-nfc" && strings[i].find("\xCC") != std::string::npos) continue;
        EXPECT_EQ(tokenizer->Encode(strings[i], false), ids[i]) << pre << " string " << i;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 85);
}

// `lowbit export --to gguf` of a folder with a byte-level tokenizer.json writes llama.cpp's gpt2
// vocabulary with the family's pre-tokenizer name; lowbit's GGUF tokenizer (which matches
// llama.cpp's vectors) then gives the tokenizer.json's ids.
TEST_F(HfTokenizerCases, GgufVocabularyFromTokenizerJsonTokenizesAlike) {
  const auto strings = fixture_["strings"].get<std::vector<std::string>>();
  ModelConfig config;
  config.vocab_size = 50304;  // padded past GPT-2's 50257, as models often are
  config.bos_id = config.eos_id = 50256;
  for (const nlohmann::json& spec : fixture_["cases"]) {
    const std::string name = spec["name"];
    if (name != "gpt-2" && name != "llama3-split" && name != "qwen2-split-nfc" && name != "falcon") continue;
    const fs::path json = Build(spec);
    if (name == "falcon") {  // three Splits: no single llama.cpp name says that
      EXPECT_THROW(GgufVocabularyFor(json, config), Error);
      continue;
    }
    GgufWriter writer(dir_ / (name + ".gguf"));
    for (GgufKeyValue& kv : GgufVocabularyFor(json, config)) writer.Set(kv.key, std::move(kv.value));
    writer.Commit();
    const VocabData vocab = ReadGgufVocab(GgufFile::Open(dir_ / (name + ".gguf")));
    EXPECT_EQ(vocab.pre, name == "gpt-2" ? "gpt-2" : name == "llama3-split" ? "llama-bpe" : "qwen2");
    EXPECT_EQ(vocab.tokens.size(), 50304u);
    const auto gguf = MakeGgufTokenizer(vocab);
    const HfTokenizer hf(json);
    for (size_t i = 0; i < 46; ++i) {
      if (name == "qwen2-split-nfc" && strings[i].find("\xCC") != std::string::npos) continue;  // no NFC in llama.cpp
      EXPECT_EQ(gguf->Encode(strings[i], false), hf.Encode(strings[i], false)) << name << " string " << i;
    }
  }
}

// Mistral-Nemo's (Tekken) and Llama-4's (GPT-4o) tokenizer.json regexes, as those files hold them,
// are exported under llama.cpp's names. llama.cpp splits those with its own rewrite of the case
// classes (a non-ASCII capital opening an all-capital word becomes a piece of its own: ÉCOLE is
// É | COLE), which gives the library's ids on these strings.
TEST(HfTokenizer, TekkenAndGpt4oRegexesExportUnderLlamaCppsNames) {
  const fs::path gpt2 = kShared / "ggml-vocab" / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(gpt2)) GTEST_SKIP();
  const std::string tekken = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
                             R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|)"
                             R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string contraction = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?";
  const std::string gpt4o = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" +
                            contraction + R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" +
                            contraction + R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  ScratchDir dir("lowbit-hf-tekken");
  ModelConfig config;
  config.vocab_size = 50257;
  config.bos_id = config.eos_id = 50256;
  for (const auto& [regex, name] : {std::pair{tekken, "tekken"}, std::pair{gpt4o, "gpt-4o"}}) {
    nlohmann::json data = TokenizerJsonFromGguf(gpt2);
    data["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    const fs::path json = dir / (std::string(name) + ".json");
    WriteJson(json, data);
    GgufWriter writer(dir / (std::string(name) + ".gguf"));
    for (GgufKeyValue& kv : GgufVocabularyFor(json, config)) writer.Set(kv.key, std::move(kv.value));
    writer.Commit();
    const VocabData vocab = ReadGgufVocab(GgufFile::Open(dir / (std::string(name) + ".gguf")));
    EXPECT_EQ(vocab.pre, name);
    const auto gguf = MakeGgufTokenizer(vocab);
    const HfTokenizer hf(json);
    for (const char* text : {"HelloWorld iPhone XMLHttpRequest getHTTPResponse I'M SURE it's", "path/to/x.txt\r\n 12345",
                             "\xC3\xA9" "cole \xC3\x89" "cole \xC3\x89" "COLE"})
      EXPECT_EQ(gguf->Encode(text, false), hf.Encode(text, false)) << name << ": " << text;
  }
}

TEST(HfTokenizer, BosComesFromThePostProcessorOrTokenizerConfig) {
  if (!fs::exists(kPhi)) GTEST_SKIP();
  ScratchDir dir("lowbit-hf-bos");
  nlohmann::json data = ReadJsonFile(kPhi);
  // Phi-3.5's template adds nothing; a Llama-style template adds <s>.
  EXPECT_EQ(HfTokenizer(kPhi).Encode("Hi", true), HfTokenizer(kPhi).Encode("Hi", false));
  data["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  WriteJson(dir / "tokenizer.json", data);
  {
    const HfTokenizer tokenizer(dir / "tokenizer.json");
    EXPECT_EQ(tokenizer.Encode("Hi", true).front(), 1);
    EXPECT_EQ(tokenizer.bos_id(), 1);
    EXPECT_EQ(tokenizer.eos_id(), 32000);  // <|endoftext|>: Phi-3.5's </s> is not special
    EXPECT_EQ(tokenizer.Decode(tokenizer.Encode("Hello world", true)), "Hello world");
  }
  // tokenizer_config.json's add_bos_token wins, as in transformers.
  WriteJson(dir / "tokenizer_config.json", {{"add_bos_token", false}, {"bos_token", "<s>"}, {"eos_token", "<|end|>"}});
  {
    const HfTokenizer tokenizer(dir / "tokenizer.json");
    EXPECT_NE(tokenizer.Encode("Hi", true).front(), 1);
    EXPECT_EQ(tokenizer.eos_id(), 32007);
  }
  // A folder with tokenizer.json loads it (before any tokenizer.model).
  EXPECT_EQ(LoadTokenizer(dir.path())->vocab_size(), 32011);
}

void ExpectError(const std::function<void()>& f, std::initializer_list<std::string_view> needles) {
  try {
    f();
    ADD_FAILURE() << "expected lowbit::Error";
  } catch (const Error& e) {
    for (std::string_view needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, ErrorsNameTheFileAndKeyPath) {
  ScratchDir dir("lowbit-hf-errors");
  const fs::path path = dir / "tokenizer.json";
  const nlohmann::json base = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  WriteJson(path, base);
  EXPECT_EQ(HfTokenizer(path).Encode("abab", false), (std::vector<int32_t>{2, 2}));

  const auto with = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json data = base;
    data[nlohmann::json::json_pointer(pointer)] = value;
    WriteJson(path, data);
    return [path] { HfTokenizer tokenizer(path); };
  };
  ExpectError(with("/model/type", "Unigram"), {"tokenizer.json", "model.type", "'Unigram'", "'BPE'"});
  ExpectError(with("/model/merges/0", "a c"), {"model.merges", "merges[0] 'a c'", "not in model.vocab"});
  ExpectError(with("/model/merges/0", "a b c"), {"merges[0]", "one space"});
  ExpectError(with("/model/vocab/b", -1), {"model.vocab.b", "token id"});
  ExpectError(with("/model/dropout", 0.1), {"model.dropout"});
  ExpectError(with("/pre_tokenizer/type", "BertPreTokenizer"), {"pre_tokenizer.type", "'BertPreTokenizer'", "Split"});
  ExpectError(with("/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}),
              {"pre_tokenizer.pattern.Regex", "(a"});
  ExpectError(with("/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}}),
              {"pre_tokenizer.behavior", "'Sideways'"});
  ExpectError(with("/normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Precompiled"}}}}}),
              {"normalizer.normalizers[0].type", "'Precompiled'"});
  ExpectError(with("/decoder", {{"type", "WordPiece"}}), {"decoder.type", "'WordPiece'"});
  ExpectError(with("/post_processor", {{"type", "TemplateProcessing"}, {"single", nlohmann::json::array()}}),
              {"post_processor.single", "Sequence A"});
  ExpectError([&] { HfTokenizer tokenizer(dir / "missing.json"); }, {"missing.json"});
}

// Invalid UTF-8 reaches the library as U+FFFD (Python decodes with errors="replace"); lowbit
// substitutes the same way instead of failing or splitting inside a character.
TEST(HfTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  if (!fs::exists(kPhi)) GTEST_SKIP();
  const HfTokenizer tokenizer(kPhi);
  EXPECT_EQ(tokenizer.Encode("a\xFF" "b\xE2\x82", false), tokenizer.Encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD", false));
}

}  // namespace
}  // namespace lowbit
