// `lowbit convert`: every engine format and the lowbit folder take a quantized model's codes exactly
// (read back, every matrix identical), a format that cannot hold a linear is an error naming the field
// unless --scheme asks for the change, and then the written linear is exactly an independent RTN of
// the source's values, its difference measured; GGUF keeps every grid a ggml type holds, through
// llama.cpp's Q/K row permutation.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "eval/weight_diff.h"
#include "io/hf_model.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "model/quantize_weights.h"
#include "pipeline/convert_job.h"
#include "quant/rtn.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::ExpectError;

const fs::path kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
constexpr size_t kMatrices = 6 * 7 + 2;  // the block linears, the embedding table and lm_head

class Scratch : public testing_util::ScratchDir {
 public:
  Scratch() : ScratchDir("lowbit-convert-test") {}
};

// The bundled model with its block linears RTN-quantized to `scheme`, saved as a lowbit folder.
fs::path QuantizedFolder(const Scratch& dir, const std::string& name, const std::string& scheme) {
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme(scheme));
  const fs::path out = dir / name;
  SaveQuantizedModel(m, out, kModelDir, nlohmann::json{{"recipe", {{"method", "rtn"}, {"format", scheme}}}});
  return out;
}

nlohmann::json Convert(const fs::path& in, const fs::path& out, const std::string& to, const std::string& scheme = "",
                       const std::string& text = "") {
  ConvertJob j;
  j.in = in.string();
  j.out = out.string();
  j.to = to;
  j.scheme = scheme;
  j.text = text;
  j.threads = 2;
  return RunConvertJob(j);
}

TEST(Convert, EveryFolderFormatRepacksTheCodesExactly) {
  Scratch dir;
  const fs::path source = QuantizedFolder(dir, "int4", "int4:g128:scale=f16");
  // lowbit -> each engine format -> the next, and back into a lowbit folder: every step exact.
  fs::path from = source;
  for (const char* to : {"gptq", "awq", "compressed-tensors", "lowbit"}) {
    SCOPED_TRACE(to);
    const fs::path out = dir / (std::string(to) + "-out");
    const nlohmann::json r = Convert(from, out, to);
    EXPECT_EQ(r["to"], to);
    EXPECT_TRUE(r["exact"].get<bool>());
    EXPECT_EQ(r["exact_matrices"].get<size_t>(), kMatrices);
    EXPECT_EQ(r["matrices"].size(), kMatrices);
    EXPECT_EQ(r["max_abs_diff"].get<double>(), 0.0);
    if (r.contains("changed")) {
      EXPECT_TRUE(r["changed"].empty());
    }
    from = out;
  }
  // The end of the chain against the start, measured independently of the job.
  StreamedModel a = OpenModel(source), b = OpenModel(from);
  for (const MatrixDiff& m : DiffWeights(a, b)) {
    EXPECT_TRUE(m.exact()) << m.name;
    EXPECT_EQ(m.from, m.to) << m.name;
  }
}

TEST(Convert, WhatTheFormatCannotHoldIsAnErrorOrQuantizedAgainAndMeasured) {
  Scratch dir;
  const fs::path source = QuantizedFolder(dir, "int3", "int3:g128:scale=f16");
  ExpectError([&] { (void)Convert(source, dir / "awq", "awq"); },
              {"model.layers.0.self_attn.q_proj", "bits", "not 3", "--scheme"});
  EXPECT_FALSE(fs::exists(dir / "awq"));

  const std::string scheme = "int4:g128:asym:scale=f16";
  const fs::path text = dir / "kjv.txt";  // the head of the KJV test text, ~4k tokens
  WriteFileAtomic(text, ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 16000));
  const nlohmann::json r = Convert(source, dir / "awq", "awq", scheme, text.string());
  EXPECT_FALSE(r["exact"].get<bool>());
  ASSERT_EQ(r["changed"].size(), 42u);
  for (const nlohmann::json& c : r["changed"]) {
    EXPECT_EQ(c["to"], scheme);
    EXPECT_NE(c["reason"].get<std::string>().find("AWQ GEMM stores 4-bit codes only"), std::string::npos);
  }
  // Each written linear is exactly RTN of the source's dequantized values, done here independently.
  const Model in = LoadHfModel(source), out = LoadHfModel(dir / "awq");
  for (size_t i = 0; i < in.weights.layers.size(); ++i) {
    const auto a = BlockLinears(in.weights.layers[i]), b = BlockLinears(out.weights.layers[i]);
    for (size_t k = 0; k < a.size(); ++k) {
      const QuantizedTensor& src = std::get<QuantizedTensor>(a[k].linear->weight);
      const std::vector<float> expected =
          QuantizeRtn(src.Dequantize(), src.rows(), src.cols(), ParseScheme(scheme)).Dequantize();
      EXPECT_EQ(std::get<QuantizedTensor>(b[k].linear->weight).Dequantize(), expected) << i << " " << a[k].name;
    }
  }
  double max_abs = 0;
  for (const nlohmann::json& m : r["matrices"]) {
    const bool block = m["name"].get<std::string>().starts_with("model.layers.");
    EXPECT_EQ(m["max_abs_diff"].get<double>() > 0, block) << m["name"];
    if (block) {
      EXPECT_LT(m["rel_rms"].get<double>(), 0.2) << m["name"];  // int3 codes on a 4-bit grid: ~0.1
    }
    max_abs = std::max(max_abs, m["max_abs_diff"].get<double>());
  }
  EXPECT_EQ(r["max_abs_diff"].get<double>(), max_abs);
  const nlohmann::json& kl = r["compare"];
  EXPECT_GT(kl["kld_mean"].get<double>(), 0);
  EXPECT_LT(kl["kld_mean"].get<double>(), 0.02);
  EXPECT_GT(kl["tokens"].get<size_t>(), 1000u);  // the scored positions
}

