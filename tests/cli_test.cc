// The lowbit binary end to end: JSON shapes other tools rely on, and errors with exit codes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace {

using lowbit::testing_util::RunLowbit;
using Result = lowbit::testing_util::RunResult;

TEST(Cli, FormatsJsonListsEveryFormatWithItsFacts) {
  const Result r = RunLowbit("formats --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto list = nlohmann::json::parse(r.out);
  ASSERT_TRUE(list.is_array());
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& f : list) {
    ASSERT_TRUE(f.contains("name") && f.contains("bits") && f.contains("max_normal"));
    by_name[f["name"]] = f;
  }
  EXPECT_EQ(by_name.at("fp8_e4m3")["max_normal"], 448.0);
  EXPECT_EQ(by_name.at("fp8_e5m2")["max_normal"], 57344.0);
  EXPECT_EQ(by_name.at("fp4_e2m1")["bits"], 4);
  EXPECT_EQ(by_name.at("mxfp4")["bits_per_weight"], 4.25);
  EXPECT_EQ(by_name.at("int4")["bits_per_weight"], 4.125);
  for (const char* name : {"bf16", "fp16", "fp6_e2m3", "fp6_e3m2", "e8m0", "ue4m3", "int2", "nf4", "ternary",
                           "mxfp8_e4m3", "mxfp6_e2m3", "mxint8", "nvfp4"})
    EXPECT_TRUE(by_name.contains(name)) << name;
}

