// `lowbit quantize --recipe`: per-tensor overrides (first match wins) and the ignore list, as
// they land in the saved checkpoint and its recipe card; bad regexes and keys are errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file_util.h"
#include "io/safetensors.h"
#include "model/recipe.h"
#include "quant/registry.h"
#include "io/hf_model.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

using testing_util::RunLowbit;
using Result = testing_util::RunResult;

class RecipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lowbit_recipe_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const nlohmann::json& j) {
    const fs::path p = dir_ / name;
    WriteFileAtomic(p, j.dump());
    return p.string();
  }
  fs::path dir_;
};

std::string SchemeOf(const Linear& l) {
  const auto* q = std::get_if<QuantizedTensor>(&l.weight);
  return q ? q->scheme().ToString() : "dense";
}

TEST_F(RecipeTest, OverridesAndIgnoreLandInTheCheckpoint) {
  const nlohmann::json recipe = {
      {"method", "rtn"},
      {"format", "int4:g128"},
      {"overrides",
       {{{"match", R"(^model\.layers\.0\.mlp\.down_proj$)"}, {"format", "int8:channel"}},
        {{"match", R"(down_proj)"}, {"format", "int6:g64"}}}},  // layer 0 matched the rule above first
      {"ignore", {R"(layers\.1\.self_attn\.q_proj)"}}};
  const std::string out = (dir_ / "out").string();
  const Result r = RunLowbit("quantize models/kjv-llama-7m -o " + out + " --recipe " + Write("r.json", recipe));
  ASSERT_EQ(r.status, 0) << r.out;
  const Model m = LoadHfModel(out);
  const std::string int4 = ParseScheme("int4:g128").ToString(), int8 = ParseScheme("int8:channel").ToString(),
                    int6 = ParseScheme("int6:g64").ToString();
  EXPECT_EQ(SchemeOf(m.weights.layers[0].w_down), int8);
  EXPECT_EQ(SchemeOf(m.weights.layers[1].wq), "dense");
  EXPECT_EQ(SchemeOf(m.weights.layers[1].wk), int4);
  EXPECT_EQ(SchemeOf(m.weights.layers[0].wq), int4);
  for (size_t l = 1; l < m.weights.layers.size(); ++l) EXPECT_EQ(SchemeOf(m.weights.layers[l].w_down), int6) << l;
  EXPECT_EQ(SchemeOf(m.weights.lm_head), ParseScheme(kDefaultLmHeadFormat).ToString());
  // The ignored q_proj is stored dense with its original values.
  const Model base = LoadHfModel(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  EXPECT_EQ(std::get<DenseMatrix>(m.weights.layers[1].wq.weight).values,
            std::get<DenseMatrix>(base.weights.layers[1].wq.weight).values);
  const nlohmann::json card = nlohmann::json::parse(ReadTextFile(fs::path(out) / "recipe.json"));
  EXPECT_EQ(card["recipe"]["overrides"], recipe["overrides"]);
  EXPECT_EQ(card["recipe"]["ignore"], recipe["ignore"]);
}

TEST_F(RecipeTest, BadRegexesAndKeysNameTheRecipeAndThePattern) {
  const std::string out = (dir_ / "out").string();
  const std::string bad_regex = Write("bad.json", {{"format", "int4"}, {"ignore", {"layers.(1"}}});
  Result r = RunLowbit("quantize models/kjv-llama-7m -o " + out + " --recipe " + bad_regex);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find(bad_regex), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers.(1"), std::string::npos) << r.out;
  const std::string bad_override =
      Write("bad2.json", {{"format", "int4"}, {"overrides", {{{"match", "x[a-"}, {"format", "int8"}}}}});
  r = RunLowbit("quantize models/kjv-llama-7m -o " + out + " --recipe " + bad_override);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("x[a-"), std::string::npos) << r.out;
  const std::string bad_key =
      Write("bad3.json", {{"format", "int4"}, {"overrides", {{{"match", "x"}, {"format", "int8"}, {"bits", 8}}}}});
  r = RunLowbit("quantize models/kjv-llama-7m -o " + out + " --recipe " + bad_key);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("unknown key 'bits'"), std::string::npos) << r.out;
  const std::string bad_method =
      Write("bad4.json", {{"format", "int4"}, {"overrides", {{{"match", "x"}, {"format", "int8"}, {"method", "nope"}}}}});
  r = RunLowbit("quantize models/kjv-llama-7m -o " + out + " --recipe " + bad_method);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find(bad_method + ": overrides[0]: unknown quantization method 'nope'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

// lm_head's codes are RTN's on the source's output matrix, in the given format.
void ExpectRtnLmHead(const Model& m, const std::vector<float>& source, const std::string& format) {
  const auto* q = std::get_if<QuantizedTensor>(&m.weights.lm_head.weight);
  ASSERT_NE(q, nullptr);
  const QuantScheme scheme = ParseScheme(format);
  const QuantizedTensor want = BuiltinMethods().Create("rtn", nlohmann::json::object(), scheme)->Quantize(
      {"lm_head", source, m.config.vocab_size, m.config.dim, nullptr, nullptr}, scheme);
  EXPECT_EQ(q->scheme().ToString(), scheme.ToString());
  EXPECT_TRUE(std::ranges::equal(q->codes(), want.codes()));
  EXPECT_TRUE(std::ranges::equal(q->scale_bytes(), want.scale_bytes()));
}

// The output matrix is quantized (RTN, after the blocks) to int8 on Q8_0's grid by default when the
// output is a lowbit folder, to the recipe's lm_head when it names one, and kept when it says none.
TEST_F(RecipeTest, LmHeadIsInt8ByDefaultTheRecipesFormatOrKept) {
  const Model base = LoadHfModel(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  const std::vector<float>& lm_head = std::get<DenseMatrix>(base.weights.lm_head.weight).values;
  const std::string args = "quantize models/kjv-llama-7m --format int4:g64 ";
  const std::string by_default = (dir_ / "default").string();
  Result r = RunLowbit(args + "-o " + by_default);
  ASSERT_EQ(r.status, 0) << r.out;
  ExpectRtnLmHead(LoadHfModel(by_default), lm_head, "int8:g32:scale=f16");
  const nlohmann::json card = nlohmann::json::parse(ReadTextFile(fs::path(by_default) / "recipe.json"));
  EXPECT_EQ(card["recipe"]["lm_head"], "int8:g32:scale=f16");
  EXPECT_EQ(card["tensors"].back()["name"], "lm_head");
  EXPECT_GT(card["tensors"].back()["weight_mse"].get<double>(), 0);

  const std::string recipe = Write("r.json", {{"format", "int4:g64"}, {"lm_head", "int6:g32"}});
  const std::string by_recipe = (dir_ / "recipe").string();
  r = RunLowbit("quantize models/kjv-llama-7m --recipe " + recipe + " -o " + by_recipe);
  ASSERT_EQ(r.status, 0) << r.out;
  ExpectRtnLmHead(LoadHfModel(by_recipe), lm_head, "int6:g32");

  const std::string kept = (dir_ / "kept").string();
  r = RunLowbit(args + "--lm-head none -o " + kept);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(std::get<DenseMatrix>(LoadHfModel(kept).weights.lm_head.weight).values, lm_head);

  // A 16-bit body keeps lm_head as it is: the default never lowers the output matrix below the body.
  const std::string wide = (dir_ / "wide").string();
  r = RunLowbit("quantize models/kjv-llama-7m --format bf16 -o " + wide);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(LoadHfModel(wide).weights.lm_head.quantized());
}

TEST_F(RecipeTest, LmHeadOfATiedModelBecomesItsOwnTensorOnlyWhenAsked) {
  // The bundled model with tied embeddings: no lm_head.weight, config.json says so.
  const fs::path tied = dir_ / "tied";
  fs::create_directories(tied);
  const fs::path source = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";
  for (const auto& e : fs::directory_iterator(source))
    if (e.path().filename() != "model.safetensors" && e.path().filename() != "config.json")
      fs::copy_file(e.path(), tied / e.path().filename());
  const SafetensorsFile st = SafetensorsFile::Open(source / "model.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const TensorView& t : st.tensors())
    if (t.name != "lm_head.weight") tensors.push_back({t.name, t.dtype, t.shape, t.data});
  WriteSafetensors(tied / "model.safetensors", tensors, st.metadata());
  nlohmann::json config = nlohmann::json::parse(ReadTextFile(source / "config.json"));
  config["tie_word_embeddings"] = true;
  WriteFileAtomic(tied / "config.json", config.dump(2));

  const std::string args = "quantize " + tied.string() + " --format int4:g64 ";
  const std::string kept = (dir_ / "kept").string(), own = (dir_ / "own").string();
  Result r = RunLowbit(args + "-o " + kept);
  ASSERT_EQ(r.status, 0) << r.out;
  const Model k = LoadHfModel(kept);
  EXPECT_TRUE(k.config.tie_embeddings);
  EXPECT_FALSE(k.weights.lm_head.quantized());
  r = RunLowbit(args + "--lm-head int8:g32 -o " + own);
  ASSERT_EQ(r.status, 0) << r.out;
  const Model o = LoadHfModel(own);
  EXPECT_FALSE(o.config.tie_embeddings);
  EXPECT_EQ(nlohmann::json::parse(ReadTextFile(fs::path(own) / "config.json"))["tie_word_embeddings"], false);
  ExpectRtnLmHead(o, k.weights.embed.Widened(), "int8:g32");
  EXPECT_EQ(o.weights.embed.Widened(), k.weights.embed.Widened());
}

TEST_F(RecipeTest, BadLmHeadFormatsAndTargetsThatCannotHoldOneAreErrors) {
  const std::string args = "quantize models/kjv-llama-7m --format int4:g32 -o " + (dir_ / "out").string();
  Result r = RunLowbit(args + " --lm-head int9");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("lm_head 'int9' (a format, or none)"), std::string::npos) << r.out;
  const std::string recipe = Write("bad.json", {{"format", "int4"}, {"lm_head", "int9"}});
  r = RunLowbit("quantize models/kjv-llama-7m -o " + (dir_ / "out").string() + " --recipe " + recipe);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(recipe + ": lm_head"), std::string::npos) << r.out;
  r = RunLowbit(args + " --save-as awq --lm-head int4:g32");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--save-as awq: lm_head 'int4:g32': AWQ checkpoints keep lm_head in full precision"),
            std::string::npos) << r.out;
  r = RunLowbit("quantize models/kjv-llama-7m --save-as gguf:Q4_0 --lm-head int8:g32 -o " +
                (dir_ / "out.gguf").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("lm_head 'int8:g32': the file type's mix chooses output.weight's type"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_FALSE(fs::exists(dir_ / "out.gguf"));
}

// A rotated run resumes too: the finished blocks come from the checkpoint already rotated, the
// later ones from the source, rotated as the run reaches them.
TEST_F(RecipeTest, StoppedRotatedRunResumesToTheSameModel) {
  const std::string args = "quantize models/kjv-llama-7m --method rtn --format int4:g32 --rotate --rotate-seed 3 ";
  const std::string full = (dir_ / "full").string(), resumed = (dir_ / "resumed").string();
  Result r = RunLowbit(args + "-o " + full);
  ASSERT_EQ(r.status, 0) << r.out;
  r = RunLowbit(args + "-o " + resumed + " --stop-after 1");
  ASSERT_EQ(r.status, 0) << r.out;
  const fs::path hidden = resumed + ".partial/hidden.1.bin";
  const std::string saved = ReadTextFile(hidden);
  WriteFileAtomic(hidden, saved.substr(0, 5));  // damaged: the run refuses, naming the file
  r = RunLowbit(args + "-o " + resumed + " --resume");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("hidden.1.bin: its contents changed since the run saved it"), std::string::npos) << r.out;
  WriteFileAtomic(hidden, saved);
  r = RunLowbit(args + "-o " + resumed + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;
  const Model a = LoadHfModel(full), b = LoadHfModel(resumed);
  EXPECT_EQ(a.weights.embed.Widened(), b.weights.embed.Widened());
  for (size_t l = 0; l < a.weights.layers.size(); ++l) {
    const auto& qa = std::get<QuantizedTensor>(a.weights.layers[l].w_down.weight);
    const auto& qb = std::get<QuantizedTensor>(b.weights.layers[l].w_down.weight);
    EXPECT_TRUE(std::ranges::equal(qa.codes(), qb.codes())) << "layer " << l;
    EXPECT_EQ(b.weights.layers[l].w_down.input_hadamard, 256u);
  }
}

// An interrupted run (--stop-after) continues with --resume to the very checkpoint an uninterrupted
// run writes; without --resume, or with another calibration, it refuses. The interrupted run
// keeps its calibration activations in a spill file (--max-ram far below their size): results
// and checkpoints must not change.
TEST_F(RecipeTest, StoppedRunResumesToTheSameCheckpoint) {
  const std::string args =
      "quantize models/kjv-llama-7m --method gptq --format int4:g128 --calib data/kjv-train.txt --calib-len 64 --threads 2 ";
  const std::string full = (dir_ / "full").string(), resumed = (dir_ / "resumed").string();
  Result r = RunLowbit(args + "--calib-samples 4 -o " + full);
  ASSERT_EQ(r.status, 0) << r.out;

  r = RunLowbit(args + "--calib-samples 4 -o " + resumed + " --stop-after 2 --max-ram 16K");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--resume"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(resumed));
  EXPECT_TRUE(fs::exists(resumed + ".partial/progress.json"));
  // The checkpoint holds the finished blocks only: the rest is read from the source again.
  EXPECT_EQ(LoadHfModel(resumed + ".partial/model.2").config.n_layers, 2u);

  r = RunLowbit(args + "--calib-samples 4 -o " + resumed);  // forgot --resume
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--resume"), std::string::npos) << r.out;
  r = RunLowbit(args + "--calib-samples 5 -o " + resumed + " --resume");  // another calibration
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("another recipe"), std::string::npos) << r.out;
  // A changed byte in the saved state (an edit, a bad copy) is refused, not resumed from.
  const fs::path hidden = resumed + ".partial/hidden.2.bin";
  std::string bytes = ReadTextFile(hidden);
  bytes[bytes.size() / 2] ^= 1;
  WriteFileAtomic(hidden, bytes);
  r = RunLowbit(args + "--calib-samples 4 -o " + resumed + " --resume");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(hidden.string() + ": its contents changed since the run saved it (checksum mismatch)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(resumed));
  bytes[bytes.size() / 2] ^= 1;
  WriteFileAtomic(hidden, bytes);

  r = RunLowbit(args + "--calib-samples 4 -o " + resumed + " --resume --max-ram 16K --checkpoint-every 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(resumed + ".partial"));
  const nlohmann::json card = nlohmann::json::parse(ReadTextFile(fs::path(resumed) / "recipe.json"));
  EXPECT_EQ(card["resumed_at_block"], 2);
  EXPECT_EQ(card["tensors"].size(), 43u);  // the first run's blocks are carried over; then lm_head
  EXPECT_GT(card["activations"]["spilled_bytes"].get<uint64_t>(), 0u);

  const Model a = LoadHfModel(full), b = LoadHfModel(resumed);
  for (size_t l = 0; l < a.weights.layers.size(); ++l) {
    const LayerWeights &la = a.weights.layers[l], &lb = b.weights.layers[l];
    for (const auto& [x, y] : {std::pair{&la.wq, &lb.wq}, {&la.wo, &lb.wo}, {&la.w_down, &lb.w_down}}) {
      const auto& qa = std::get<QuantizedTensor>(x->weight);
      const auto& qb = std::get<QuantizedTensor>(y->weight);
      EXPECT_TRUE(std::ranges::equal(qa.codes(), qb.codes())) << "layer " << l;
      EXPECT_TRUE(std::ranges::equal(qa.scale_bytes(), qb.scale_bytes())) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace lowbit
