// Evaluation: tokenization of the bundled model, the llama-perplexity protocol, KL statistics
// (exact and from a top-K base file), sampling, and the corresponding CLI commands.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "eval/compare.h"
#include "io/hf_model.h"
#include "io/llama2c.h"
#include "model/quantize_weights.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

const std::string kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

TEST(SentencePiece, MatchesTheReferenceIdsAndDecodesBack) {
  const auto ref = nlohmann::json::parse(ReadTextFile(kModelDir + "/reference.json"));
  const auto tok = LoadTokenizer(kModelDir);
  const std::string prompt = ref["prompt"];
  EXPECT_EQ(tok->Encode(prompt, true), ref["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok->Decode(tok->Encode(prompt, true)), prompt);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->vocab_size(), 4096);
  EXPECT_THROW(LoadTokenizer("/nonexistent/tokenizer.model"), Error);
}

TEST(Scoring, ChunkPlanFollowsLlamaPerplexity) {
  const ChunkPlan plan = PlanChunks(1000, 256);
  EXPECT_EQ(plan.chunks, 3u);
  EXPECT_EQ(plan.first_scored(), 128u);
  EXPECT_EQ(plan.scored_per_chunk(), 127u);  // positions 128..254 predict 129..255
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const auto chunk = ChunkTokens(tokens, plan, 1, 1);
  EXPECT_EQ(chunk.front(), 1);  // BOS replaces token 256
  EXPECT_EQ(chunk[1], 257);
  EXPECT_EQ(chunk.back(), 511);
  EXPECT_EQ(ChunkTokens(tokens, plan, 1, -1).front(), 256);  // a tokenizer without BOS: the text's token stays
  EXPECT_THROW(PlanChunks(100, 256), Error);
}

// The chunk-start BOS follows llama.cpp's add_bos: SentencePiece vocabularies and GGUF files that set
// tokenizer.ggml.add_bos_token put theirs; a BPE vocabulary without the key (GPT-2) puts none.
TEST(Scoring, ChunksStartWithBosOnlyWhereTheTokenizerAddsOne) {
  const std::string vocab = LOWBIT_SOURCE_DIR "/../shared/tokenizers/ggml-vocab/ggml-vocab-";
  EXPECT_EQ(AddedBos(*LoadTokenizer(kModelDir)), 1);
  EXPECT_EQ(AddedBos(*LoadTokenizer(vocab + "llama-spm.gguf")), 1);
  EXPECT_EQ(AddedBos(*LoadTokenizer(vocab + "deepseek-llm.gguf")), 100000);
  EXPECT_EQ(AddedBos(*LoadTokenizer(vocab + "gpt-2.gguf")), -1);
}

TEST(Scoring, NllStatsHandComputed) {
  NllStats s;
  s.Add(1.0);
  s.Add(3.0);
  EXPECT_DOUBLE_EQ(s.ppl(), std::exp(2.0));
  // var = E[x^2] - E[x]^2 = 5 - 4 = 1; stderr of the mean = sqrt(1 / (n - 1)) = 1.
  EXPECT_DOUBLE_EQ(s.ppl_stderr(), std::exp(2.0));
  std::vector<double> lp;
  LogSoftmax(std::vector<float>{0.0f, std::log(3.0f)}, lp);
  EXPECT_NEAR(std::exp(lp[0]), 0.25, 1e-7);
  EXPECT_NEAR(std::exp(lp[1]), 0.75, 1e-7);
}

TEST(Compare, KlOfHandComputedDistributions) {
  // base (0.5, 0.5) vs model (0.25, 0.75): KL = 0.5 ln 2 + 0.5 ln(2/3).
  const std::vector<double> b = {std::log(0.5), std::log(0.5)}, m = {std::log(0.25), std::log(0.75)};
  CompareAccumulator acc;
  acc.Add(b, m, 1);
  acc.Add(b, b, 0);
  const CompareResult r = acc.Finish();
  const double kl = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0);
  EXPECT_NEAR(r.kld_mean, kl / 2, 1e-12);
  EXPECT_NEAR(r.kld_p99, kl, 1e-12);
  EXPECT_DOUBLE_EQ(r.top1_agreement, 0.5);  // argmax(b) = 0 (first of a tie), argmax(m) = 1
  EXPECT_NEAR(r.dp_rms, std::sqrt(0.25 * 0.25 / 2), 1e-12);
  EXPECT_EQ(r.tokens, 2u);
}

TEST(Compare, MergedTailIsExactWhenKCoversTheVocabAndALowerBoundOtherwise) {
  std::vector<double> b(6), m(6);
  const double pb[6] = {0.4, 0.3, 0.1, 0.1, 0.05, 0.05}, pm[6] = {0.35, 0.3, 0.15, 0.05, 0.1, 0.05};
  for (int i = 0; i < 6; ++i) b[i] = std::log(pb[i]), m[i] = std::log(pm[i]);
  CompareAccumulator exact, full, merged;
  exact.Add(b, m, 0);
  full.AddMergedTail(MakeBaseRecord(b, 0, 6), m, 0);
  merged.AddMergedTail(MakeBaseRecord(b, 0, 2), m, 0);
  EXPECT_NEAR(full.Finish().kld_mean, exact.Finish().kld_mean, 1e-7);
  EXPECT_LT(merged.Finish().kld_mean, exact.Finish().kld_mean);  // log-sum inequality
  EXPECT_GT(merged.Finish().kld_mean, 0.0);
}

TEST(Compare, BaseFileRoundTripsAndRejectsMismatches) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_base_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<double> lp = {std::log(0.7), std::log(0.2), std::log(0.1)};
  const BaseFileHeader h{3, 8, 2, 2, HashTokens({1, 2, 3})};
  WriteBaseFile(dir / "base.bin", h, {MakeBaseRecord(lp, 2, 2), MakeBaseRecord(lp, 0, 2)});
  const auto records = ReadBaseFile(dir / "base.bin", h);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(std::exp(records[0].tail_logprob), 0.1, 1e-6);
  EXPECT_NEAR(std::exp(records[0].target_logprob), 0.1, 1e-6);
  EXPECT_EQ(std::filesystem::file_size(dir / "base.bin"), BaseFileBytes(h));
  BaseFileHeader other = h;
  other.ctx = 16;
  EXPECT_THROW(ReadBaseFile(dir / "base.bin", other), Error);
  other = h;
  other.token_hash ^= 1;
  EXPECT_THROW(ReadBaseFile(dir / "base.bin", other), Error);
  std::filesystem::resize_file(dir / "base.bin", BaseFileBytes(h) - 3);
  EXPECT_THROW(ReadBaseFile(dir / "base.bin", h), Error);
  std::filesystem::remove_all(dir);
}