TEST(Convert, GgufKeepsEveryGridATypeHoldsThroughTheQkPermutation) {
  Scratch dir;
  const fs::path source = QuantizedFolder(dir, "q4_0", "int4:g32:scale=f16");  // Q4_0's grid
  ConvertJob j;
  j.in = source.string();
  j.out = (dir / "m.gguf").string();
  j.to = "GGUF";
  j.type = "Q8_0";  // for what no type holds as stored: the embedding table and lm_head
  j.threads = 2;
  const nlohmann::json r = RunConvertJob(j);
  EXPECT_EQ(r["exact_matrices"].get<size_t>(), kMatrices - 2);
  for (const nlohmann::json& m : r["matrices"]) {
    const std::string name = m["name"];
    if (name.starts_with("model.layers.")) {
      EXPECT_EQ(m["max_abs_diff"].get<double>(), 0) << name;
    } else {
      EXPECT_GT(m["max_abs_diff"].get<double>(), 0) << name;  // fp32 into Q8_0
    }
  }
}

// A GGUF file (llama.cpp's Q4_0 blocks, Q8_0 tables) goes to the engine formats as the Hugging Face folder it
// was converted from: its codes as stored (Q/K rows back in rotate-half order), config.json, and the
// tokenizer of its vocabulary (a SentencePiece tokenizer.model), which tokenizes as the file does.
TEST(Convert, GgufBecomesTheHuggingFaceFolderItCameFrom) {
  Scratch dir;
  ConvertJob j;
  j.in = QuantizedFolder(dir, "q4_0", "int4:g32:scale=f16").string();
  j.out = (dir / "m.gguf").string();
  j.to = "gguf";
  j.type = "Q8_0";
  j.threads = 2;
  (void)RunConvertJob(j);
  const fs::path text = dir / "kjv.txt";
  WriteFileAtomic(text, ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-test.txt").substr(0, 8000));
  for (const char* to : {"compressed-tensors", "lowbit"}) {
    SCOPED_TRACE(to);
    const fs::path out = dir / to;
    const nlohmann::json r = Convert(dir / "m.gguf", out, to, "", text.string());
    EXPECT_TRUE(r["exact"].get<bool>());
    EXPECT_EQ(r["compare"]["top1_agreement"].get<double>(), 1.0);
    EXPECT_LT(r["compare"]["kld_mean"].get<double>(), 1e-9);
    const nlohmann::json config = ReadJsonFile(out / "config.json");
    EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
    EXPECT_EQ(config["rms_norm_eps"], 1e-5);  // the float's decimal, as the source config has it
    const std::string words = "In the beginning God created the heaven and the earth.";
    EXPECT_TRUE(fs::exists(out / "tokenizer.model"));
    EXPECT_EQ(LoadTokenizer(out)->Encode(words, true), LoadTokenizer(dir / "m.gguf")->Encode(words, true));
    EXPECT_EQ(LoadTokenizer(out)->Encode(words, true), LoadTokenizer(kModelDir)->Encode(words, true));
  }
  for (const std::string& entry : dir.Entries()) EXPECT_EQ(entry.find("gguf-source"), std::string::npos) << entry;
  // GPTQ holds one scheme: the Q8_0 lm_head beside Q4_0 blocks cannot go, and nothing is left behind.
  ExpectError([&] { (void)Convert(dir / "m.gguf", dir / "gptq", "gptq"); }, {"lm_head", "one scheme", "--scheme"});
  for (const std::string& entry : dir.Entries()) EXPECT_EQ(entry.find("gguf-source"), std::string::npos) << entry;
  EXPECT_FALSE(fs::exists(dir / "gptq"));
}

TEST(Convert, BadOptionsFailBeforeAnythingIsWritten) {
  Scratch dir;
  ExpectError([&] { (void)Convert(kModelDir, dir / "x", "exl2"); }, {"--to 'exl2'", "gptq"});
  ExpectError([&] { (void)Convert(kModelDir, dir / "x.gguf", "gguf", "int4:g128"); }, {"--scheme", "--type"});
  ExpectError([&] { (void)Convert(kModelDir, dir / "x", "lowbit", "int4:g128"); }, {"--scheme", "every scheme"});
  ExpectError([&] { (void)Convert(kModelDir, dir / "x", "awq", "", "/nonexistent.txt"); }, {"/nonexistent.txt"});
  ExpectError([&] { (void)Convert(kModelDir, dir / "x", "awq", "int3:g128"); }, {"--scheme", "bits"});
  EXPECT_TRUE(dir.Entries().empty());
  // A float model has nothing to repack: the engine formats say so.
  ExpectError([&] { (void)Convert(kModelDir, dir / "x", "gptq"); }, {"no linear is quantized"});
  EXPECT_TRUE(dir.Entries().empty());
}

}  // namespace
}  // namespace lowbit