TEST(Cli, OutliersJsonShowsGranularityMatters) {
  const Result r = RunLowbit("outliers --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out)["rows"];
  ASSERT_EQ(rows.size(), 6u);
  std::map<std::string, double> err;
  for (const auto& row : rows) {
    ASSERT_TRUE(row.contains("scale"));
    err[row["case"].get<std::string>() + "/" + row["granularity"].get<std::string>()] = row["bulk_mean_abs_error"];
  }
  // One outlier inflates the per-tensor scale: the bulk error grows several-fold, and finer
  // groups win most of it back.
  EXPECT_GT(err["outlier/per-tensor"], 4 * err["gaussian/per-tensor"]);
  EXPECT_LT(err["outlier/group 8"], err["outlier/group 16"]);
  EXPECT_LT(err["outlier/group 16"], err["outlier/per-tensor"]);
}

TEST(Cli, QuantizeTensorReportsOnTheBundledModel) {
  const Result r = RunLowbit("quantize-tensor --model models/kjv-llama-7m --tensor model.layers.0.self_attn.q_proj.weight "
                       "--format int4 --group 128 --asym --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["bits_per_weight"], 4.15625);
  EXPECT_GT(j["sqnr_db"], 15.0);
  EXPECT_LT(j["sqnr_db"], 30.0);
  EXPECT_EQ(j["shape"], nlohmann::json({256, 256}));
}

TEST(Cli, BadInputGivesAClearErrorAndNonZeroExit) {
  Result r = RunLowbit("quantize-tensor --model models/kjv-llama-7m --tensor nope --format int4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("nope"), std::string::npos) << r.out;
  r = RunLowbit("quantize-tensor --model models/kjv-llama-7m --tensor model.norm.weight --format int9");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("unknown format 'int9'"), std::string::npos) << r.out;
  r = RunLowbit("quantize-tensor --model /nonexistent --tensor x --format int4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent"), std::string::npos) << r.out;
  r = RunLowbit("formats --bogus-flag");
  EXPECT_NE(r.status, 0);
  r = RunLowbit("");
  EXPECT_NE(r.status, 0);
}

TEST(Cli, BenchCodecsJsonShape) {
  const Result r = RunLowbit("bench codecs --format int4,fp8_e4m3 --seconds 0.01 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto list = nlohmann::json::parse(r.out);
  ASSERT_EQ(list.size(), 4u);
  for (const auto& row : list) {
    EXPECT_TRUE(row["op"] == "quantize" || row["op"] == "dequantize");
    EXPECT_GT(row["gbps"].get<double>(), 0.0);
    EXPECT_TRUE(row.contains("format"));
  }
}

// The JSON keys the runtime benchmarks promise, for several formats measured round-robin.
TEST(Cli, BenchDecodeAndPrefillJsonShape) {
  for (const char* kind : {"decode --steps 2", "prefill"}) {
    const Result r = RunLowbit(std::string("bench ") + kind +
                               " --model models/kjv-llama-7m --quantize fp32,int4:g128 --ctx 16 --batch 1,2 --rounds 2 "
                               "--threads 2 --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto list = nlohmann::json::parse(r.out);
    ASSERT_EQ(list.size(), 4u) << kind;
    for (const auto& row : list) {
      EXPECT_TRUE(row["format"] == "fp32" || row["format"] == "int4:g128") << row;
      EXPECT_TRUE(row["batch"] == 1 || row["batch"] == 2) << row;
      EXPECT_GT(row["tokens_per_second"].get<double>(), 0.0);
      EXPECT_NEAR(row["ms_per_token"].get<double>() * row["tokens_per_second"].get<double>(),
                  std::string(kind) == "prefill" ? 1e3 : 1e3 * row["batch"].get<double>(), 1e-6 * 1e3 * 4);
    }
  }
}

// bench gemv's keys, and its own default of 3 rounds (the decode command's --rounds, bound to a
// shared field, once overwrote it with 1).
TEST(Cli, BenchGemvJsonShapeAndRounds) {
  const Result r = RunLowbit("bench gemv --format int4:g128 --rows 256 --cols 512 --working-set-mib 1 --size-mib 8 "
                             "--seconds 0.01 --threads 2 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "int4:g128:scale=f16");
  EXPECT_EQ(j["rounds"], 3);
  EXPECT_GT(j["gbps"].get<double>(), 0.0);
  EXPECT_GT(j["triad_gbps"].get<double>(), 0.0);
  EXPECT_NEAR(j["fraction_of_bandwidth"].get<double>(), j["gbps"].get<double>() / j["triad_gbps"].get<double>(), 1e-9);
}

TEST(Cli, DemoRunsOnTheBundledModel) {
  const Result r = RunLowbit("demo");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("nvfp4"), std::string::npos);
  EXPECT_NE(r.out.find("4.1250"), std::string::npos) << "int4 g128 bits/weight";
}

}  // namespace

namespace {

TEST(CliEngine, PplCompareGenerateTokenizeJson) {
  // A short text keeps this fast: the first 20 KB of the KJV test split.
  const std::string text = "/tmp/lowbit_cli_kjv_" + std::to_string(::getpid()) + ".txt";
  {
    std::ifstream in(LOWBIT_SOURCE_DIR "/data/kjv-test.txt");
    std::string s(20000, '\0');
    in.read(s.data(), static_cast<std::streamsize>(s.size()));
    std::ofstream(text) << s.substr(0, static_cast<size_t>(in.gcount()));
  }
  auto r = RunLowbit("ppl --model models/kjv-llama-7m --text " + text + " --ctx 128 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"ppl", "ppl_stderr", "tokens", "tokens_per_second"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["ppl"].get<double>(), 20.0);
  EXPECT_LT(j["ppl"].get<double>(), 200.0);

  r = RunLowbit("compare --base models/kjv-llama-7m --model models/kjv-llama-7m --text " + text + " --ctx 128 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  for (const char* key : {"kld_mean", "kld_median", "kld_p99", "top1_agreement", "ppl_base", "ppl", "tokens"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_NEAR(j["kld_mean"].get<double>(), 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(j["top1_agreement"].get<double>(), 1.0);

  r = RunLowbit("generate --model models/kjv-llama-7m --prompt 'And God said' -n 8 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated_tokens"], 8);
  const auto again = nlohmann::json::parse(RunLowbit("generate --model models/kjv-llama-7m --prompt 'And God said' -n 8 --json").out);
  EXPECT_EQ(j["text"], again["text"]) << "greedy decoding is deterministic";

  r = RunLowbit("tokenize --model models/kjv-llama-7m --text 'In the beginning' --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({1, 1040, 261, 2108}));
  std::remove(text.c_str());
}

TEST(CliEngine, TokenizeReadsVocabularyOnlyGguf) {
  const std::string gguf = LOWBIT_SOURCE_DIR "/../shared/tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(gguf)) GTEST_SKIP() << "../shared is not available";
  const auto r = RunLowbit("tokenize --model " + gguf + " --text 'Hello world' --no-bos --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({15043, 3186}));
}

TEST(CliEngine, QuantizeSavesCalibratedCodesAsGguf) {
  const std::string dir = ::testing::TempDir() + "lowbit_cli_gguf_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const Result r = RunLowbit("quantize models/kjv-llama-7m -o " + dir + "/m.gguf --method rtn --save-as gguf:q4_0 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto card = nlohmann::json::parse(r.out);
  EXPECT_EQ(card["gguf"]["type"], "Q4_0");
  EXPECT_EQ(card["gguf"]["repacked_tensors"], 42);  // every decoder linear, bit for bit
  const Result inspect = RunLowbit("inspect " + dir + "/m.gguf");
  EXPECT_NE(inspect.out.find("llama.cpp loads this file"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("lowbit.recipe_card"), std::string::npos) << inspect.out;
  const Result kquant = RunLowbit("quantize models/kjv-llama-7m -o " + dir + "/k.gguf --save-as gguf:Q4_K_M");
  EXPECT_EQ(kquant.status, 1);
  EXPECT_NE(kquant.out.find("--calib"), std::string::npos) << kquant.out;
  const Result grid = RunLowbit("quantize models/kjv-llama-7m -o " + dir + "/g.gguf --format int4:g128 --save-as gguf:Q4_0");
  EXPECT_EQ(grid.status, 1);
  EXPECT_NE(grid.out.find("no exact home"), std::string::npos) << grid.out;
  const Result rotated = RunLowbit("quantize models/kjv-llama-7m -o " + dir + "/r.gguf --rotate --save-as gguf:Q8_0");
  EXPECT_EQ(rotated.status, 1);
  EXPECT_NE(rotated.out.find("rotate: llama.cpp has no online Hadamard"), std::string::npos) << rotated.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/k.gguf") || std::filesystem::exists(dir + "/g.gguf") ||
               std::filesystem::exists(dir + "/r.gguf"));
  std::filesystem::remove_all(dir);
}

TEST(CliEngine, ErrorsNameTheProblem) {
  auto r = RunLowbit("ppl --model models/kjv-llama-7m --text /nonexistent.txt");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent.txt"), std::string::npos) << r.out;
  r = RunLowbit("ppl --model /nonexistent-model --text data/kjv-test.txt");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent-model"), std::string::npos) << r.out;
  r = RunLowbit("generate --model models/kjv-llama-7m");
  EXPECT_NE(r.status, 0);  // --prompt is required
}

}  // namespace