// Rewrites `size` bytes at `offset` of a file in place.
void PatchFile(const std::filesystem::path& path, uint64_t offset, const void* bytes, size_t size) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Compare, BaseFileChecksumCatchesAnEditedNumber) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_base_sum_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<double> lp = {std::log(0.7), std::log(0.2), std::log(0.1)};
  const BaseFileHeader h{3, 8, 2, 3, HashTokens({1, 2, 3})};
  const auto path = dir / "base.bin";
  WriteBaseFile(path, h, {MakeBaseRecord(lp, 2, 2), MakeBaseRecord(lp, 0, 2), MakeBaseRecord(lp, 1, 2)});
  ASSERT_NO_THROW(ReadBaseFile(path, h));
  // One bit of one log-probability in the second record: still a plausible float, so only the
  // checksum can tell.
  const uint64_t at = BaseFileBytes(h) - 2 * 24 + 4 + 1;
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(at));
  const char byte = static_cast<char>(in.get() ^ 0x01);
  in.close();
  PatchFile(path, at, &byte, 1);
  const std::string err = ErrorOf([&] { ReadBaseFile(path, h); });
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  EXPECT_NE(err.find(path.string()), std::string::npos) << err;

  // A version 1 file (no checksum): regenerate.
  WriteBaseFile(path, h, {MakeBaseRecord(lp, 2, 2), MakeBaseRecord(lp, 0, 2), MakeBaseRecord(lp, 1, 2)});
  const uint32_t v1 = 1;
  PatchFile(path, 8, &v1, 4);
  EXPECT_NE(ErrorOf([&] { ReadBaseFile(path, h); }).find("regenerate"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Compare, BaseFilePositionsBeyondTheFileAreRefusedBeforeAllocating) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_base_pos_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<double> lp = {std::log(0.7), std::log(0.2), std::log(0.1)};
  BaseFileHeader h{3, 8, 2, 1, 42};
  const auto path = dir / "base.bin";
  WriteBaseFile(path, h, {MakeBaseRecord(lp, 2, 2)});
  // positions x record size wraps to a small number in 64 bits: must not pass the size check.
  for (const uint64_t positions : {uint64_t{1} << 60, (uint64_t{1} << 61) + 1, ~uint64_t{0}}) {
    h.positions = positions;
    PatchFile(path, 24, &positions, 8);
    const std::string err = ErrorOf([&] { ReadBaseFile(path, h); });
    EXPECT_NE(err.find("positions"), std::string::npos) << err;
  }
  EXPECT_THROW(BaseFileBytes(h), Error);
  std::filesystem::remove_all(dir);
}

