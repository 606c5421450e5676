// The library calls both front ends (the CLI and the Python package) stand on: text generation pulled a
// token at a time, the quantization job with its stop and abandon paths, and the flags-to-scheme step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/gguf.h"
#include "io/gguf_export.h"
#include "io/model_loader.h"
#include "tokenizer/gguf_vocab_export.h"
#include "pipeline/generate.h"
#include "pipeline/quantize_job.h"
#include "pipeline/session.h"
#include "test_util.h"
#include "quant/scheme.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
const std::string kModel = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("lowbit_pipeline_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(TextGenerator, PullsTheSameTokensGenerateStreams) {
  const LoadedModel m = LoadModelWithTokenizer(kModel, "");
  std::string streamed;
  const GenerationResult whole = Generate(m, "And God said", false, 10, SamplerOptions{}, 1,
                                          [&](std::string_view piece) { streamed += piece; });
  TextGenerator generator(m, "And God said", false, 10, SamplerOptions{}, 1);
  std::string pulled;
  size_t count = 0;
  while (const auto token = generator.Next()) {
    pulled += token->text;
    ++count;
  }
  EXPECT_FALSE(generator.Next());  // stays finished
  EXPECT_EQ(pulled, streamed);
  EXPECT_EQ(pulled, whole.text);
  EXPECT_EQ(count, whole.generated);
  EXPECT_LE(count, 10u);
  EXPECT_GT(count, 0u);
  EXPECT_EQ(generator.result().prompt_tokens, m.tokenizer->Encode("And God said", true).size());
}

TEST(TextGenerator, ZeroBudgetGeneratesNothingAndLongPromptsAreErrors) {
  const LoadedModel m = LoadModelWithTokenizer(kModel, "");
  TextGenerator none(m, "And God said", false, 0, SamplerOptions{}, 1);
  EXPECT_FALSE(none.Next());
  std::string long_prompt;
  for (size_t i = 0; i < m.model.config.max_position; ++i) long_prompt += " and";
  EXPECT_THROW(TextGenerator(m, long_prompt, false, 4, SamplerOptions{}, 1), Error);
}

QuantizeJob RtnJob(const fs::path& out) {
  QuantizeJob job;
  job.model = kModel;
  job.out = out.string();
  job.recipe.format = "int4:g64";
  job.threads = 1;
  return job;
}

TEST(QuantizeJob, WritesTheFolderAndReturnsTheCard) {
  const fs::path dir = TempDir("card");
  std::vector<std::string> tensors;
  QuantizeJob job = RtnJob(dir / "out");
  job.progress = [&](size_t, size_t blocks, const std::string& tensor) {
    EXPECT_EQ(blocks, 6u);  // the bundled model's blocks
    tensors.push_back(tensor);
  };
  const QuantizeOutcome outcome = RunQuantizeJob(job);
  EXPECT_EQ(outcome.card["scheme"], "int4:g64:scale=f16");
  EXPECT_NEAR(outcome.card["bits_per_weight"].get<double>(), 4.25, 1e-12);  // 4 + 16 / 64
  EXPECT_TRUE(fs::exists(dir / "out" / "recipe.json"));
  EXPECT_EQ(tensors.back(), "");  // the final (blocks, blocks, "") call
  ASSERT_EQ(tensors.size(), 6u * 7 + 2);  // 7 linears per block, lm_head (int8 by default), then the end
  EXPECT_EQ(tensors[6 * 7], "lm_head");
  fs::remove_all(dir);
}