TEST(Perplexity, BundledModelIsInTheSeventiesAndRtnInt4MovesKlByAboutOneThousandth) {
  const Model base = LoadHfModel(kModelDir);
  Model quantized = LoadHfModel(kModelDir);
  EXPECT_EQ(QuantizeLinears(quantized.weights, ParseScheme("int4:g128")), 42u);
  const auto tok = LoadTokenizer(kModelDir);
  std::vector<int32_t> tokens = tok->Encode(ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt"), true);
  tokens.resize(8 * 256);  // 8 chunks keep the test fast
  const ChunkPlan plan = PlanChunks(tokens.size(), 256);
  Engine eb(base, 2), eq(quantized, 2);
  Engine* engines[] = {&eb, &eq};
  NllStats nll;
  CompareAccumulator exact, merged;
  std::vector<std::vector<double>> base_lp(plan.scored_per_chunk());
  std::vector<double> lp;
  ScoreChunks(
      engines, tokens, plan, 1,
      [&](size_t m, const ScoredPosition& p) {
        auto& slot = base_lp[p.pos - plan.first_scored()];
        if (m == 0) {
          LogSoftmax(p.logits, slot);
          nll.Add(-slot[p.target]);
          return;
        }
        LogSoftmax(p.logits, lp);
        exact.Add(slot, lp, p.target);
        merged.AddMergedTail(MakeBaseRecord(slot, p.target, 32), lp, p.target);
      },
      nullptr);
  EXPECT_EQ(nll.count, 8u * 127u);
  EXPECT_GT(nll.ppl(), 50.0);
  EXPECT_LT(nll.ppl(), 100.0);
  const CompareResult r = exact.Finish();
  EXPECT_NEAR(r.ppl_base, nll.ppl(), 1e-9);
  EXPECT_GT(r.kld_mean, 2e-4);
  EXPECT_LT(r.kld_mean, 5e-3);
  EXPECT_GT(r.top1_agreement, 0.9);
  EXPECT_LT(merged.Finish().kld_mean, r.kld_mean);
  EXPECT_GT(merged.Finish().kld_mean, 0.5 * r.kld_mean);
}

TEST(Sampler, GreedyTopKAndSeeds) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -5.0f};
  EXPECT_EQ(Sampler({}).Sample(logits), 1);
  EXPECT_EQ(Sampler({1.0f, 1, 1.0f, 3}).Sample(logits), 1);  // top-k 1 is greedy
  std::vector<int32_t> a, b;
  Sampler s1({1.0f, 0, 1.0f, 42}), s2({1.0f, 0, 1.0f, 42});
  for (int i = 0; i < 50; ++i) a.push_back(s1.Sample(logits)), b.push_back(s2.Sample(logits));
  EXPECT_EQ(a, b);
  for (int32_t id : a) EXPECT_NE(id, 3) << "p(3) ~ 5e-4: 50 draws should not hit it with this seed";
  Sampler nucleus({1.0f, 0, 0.4f, 7});  // p(1) = 0.486 >= 0.4: only the most likely token stays
  for (int i = 0; i < 20; ++i) EXPECT_EQ(nucleus.Sample(logits), 1);
}

TEST(Llama2c, TruncatedCheckpointNamesTheTensor) {
  const std::string src = LOWBIT_SOURCE_DIR "/../shared/models/stories260K/stories260K.bin";
  if (!std::filesystem::exists(src)) GTEST_SKIP() << "../shared is not available";
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_l2c_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src, dir / "m.bin");
  std::filesystem::resize_file(dir / "m.bin", 40000);
  try {
    LoadLlama2cModel(dir / "m.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.bin"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A tiny legacy llama2.c checkpoint: dim 8, hidden 16, 1 layer, 2 heads, vocab 16, seq_len 4,
// with exactly the bytes the header asks for (negative vocab = unshared classifier).
std::vector<char> TinyLlama2c(std::array<int32_t, 7> header) {
  const bool shared = header[5] > 0;
  const uint64_t dim = 8, hidden = 16, vocab = 16, seq = 4, head = 4;
  const uint64_t floats = vocab * dim + 2 * dim + 4 * dim * dim + 3 * hidden * dim + dim + seq * head + (shared ? 0 : vocab * dim);
  std::vector<char> bytes(sizeof(header) + floats * 4, 0);
  std::memcpy(bytes.data(), header.data(), sizeof(header));
  for (uint64_t i = 0; i < floats; ++i) {
    const float v = 0.01f * static_cast<float>(i % 17);
    std::memcpy(bytes.data() + sizeof(header) + i * 4, &v, 4);
  }
  return bytes;
}

TEST(Llama2c, AbsurdHeaderCountsAreRefusedBeforeAllocatingNamingTheField) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_l2c_hdr_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "m.bin";
  const auto write = [&](const std::vector<char>& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  write(TinyLlama2c({8, 16, 1, 2, 2, 16, 4}));
  EXPECT_NO_THROW(LoadLlama2cModel(path));
  write(TinyLlama2c({8, 16, 1, 2, 2, -16, 4}));
  EXPECT_FALSE(LoadLlama2cModel(path).config.tie_embeddings);

  // The file holds one layer's worth of weights; the header asks for more, or for absurd sizes.
  struct Case {
    std::array<int32_t, 7> header;
    const char* field;
  };
  const Case cases[] = {
      {{8, 16, 1 << 24, 2, 2, 16, 4}, "n_layers"},  // 2^24 layers: refused by the config limits or the size
      {{8, 16, 4000, 2, 2, 16, 4}, "n_layers"},
      {{8, 16, 1, 2, 2, 1 << 20, 4}, "vocab_size"},
      {{8, 1 << 20, 1, 2, 2, 16, 4}, "hidden_dim"},
      {{8, 16, 1, 2, 2, 16, 1 << 20}, "seq_len"},
      {{8, 16, 1, 2, 2, std::numeric_limits<int32_t>::min(), 4}, "vocab_size"},  // -INT_MIN must not overflow
  };
  for (const Case& c : cases) {
    std::vector<char> bytes = TinyLlama2c({8, 16, 1, 2, 2, 16, 4});
    std::memcpy(bytes.data(), c.header.data(), sizeof(c.header));
    write(bytes);
    const std::string err = ErrorOf([&] { LoadLlama2cModel(path); });
    EXPECT_NE(err.find(c.field), std::string::npos) << err;
    EXPECT_NE(err.find(path.string()), std::string::npos) << err;
  }
  // A v1 ("ak42") file cut inside its 256-byte header.
  std::vector<char> v1(37, 0);
  const int32_t v1_header[9] = {0x616b3432, 1, 8, 16, 1, 2, 2, 16, 4};
  std::memcpy(v1.data(), v1_header, sizeof(v1_header));
  write(v1);
  EXPECT_NE(ErrorOf([&] { LoadLlama2cModel(path); }).find("truncated"), std::string::npos);
  // A file one float longer than its header says.
  std::vector<char> bytes = TinyLlama2c({8, 16, 1, 2, 2, 16, 4});
  bytes.resize(bytes.size() + 4);
  write(bytes);
  EXPECT_NE(ErrorOf([&] { LoadLlama2cModel(path); }).find("unexpected bytes"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(HfConfig, UnknownArchitectureListsTheSupportedOnes) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10})";
  try {
    ReadHfConfig(dir / "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPT2LMHeadModel"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Qwen2ForCausalLM"), std::string::npos);
  }
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2, "intermediate_size": 4})";
  EXPECT_THROW(ReadHfConfig(dir / "config.json"), Error);  // 3 heads over 2 KV heads
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lowbit