TEST(QuantizeJob, AProgressCallbackThatThrowsAbandonsTheRunWithoutOutput) {
  const fs::path dir = TempDir("abandon");
  QuantizeJob job = RtnJob(dir / "out");
  job.progress = [](size_t block, size_t, const std::string&) {
    if (block == 2) throw std::runtime_error("stop");
  };
  EXPECT_THROW(RunQuantizeJob(job), std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(QuantizeJob, StopAfterLeavesAResumableState) {
  const fs::path dir = TempDir("stop");
  QuantizeJob job = RtnJob(dir / "out");
  job.stop_after = 2;
  const QuantizeOutcome stopped = RunQuantizeJob(job);
  EXPECT_TRUE(stopped.card.is_null());
  EXPECT_EQ(stopped.stopped_after, 2u);
  EXPECT_EQ(stopped.partial, dir / "out.partial");
  EXPECT_FALSE(fs::exists(dir / "out"));
  job.stop_after = 0;
  job.resume = true;
  const QuantizeOutcome resumed = RunQuantizeJob(job);
  EXPECT_EQ(resumed.card["resumed_at_block"], 2);
  EXPECT_FALSE(fs::exists(dir / "out.partial"));
  fs::remove_all(dir);
}

TEST(QuantizeJob, TargetsAreCheckedBeforeAnyWork) {
  const fs::path dir = TempDir("targets");
  QuantizeJob job = RtnJob(dir / "out.gguf");
  job.save_as = "gguf:Q4_0";
  job.recipe.format = "int4:g128";
  EXPECT_THROW(
      {
        try {
          RunQuantizeJob(job);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("no exact home in Q4_0"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  job.save_as = "gguf:nope";
  EXPECT_THROW(RunQuantizeJob(job), Error);
  EXPECT_EQ(DefaultFormatFor("gguf:q8_0", "x.gguf"), "int8:g32:scale=f16");
  EXPECT_EQ(DefaultFormatFor("lowbit", "x"), "");
  EXPECT_THROW(DefaultFormatFor("gguf:Q4_0", "x.bin"), Error);  // must end in .gguf
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// llama-quantize's --token-embedding-type / --output-tensor-type on a calibrated-run GGUF: the two
// tables take the named types past the mix (Q4_0's would be Q4_0 and Q6_K); the recipe's linears keep
// its grid. Misuse fails before any work.
TEST(QuantizeJob, GgufTableTypesOverrideTheMix) {
  const fs::path dir = TempDir("table-types");
  QuantizeJob job = RtnJob(dir / "out.gguf");
  job.save_as = "gguf:Q4_0";
  job.recipe.format = "";
  job.token_embedding_type = "q8_0";
  job.output_tensor_type = "Q5_K";
  (void)RunQuantizeJob(job);
  const GgufFile file = GgufFile::Open(dir / "out.gguf");
  EXPECT_EQ(file.FindTensor("token_embd.weight")->ggml_type, kGgmlQ8_0);
  EXPECT_EQ(file.FindTensor("output.weight")->ggml_type, kGgmlQ5_K);
  EXPECT_EQ(file.FindTensor("blk.0.ffn_down.weight")->ggml_type, kGgmlQ4_0);
  fs::remove_all(dir);
  fs::create_directories(dir);
  job.token_embedding_type = "Q9_K";
  testing_util::ExpectError([&] { (void)RunQuantizeJob(job); }, {"--token-embedding-type", "Q9_K"});
  job.token_embedding_type = "Q6_K";
  job.save_as = "lowbit";
  job.out = (dir / "out").string();
  job.recipe.format = "int4:g64";
  testing_util::ExpectError([&] { (void)RunQuantizeJob(job); }, {"--save-as gguf:TYPE"});
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// A GGUF file (the bundled model as llama.cpp F32) quantizes into a Hugging Face-family folder as the folder it
// came from: GPTQ calibrated on the same text (its tokenizer read from the file) gives the same codes, Q/K rows
// back in Hugging Face's order, and the written folder names the architecture and carries a tokenizer.
TEST(QuantizeJob, GgufSourcesQuantizeAsTheFolderTheyCameFrom) {
  const fs::path dir = TempDir("gguf-source");
  GgufExportOptions e;
  e.type = "F32";
  e.metadata = GgufVocabularyFor(kModel, LoadModel(kModel).config);
  StreamedModel streamed = OpenModel(kModel);
  ExportGguf(streamed, dir / "m.gguf", e);
  const fs::path calib = dir / "calib.txt";
  WriteFileAtomic(calib, ReadTextFile(LOWBIT_SOURCE_DIR "/data/kjv-train.txt").substr(0, 20000));
  Model quantized[2];
  for (int from_gguf = 0; from_gguf < 2; ++from_gguf) {
    QuantizeJob job = RtnJob(dir / (from_gguf ? "from-gguf" : "from-folder"));
    if (from_gguf) job.model = (dir / "m.gguf").string();
    job.recipe.method = "gptq";
    job.recipe.calib_file = calib.string();
    job.recipe.calib_samples = 4;
    job.recipe.calib_len = 64;
    job.save_as = "compressed-tensors";
    job.recipe.lm_head = "none";
    (void)RunQuantizeJob(job);
    quantized[from_gguf] = LoadModel(job.out);
  }
  for (size_t i = 0; i < quantized[0].weights.layers.size(); ++i) {
    const auto a = BlockLinears(quantized[0].weights.layers[i]), b = BlockLinears(quantized[1].weights.layers[i]);
    for (size_t k = 0; k < a.size(); ++k) {
      const QuantizedTensor &qa = std::get<QuantizedTensor>(a[k].linear->weight),
                            &qb = std::get<QuantizedTensor>(b[k].linear->weight);
      EXPECT_TRUE(std::ranges::equal(qa.codes(), qb.codes()) && std::ranges::equal(qa.scale_bytes(), qb.scale_bytes()))
          << i << " " << a[k].name;
    }
  }
  EXPECT_EQ(ReadJsonFile(dir / "from-gguf" / "config.json")["architectures"][0], "LlamaForCausalLM");
  EXPECT_TRUE(fs::exists(dir / "from-gguf" / "tokenizer.model"));
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find("gguf-source"), std::string::npos) << entry.path();
  fs::remove_all(dir);
}

TEST(SchemeTextFromFlags, FoldsGroupAndAsym) {
  EXPECT_EQ(SchemeTextFromFlags("int4", 128, true), "int4:g128:asym");
  EXPECT_EQ(SchemeTextFromFlags("int8", -1, false), "int8:channel");
  EXPECT_EQ(SchemeTextFromFlags("nvfp4", 0, false), "nvfp4");
}

}  // namespace
}  // namespace lowbit
