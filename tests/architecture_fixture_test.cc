// One tiny random model per architecture, built by transformers from a config and committed with
// transformers' own fp32 logits (tests/interop/hf_architectures.py writes them; `make test-interop`
// checks transformers still gives the same): Llama with Llama-3.1 rope scaling and tied
// embeddings, Mistral, Qwen2 (q/k/v biases), Qwen3 (q/k norms, head_dim apart from hidden / heads),
// Phi-3 (fused projections, longrope's long factors, partial rotary), Gemma (GeGLU, (1 + w)
// norms, scaled embeddings), Gemma 2 (output norms, soft-capping, local/global layers) and Gemma 3
// (q/k norms, local and linearly scaled global RoPE), and Gemma 3's language model inside an image-text
// Gemma3ForConditionalGeneration checkpoint (language_model.* names, a vision tower lowbit skips), and
// the mixtures of experts Mixtral, Qwen2-MoE (shared expert; and with a dense layer) and Qwen3-MoE. lowbit's logits must match at every position
// within 1e-4 of the logit scale, loaded from the folder and after a round trip through lowbit's
// quantized folder and (for the architectures it exports there) GGUF F32.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "core/error.h"
#include "io/engine_export.h"
#include "io/gguf.h"
#include "io/gguf_export.h"
#include "io/gguf_writer.h"
#include "io/gguf_hf_config.h"
#include "io/gguf_model.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "model/quantize_weights.h"
#include "model/forward.h"
#include "model/ptq.h"
#include "model/rotation.h"
#include "pipeline/convert_job.h"
#include "plan/arch.h"
#include "plan/plan.h"
#include "quant/scheme.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = LOWBIT_SOURCE_DIR "/tests/data/architectures";
using testing_util::ExpectError;

// Max |lowbit - reference| over every logit, relative to the largest |reference logit|.
double RelativeError(const Model& model, const nlohmann::json& reference) {
  const auto tokens = reference["tokens"].get<std::vector<int32_t>>();
  const auto expected = reference["logits"].get<std::vector<std::vector<float>>>();
  Engine engine(model, 2);
  KvCache cache = engine.NewCache(tokens.size());
  const std::vector<float> logits = engine.Forward(cache, tokens, /*all_logits=*/true);
  const size_t vocab = model.config.vocab_size;
  EXPECT_EQ(logits.size(), tokens.size() * vocab);
  double max_diff = 0, scale = 0;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (size_t v = 0; v < vocab; ++v) {
      max_diff = std::max(max_diff, std::abs(double(logits[t * vocab + v]) - expected[t][v]));
      scale = std::max(scale, std::abs(double(expected[t][v])));
    }
  return max_diff / std::max(scale, 1.0);
}

const std::set<std::string> kGgufArchitectures = {
    "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "gemma3mm", "mistral3mm", "mixtral",
    "qwen2_moe", "qwen3_moe", "granite", "smollm3", "olmo2", "olmo3", "exaone4", "seed_oss", "ernie4_5", "ernie4_5_moe",
    "glm4", "glm", "glm4_moe", "glm4_moe_lite", "hunyuan_v1_dense", "hunyuan_v1_moe", "cohere", "cohere2", "qwen2_5_vl",
    "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe", "granitemoe", "granitemoeshared", "granite4", "ministral3mm",
    "mistral4mm", "minimax_m2", "olmoe"};

class ArchitectureFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchitectureFixture, LogitsMatchTransformers) {
  const fs::path folder = kFixtures / GetParam();
  const nlohmann::json reference = ReadJsonFile(folder / "reference.json");
  const Model model = LoadModel(folder.string());
  const std::string arch = reference["architecture"].get<std::string>();  // image-text Gemma 3 runs its text model
  const MultimodalText* mm = FindMultimodalText(arch, TextModelType(ReadJsonFile(folder / "config.json")));
  EXPECT_EQ(model.config.architecture, mm ? mm->text : arch);
  const double error = RelativeError(model, reference);
  std::cout << GetParam() << ": max |logit difference| / max |logit| = " << error << "\n";
  EXPECT_LT(error, 1e-4) << GetParam();
}

TEST_P(ArchitectureFixture, SameLogitsAfterSavingAsLowbitFolderAndGguf) {
  const fs::path folder = kFixtures / GetParam();
  const nlohmann::json reference = ReadJsonFile(folder / "reference.json");
  const Model model = LoadModel(folder.string());
  testing_util::ScratchDir dir("lowbit-arch-fixture");
  SaveQuantizedModel(model, dir / "saved", folder, nlohmann::json::object());
  EXPECT_LT(RelativeError(LoadModel((dir / "saved").string()), reference), 1e-4) << GetParam() << " lowbit folder";
  if (!kGgufArchitectures.contains(GetParam())) return;
  GgufExportOptions options;
  options.type = "F32";
  StreamedModel streamed = OpenModel(folder);
  ExportGguf(streamed, dir / "model.gguf", options);
  EXPECT_LT(RelativeError(LoadModel((dir / "model.gguf").string()), reference), 1e-4) << GetParam() << " GGUF";
}

// Back from GGUF: the file as the Hugging Face folder it came from (config.json, tokenizer, Q/K rows in
// the family's order, rotate-half but for ERNIE 4.5, GLM, Cohere and DeepSeek; pipeline/gguf_source.h), written by `convert --to lowbit`, with transformers' logits
// and the architecture transformers built it as (these files have no vocabulary: convert_test.cc checks
// the tokenizer). Another general.architecture is an error naming it.
TEST_P(ArchitectureFixture, GgufConvertsBackToTheHuggingFaceFolder) {
  if (!kGgufArchitectures.contains(GetParam())) GTEST_SKIP() << "not exported to GGUF";
  const fs::path folder = kFixtures / GetParam();
  const nlohmann::json reference = ReadJsonFile(folder / "reference.json");
  testing_util::ScratchDir dir("lowbit-arch-fixture-back");
  GgufExportOptions options;
  options.type = "F32";
  StreamedModel streamed = OpenModel(folder);
  ExportGguf(streamed, dir / "model.gguf", options);
  ConvertJob job;
  job.in = (dir / "model.gguf").string();
  job.out = (dir / "back").string();
  job.to = "lowbit";
  const nlohmann::json r = RunConvertJob(job);
  EXPECT_TRUE(r["exact"].get<bool>()) << GetParam();
  EXPECT_EQ(dir.Entries().size(), 2u);  // the staging folder is gone
  const Model back = LoadModel((dir / "back").string());
  // GGUF's llama is Llama's (Mistral cannot be told apart), granite also Granite 4.0's without experts, deepseek2
  // with sigmoid gating DeepSeek-V3's (GLM-4.7-Flash's too), and an image-text model's file its language model alone.
  const nlohmann::json config = ReadJsonFile(folder / "config.json");
  const std::string arch = config["architectures"][0];
  const MultimodalText* mm = FindMultimodalText(arch, TextModelType(config));
  const std::string text = mm ? mm->text : arch;
  const std::string back_arch = text == "MistralForCausalLM"            ? "LlamaForCausalLM"
                                : text == "GraniteMoeHybridForCausalLM" ? "GraniteForCausalLM"
                                : text == "Glm4MoeLiteForCausalLM"      ? "DeepseekV3ForCausalLM"
                                                                        : text;
  EXPECT_EQ(back.config.architecture, back_arch) << GetParam();
  EXPECT_EQ(back.config.rope_style, ReadHfConfig(folder / "config.json").rope_style) << GetParam();  // the family's
  EXPECT_LT(RelativeError(back, reference), 1e-4) << GetParam();
  if (GetParam() == "llama")
    ExpectError([&] { (void)HfConfigOfGguf(back.config, "starcoder2", "float16", "x.gguf"); },
                {"x.gguf", "general.architecture 'starcoder2'", "qwen3moe"});
}

// `plan --model` counts every weight the checkpoint stores: each norm (GLM-4's four, OLMo 2's two, Cohere's one),
// q/k norms per head or as wide as the projections, biases, experts, latent attention. Not compared: the image-text
// checkpoints (their vision towers), and Qwen2-MoE's shared expert, which the plan rounds up to whole experts.
TEST_P(ArchitectureFixture, PlanCountsEveryStoredWeight) {
  const std::string arch = ReadJsonFile(kFixtures / GetParam() / "config.json")["architectures"][0];
  if (FindMultimodalText(arch)) GTEST_SKIP() << "the vision tower is not counted";
  const fs::path folder = kFixtures / GetParam();
  const SafetensorsModel st = SafetensorsModel::Open(folder);
  uint64_t stored = 0;
  for (const std::string& name : st.names()) stored += st.Get(name).numel();
  EXPECT_EQ(SpecFromArch(ArchFromPath(folder)).TotalParams(), stored) << GetParam();
}

// The last layer runs its MLP only for the rows whose logits are asked for: in a batch of a prompt that
// wants its last logits and one that wants all of them, each gets what a lone all-logits pass gives.
TEST_P(ArchitectureFixture, LastLayerSkipsRowsWithoutLogits) {
  const Model model = LoadModel((kFixtures / GetParam()).string());
  const auto tokens = ReadJsonFile(kFixtures / GetParam() / "reference.json")["tokens"].get<std::vector<int32_t>>();
  Engine engine(model, 2);
  KvCache whole = engine.NewCache(tokens.size());
  const std::vector<float> all = engine.Forward(whole, tokens, /*all_logits=*/true);
  const size_t vocab = model.config.vocab_size, n = tokens.size(), m = n / 2;
  KvCache a = engine.NewCache(n), b = engine.NewCache(n);  // same capacity: Phi-3's RoPE factors follow it
  std::vector<float> last, first_half;
  BatchItem items[] = {{&a, tokens, false, &last}, {&b, std::span(tokens).first(m), true, &first_half}};
  engine.Forward(items);
  ASSERT_EQ(last.size(), vocab);
  ASSERT_EQ(first_half.size(), m * vocab);
  double diff = 0;
  for (size_t v = 0; v < vocab; ++v) diff = std::max(diff, std::abs(double(last[v]) - all[(n - 1) * vocab + v]));
  for (size_t i = 0; i < m * vocab; ++i) diff = std::max(diff, std::abs(double(first_half[i]) - all[i]));
  EXPECT_LT(diff, 1e-4) << GetParam();
  EXPECT_EQ(a.size(), n);  // every token's K/V cached
}

// Calibrated GGUF (GPTQ onto the ggml grids) where a tensor holds several linears: Phi-3's and GLM-4's ffn_up (gate
// rows, then up rows) and the experts' ffn_*_exps, each expert calibrated on the tokens routed to it.
// Every linear tensor is written by the calibrator, and the file's logits are closer to the model's than
// the direct encoding of the same types (llama-quantize's).
TEST(ArchitectureFixtureGguf, CalibratedBeatsDirectEncoding) {
  testing_util::ScratchDir dir("lowbit-arch-calibrated");
  for (const char* name : {"phi3", "glm4", "mixtral", "qwen2_moe", "qwen3_moe"}) {
    const fs::path folder = kFixtures / name;
    const nlohmann::json reference = ReadJsonFile(folder / "reference.json");
    const Model model = LoadModel(folder.string());
    std::vector<std::vector<int32_t>> windows(24, std::vector<int32_t>(32));
    uint64_t state = 99;
    for (auto& w : windows)
      for (int32_t& t : w) t = static_cast<int32_t>((state = state * 6364136223846793005ULL + 1) >> 33) % 96;
    GgufExportOptions o;
    o.type = "Q4_0";
    StreamedModel direct = OpenModel(folder);
    ExportGguf(direct, dir / "direct.gguf", o);
    o.calibration = windows;
    StreamedModel calibrated = OpenModel(folder);
    const GgufExportResult r = ExportGguf(calibrated, dir / "calibrated.gguf", o);
    size_t written = 0, matrices = 0;
    for (const GgufExportedTensor& t : r.tensors) {
      written += t.gptq;
      matrices += t.ne.size() > 1 && t.name != "token_embd.weight" && t.name.find("ffn_gate_inp") == std::string::npos;
    }
    EXPECT_EQ(written, matrices) << name;
    const auto mse = [&](const Model& m) {  // mean squared logit difference to transformers' reference
      const auto tokens = reference["tokens"].get<std::vector<int32_t>>();
      const auto expected = reference["logits"].get<std::vector<std::vector<float>>>();
      Engine engine(m, 2);
      KvCache cache = engine.NewCache(tokens.size());
      const std::vector<float> got = engine.Forward(cache, tokens, /*all_logits=*/true);
      double sum = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double d = got[i] - expected[i / m.config.vocab_size][i % m.config.vocab_size];
        sum += d * d;
      }
      return sum / static_cast<double>(got.size());
    };
    const double e_direct = mse(LoadModel((dir / "direct.gguf").string()));
    const double e_calibrated = mse(LoadModel((dir / "calibrated.gguf").string()));
    std::cout << name << ": Q4_0 logit MSE direct " << e_direct << ", calibrated " << e_calibrated << "\n";
    EXPECT_LT(e_calibrated, e_direct) << name;
  }
}

// Gemma 3's image-text checkpoint exported for vLLM: only its language model is written, under a
// Gemma3ForCausalLM config.json, and its tied lm_head (a Linear in transformers, stored by no tensor) is
// ignored by name so "targets: Linear" does not claim it.
TEST(ArchitectureFixtureExport, EngineFormatsWriteTextModelsAndIgnoreTiedLmHead) {
  testing_util::ScratchDir dir("lowbit-arch-export");
  const fs::path source = kFixtures / "gemma3mm";
  StreamedModel s = OpenModel(source);
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  o.scheme = ParseScheme("int4:g16");
  (void)ExportEngineCheckpoint(s, source, dir / "ct", nlohmann::json{{"method", "rtn"}}, o);
  const nlohmann::json config = ReadJsonFile(dir / "ct" / "config.json");
  EXPECT_EQ(config["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_FALSE(config.contains("text_config") || config.contains("vision_config"));
  EXPECT_EQ(config["quantization_config"]["ignore"], nlohmann::json::array({"lm_head"}));
  EXPECT_EQ(LoadModel((dir / "ct").string()).config.architecture, "Gemma3ForCausalLM");
}

// Phi-3 and GLM-4 exported for vLLM keep their own layouts: Phi-3's q/k/v and both models' gate/up go out
// stacked as qkv_proj and gate_up_proj (what vLLM and transformers load for them), GLM-4's q/k/v apart, and
// come back split, each linear bit for bit with the model quantized in memory, so the logits are the same to
// the last bit.
TEST(ArchitectureFixtureExport, FusedProjectionsGoOutFusedAndComeBackSplit) {
  testing_util::ScratchDir dir("lowbit-arch-fused");
  for (const auto& [fixture, present, absent] :
       {std::tuple{"phi3", std::vector<std::string>{"self_attn.qkv_proj", "mlp.gate_up_proj"},
                   std::vector<std::string>{"self_attn.q_proj", "mlp.up_proj"}},
        {"glm4", {"self_attn.q_proj", "self_attn.k_proj", "mlp.gate_up_proj"},
         {"self_attn.qkv_proj", "mlp.gate_proj", "mlp.up_proj"}}}) {
    const fs::path source = kFixtures / fixture;
    const auto tokens = ReadJsonFile(source / "reference.json")["tokens"].get<std::vector<int32_t>>();
    const auto logits = [&](const Model& m) {
      Engine engine(m, 1);
      KvCache cache = engine.NewCache(tokens.size());
      return engine.Forward(cache, tokens, /*all_logits=*/true);
    };
    for (const auto& [format, scheme, suffix] :
         {std::tuple{EngineFormat::kGptq, "int4:g16", ".qweight"}, {EngineFormat::kAwq, "int4:g16:asym", ".qweight"},
          {EngineFormat::kCompressedTensors, "int8:channel", ".weight_packed"},
          {EngineFormat::kCompressedTensors, "nvfp4", ".weight_packed"}}) {
      const std::string name = fmt::format("{}-{}-{}", fixture, EngineFormatName(format), scheme);
      SCOPED_TRACE(name);
      Model expected = LoadModel(source.string());
      QuantizeLinears(expected.weights, ParseScheme(scheme));
      StreamedModel s = OpenModel(source);
      EngineExportOptions o;
      o.format = format;
      o.scheme = ParseScheme(scheme);
      (void)ExportEngineCheckpoint(s, source, dir / name, nullptr, o);
      const SafetensorsModel st = SafetensorsModel::Open(dir / name);
      for (const std::string& linear : present) EXPECT_NE(st.Find("model.layers.1." + linear + suffix), nullptr) << linear;
      for (const std::string& linear : absent) EXPECT_EQ(st.Find("model.layers.1." + linear + suffix), nullptr) << linear;
      const Model back = LoadModel((dir / name).string());
      for (size_t i = 0; i < back.weights.layers.size(); ++i) {
        const std::vector<ConstBlockLinear> a = BlockLinears(std::as_const(expected.weights.layers[i]));
        const std::vector<ConstBlockLinear> b = BlockLinears(back.weights.layers[i]);
        for (size_t k = 0; k < a.size(); ++k) {
          const auto& qa = std::get<QuantizedTensor>(a[k].linear->weight);
          const auto& qb = std::get<QuantizedTensor>(b[k].linear->weight);
          EXPECT_EQ(qb.scheme().ToString(), qa.scheme().ToString()) << a[k].name;
          EXPECT_TRUE(std::ranges::equal(qa.codes(), qb.codes())) << a[k].name;
          EXPECT_TRUE(std::ranges::equal(qa.scale_bytes(), qb.scale_bytes())) << a[k].name;
          EXPECT_TRUE(std::ranges::equal(qa.zero_bytes(), qb.zero_bytes())) << a[k].name;
          EXPECT_EQ(qa.tensor_scale(), qb.tensor_scale()) << a[k].name;
        }
      }
      EXPECT_EQ(logits(back), logits(expected));
    }
  }
}

// Past its window a sliding layer's cache drops whole blocks (KvCache::Advance): decoding 100 tokens one
// at a time, with blocks released as it goes, gives the logits of one prefill over all of them.
TEST(ArchitectureFixtureSlidingWindow, DecodeWithReleasedBlocksMatchesPrefill) {
  const Model model = LoadModel((kFixtures / "gemma2").string());
  ASSERT_EQ(model.config.sliding_window, 6u);
  std::vector<int32_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % model.config.vocab_size);
  Engine engine(model, 2);
  KvCache whole = engine.NewCache(tokens.size()), step = engine.NewCache(tokens.size());
  const std::vector<float> prefill = engine.Forward(whole, tokens, /*all_logits=*/true);
  const size_t vocab = model.config.vocab_size;
  double diff = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float> logits = engine.Forward(step, std::span(&tokens[t], 1), false);
    for (size_t v = 0; v < vocab; ++v) diff = std::max(diff, std::abs(double(logits[v]) - prefill[t * vocab + v]));
  }
  EXPECT_LT(diff, 1e-4);
  EXPECT_LT(step.bytes(), whole.bytes());  // layer 0 slides: its blocks were reused
}

// Gemma's query_pre_attn_scalar s: scores scaled by 1/sqrt(s) instead of 1/sqrt(head_dim) are the
// scores of a model whose q_proj is multiplied by sqrt(head_dim / s) (RoPE is linear, and Gemma 2 has
// no q norm), so both models must give the same logits.
TEST(ArchitectureFixtureQueryScale, EqualsScaledQueryProjection) {
  const nlohmann::json reference = ReadJsonFile(kFixtures / "gemma2" / "reference.json");
  const auto tokens = reference["tokens"].get<std::vector<int32_t>>();
  const auto logits = [&](const Model& m) {
    Engine engine(m, 2);
    KvCache cache = engine.NewCache(tokens.size());
    return engine.Forward(cache, tokens, /*all_logits=*/true);
  };
  Model scaled = LoadModel((kFixtures / "gemma2").string());
  ASSERT_EQ(scaled.config.head_dim, 16u);
  scaled.config.query_scale = 1.0f / std::sqrt(24.0f);
  Model projected = LoadModel((kFixtures / "gemma2").string());
  for (LayerWeights& l : projected.weights.layers)
    for (float& w : std::get<DenseMatrix>(l.wq.weight).values) w *= std::sqrt(16.0f / 24.0f);
  const std::vector<float> a = logits(scaled), b = logits(projected), plain = logits(LoadModel((kFixtures / "gemma2").string()));
  double diff = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    moved = std::max(moved, std::abs(double(a[i]) - plain[i]));
  }
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(moved, 1e-2);  // the scale matters for these logits
}

// The fixture's F32 GGUF as llama.cpp's converter writes GLM-4.5 (glm4moe) and GLM-4.7-Flash (deepseek2) files:
// one multi-token-prediction block counted in block_count (nextn_predict_layers) after the last, and `edit` applied
// to the metadata.
fs::path WithPredictionBlock(const std::string& fixture, const fs::path& dir,
                             const std::function<bool(GgufKeyValue&)>& edit = [](GgufKeyValue&) { return true; }) {
  GgufExportOptions options;
  options.type = "F32";
  StreamedModel streamed = OpenModel(kFixtures / fixture);
  ExportGguf(streamed, dir / "plain.gguf", options);
  const GgufFile plain = GgufFile::Open(dir / "plain.gguf");
  const std::string arch = plain.GetString("general.architecture");
  const uint32_t blocks = plain.GetU32(arch + ".block_count");
  GgufWriter writer(dir / "mtp.gguf");
  for (GgufKeyValue kv : plain.metadata()) {
    if (kv.key == arch + ".block_count") kv.value = GgufValue(blocks + 1);
    if (edit(kv)) writer.Set(kv.key, kv.value);
  }
  writer.Set(arch + ".nextn_predict_layers", uint32_t{1});
  const std::string eh_proj = fmt::format("blk.{}.nextn.eh_proj.weight", blocks);
  const uint32_t dim = plain.GetU32(arch + ".embedding_length");
  for (const GgufTensorInfo& t : plain.tensors()) writer.DeclareTensor(t.name, t.dims);
  writer.DeclareTensor(eh_proj, {2 * uint64_t{dim}, dim});
  for (const GgufTensorInfo& t : plain.tensors()) writer.WriteTensor(t.name, t.ggml_type, t.data);
  const std::vector<float> zeros(2 * uint64_t{dim} * dim);
  writer.WriteTensor(eh_proj, 0 /* F32 */, std::as_bytes(std::span(zeros)));
  writer.Commit();
  return dir / "mtp.gguf";
}

// The multi-token-prediction block is read past, not run (as llama.cpp and transformers run these models), so the
// file gives the model's logits.
TEST(ArchitectureFixtureGlm4Moe, GgufMultiTokenPredictionBlockIsNotRun) {
  testing_util::ScratchDir dir("lowbit-arch-glm4moe");
  for (const std::string fixture : {"glm4_moe", "glm4_moe_lite"}) {
    const Model model = LoadModel(WithPredictionBlock(fixture, dir.path()).string());
    EXPECT_EQ(model.config.n_layers, 2u) << fixture;
    EXPECT_EQ(model.config.nextn_layers, 1u) << fixture;
    EXPECT_LT(RelativeError(model, ReadJsonFile(kFixtures / fixture / "reference.json")), 1e-4) << fixture;
  }
}

// llama.cpp's converter first wrote GLM-4.7-Flash's deepseek2 files without expert_gating_func; llama.cpp gates such
// a file by sigmoid when it has 47 blocks (48 with the prediction block) and GLM's 154880 tokens, and by softmax
// (DeepSeek-V2's) otherwise. Only the shape tells them apart, so the check needs a table of 154880 rows.
TEST(ArchitectureFixtureGlm4Moe, GlmFlashFilesWithoutGatingFunctionGateBySigmoid) {
  testing_util::ScratchDir dir("lowbit-arch-glm-flash");
  const auto no_gating = [](GgufKeyValue& kv) { return kv.key != "deepseek2.expert_gating_func"; };
  EXPECT_EQ(ReadGgufConfig(GgufFile::Open(WithPredictionBlock("glm4_moe_lite", dir.path(), no_gating))).router_scoring,
            RouterScoring::kSoftmax);
  const GgufFile mtp = GgufFile::Open(dir / "mtp.gguf");
  GgufWriter writer(dir / "flash.gguf");
  for (GgufKeyValue kv : mtp.metadata()) {
    if (kv.key == "deepseek2.block_count") kv.value = GgufValue(uint32_t{48});
    if (kv.key == "deepseek2.vocab_size") kv.value = GgufValue(uint32_t{154880});
    if (no_gating(kv)) writer.Set(kv.key, kv.value);
  }
  const uint32_t dim = GgufFile::Open(dir / "plain.gguf").GetU32("deepseek2.embedding_length");
  writer.DeclareTensor("token_embd.weight", {dim, 154880});
  writer.DeclareTensor("blk.1.exp_probs_b.bias", {4});
  const std::vector<float> table(uint64_t{dim} * 154880), bias(4);
  writer.WriteTensor("token_embd.weight", 0, std::as_bytes(std::span(table)));
  writer.WriteTensor("blk.1.exp_probs_b.bias", 0, std::as_bytes(std::span(bias)));
  writer.Commit();
  const ModelConfig flash = ReadGgufConfig(GgufFile::Open(dir / "flash.gguf"));
  EXPECT_EQ(flash.n_layers, 47u);
  EXPECT_EQ(flash.router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(flash.router_bias);
}

// Fixture `name` exported to an F32 GGUF at `path`, opened.
GgufFile ExportF32(const std::string& name, const fs::path& path) {
  GgufExportOptions options;
  options.type = "F32";
  StreamedModel streamed = OpenModel(kFixtures / name);
  ExportGguf(streamed, path, options);
  return GgufFile::Open(path);
}

// A hunyuan-dense file may give its RoPE base as the plain theta with rope.scaling.alpha (llama.cpp's loader scales
// it by alpha^(d / (d - 2)), as HunYuanVL files do): the fixture's 10000 and alpha 1000 give its logits.
TEST(ArchitectureFixtureHunyuan, GgufAlphaScalesTheRopeBase) {
  testing_util::ScratchDir dir("lowbit-arch-hunyuan-alpha");
  const GgufFile scaled = ExportF32("hunyuan_v1_dense", dir / "scaled.gguf");
  GgufWriter writer(dir / "alpha.gguf");
  for (const GgufKeyValue& kv : scaled.metadata())
    writer.Set(kv.key, kv.key == "hunyuan-dense.rope.freq_base" ? GgufValue(10000.0f) : kv.value);
  writer.Set("hunyuan-dense.rope.scaling.alpha", 1000.0f);
  for (const GgufTensorInfo& t : scaled.tensors()) writer.DeclareTensor(t.name, t.dims);
  for (const GgufTensorInfo& t : scaled.tensors()) writer.WriteTensor(t.name, t.ggml_type, t.data);
  writer.Commit();
  const Model model = LoadModel((dir / "alpha.gguf").string());
  EXPECT_NEAR(model.config.rope_theta, scaled.GetF32("hunyuan-dense.rope.freq_base"), 1.0);
  EXPECT_LT(RelativeError(model, ReadJsonFile(kFixtures / "hunyuan_v1_dense" / "reference.json")), 1e-4);
}

// llama.cpp's converter writes stacked checkpoints' experts (Mistral 4's) as one ffn_gate_up_exps [dim, 2 ffn,
// experts], each expert's gate rows before its up rows, which llama.cpp's deepseek2 splits in two: the same model as
// the file with ffn_gate_exps and ffn_up_exps. lowbit's own mistral4 file carries the query temperature
// (attention.temperature_scale / _length) that llama.cpp's deepseek2 reads, which its converter leaves out.
TEST(ArchitectureFixtureMistral4, FusedGateUpExpertsAreSplitAsLlamaCppSplitsThem) {
  testing_util::ScratchDir dir("lowbit-arch-mistral4");
  const GgufFile split = ExportF32("mistral4mm", dir / "split.gguf");
  EXPECT_FLOAT_EQ(split.GetF32("mistral4.attention.temperature_scale"), 0.1f);
  EXPECT_EQ(split.GetU32("mistral4.attention.temperature_length"), 4u);
  GgufWriter writer(dir / "fused.gguf");
  for (const GgufKeyValue& kv : split.metadata()) writer.Set(kv.key, kv.value);
  const GgufTensorInfo *gate = split.FindTensor("blk.1.ffn_gate_exps.weight"),
                       *up = split.FindTensor("blk.1.ffn_up_exps.weight");
  ASSERT_TRUE(gate && up);
  const uint64_t experts = gate->dims[2], expert_bytes = gate->data.size() / experts;
  std::vector<std::byte> fused;
  for (uint64_t e = 0; e < experts; ++e)
    for (const GgufTensorInfo* t : {gate, up})
      fused.insert(fused.end(), t->data.begin() + static_cast<ptrdiff_t>(e * expert_bytes),
                   t->data.begin() + static_cast<ptrdiff_t>((e + 1) * expert_bytes));
  for (const GgufTensorInfo& t : split.tensors())
    if (&t != gate && &t != up) writer.DeclareTensor(t.name, t.dims);
  writer.DeclareTensor("blk.1.ffn_gate_up_exps.weight", {gate->dims[0], 2 * gate->dims[1], experts});
  for (const GgufTensorInfo& t : split.tensors())
    if (&t != gate && &t != up) writer.WriteTensor(t.name, t.ggml_type, t.data);
  writer.WriteTensor("blk.1.ffn_gate_up_exps.weight", gate->ggml_type, fused);
  writer.Commit();
  const Model model = LoadModel((dir / "fused.gguf").string());
  EXPECT_TRUE(model.config.attn_temperature_every_layer);
  EXPECT_LT(RelativeError(model, ReadJsonFile(kFixtures / "mistral4mm" / "reference.json")), 1e-4);
}

// An int4:g8 engine export of fixture `name` is refused with a message holding `needles`, and leaves no folder.
void ExpectEngineExportRefused(const std::string& name, std::initializer_list<std::string_view> needles) {
  testing_util::ScratchDir dir("lowbit-arch-engine-refused");
  const fs::path folder = kFixtures / name;
  StreamedModel s = OpenModel(folder);
  EngineExportOptions o;
  o.scheme = ParseScheme("int4:g8");
  ExpectError([&] { (void)ExportEngineCheckpoint(s, folder, dir / "ct", nlohmann::json::object(), o); }, needles);
  EXPECT_TRUE(dir.Entries().empty());
}

// transformers' Mistral4 loads its experts only stacked (mlp.experts.gate_up_proj), mapping no per-expert names, so
// the engine exports, which write one linear per expert, refuse it by name.
TEST(ArchitectureFixtureMistral4, EngineExportRefused) {
  ExpectEngineExportRefused("mistral4mm", {"Mistral4ForCausalLM", "stacked tensors (mlp.experts."});
}

// llama.cpp's converter writes Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE as qwen2vl, qwen3vl and qwen3vlmoe: qwen2's,
// qwen3's and qwen3moe's keys and tensors under those names, with rope.dimension_sections (mrope_section padded to
// four) and Qwen3-VL's n_deepstack_layers, by which llama.cpp's mmproj files pair with them. lowbit writes them so
// too; on text they run as the text models (every section at the same position, DeepStack's inputs zero), so the
// files give transformers' logits, and read back they go out again as what they are.
TEST(ArchitectureFixtureQwenVl, GgufQwen2VlAndQwen3VlRunTheirLanguageModels) {
  testing_util::ScratchDir dir("lowbit-arch-qwen-vl");
  GgufExportOptions options;
  options.type = "F32";
  for (const auto& [fixture, vl_arch, sections] :
       {std::tuple{"qwen2_5_vl", "qwen2vl", std::vector<int32_t>{2, 1, 1, 0}},
        std::tuple{"qwen3_vl", "qwen3vl", std::vector<int32_t>{4, 2, 2, 0}},
        std::tuple{"qwen3_vl_moe", "qwen3vlmoe", std::vector<int32_t>{4, 2, 2, 0}}}) {
    const std::string arch(vl_arch);
    StreamedModel streamed = OpenModel(kFixtures / fixture);
    EXPECT_EQ(ExportGguf(streamed, dir / (arch + ".gguf"), options).architecture, arch);
    const GgufFile file = GgufFile::Open(dir / (arch + ".gguf"));
    EXPECT_EQ(file.GetArrayOf<int32_t>(arch + ".rope.dimension_sections"), sections) << arch;
    if (arch != "qwen2vl") EXPECT_EQ(file.GetU32(arch + ".n_deepstack_layers"), 1u);  // deepstack_visual_indexes [0]
    const std::string path = (dir / (arch + ".gguf")).string();
    const Model model = LoadModel(path);
    EXPECT_EQ(model.config.architecture, "gguf:" + arch);
    EXPECT_LT(RelativeError(model, ReadJsonFile(kFixtures / fixture / "reference.json")), 1e-4) << arch;
    StreamedModel again = OpenModel(path);
    EXPECT_EQ(ExportGguf(again, dir / "again.gguf", options).architecture, arch);
    const GgufFile again_file = GgufFile::Open(dir / "again.gguf");
    EXPECT_EQ(again_file.GetArrayOf<int32_t>(arch + ".rope.dimension_sections"), sections) << arch;
    if (arch != "qwen2vl") EXPECT_EQ(again_file.GetU32(arch + ".n_deepstack_layers"), 1u);
  }
  // Sections that do not cover the heads' rotary pairs are refused where they are read.
  nlohmann::json config = ReadJsonFile(kFixtures / "qwen2_5_vl" / "config.json");
  config["text_config"]["rope_parameters"]["mrope_section"] = {2, 1};
  ExpectError([&] { (void)HfConfigFromJson(config, "vl/config.json"); },
              {"vl/config.json", "text_config.rope_parameters.mrope_section", "4 rotary pairs"});
}

// Qwen3-VL-MoE's experts as the Hub stores them (x W: gate_up_proj [E, hidden, 2 x ffn], down_proj [E, ffn, hidden])
// and as transformers 5 saves them (Linear weights, the fixture's [E, 2 x ffn, hidden] and [E, hidden, ffn]) give the
// same model.
TEST(ArchitectureFixtureQwenVl, Qwen3VlMoeExpertsInBothLayouts) {
  testing_util::ScratchDir dir("lowbit-arch-qwen3-vl-moe");
  const fs::path folder = kFixtures / "qwen3_vl_moe";
  const SafetensorsFile st = SafetensorsFile::Open(folder / "model.safetensors");
  std::vector<TensorToWrite> tensors;
  std::deque<std::vector<std::byte>> transposed;
  for (const TensorView& t : st.tensors()) {
    if (!t.name.ends_with("mlp.experts.gate_up_proj") && !t.name.ends_with("mlp.experts.down_proj")) {
      tensors.push_back({t.name, t.dtype, t.shape, t.data});
      continue;
    }
    ASSERT_EQ(t.dtype, DType::kBF16);
    const uint64_t experts = t.shape[0], rows = t.shape[1], cols = t.shape[2], size = 2;
    std::vector<std::byte>& out = transposed.emplace_back(t.data.size());
    for (uint64_t e = 0; e < experts; ++e)
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t k = 0; k < cols; ++k)
          std::memcpy(&out[((e * cols + k) * rows + r) * size], &t.data[((e * rows + r) * cols + k) * size], size);
    tensors.push_back({t.name, t.dtype, {experts, cols, rows}, out});
  }
  const fs::path hub = dir / "hub";
  fs::create_directories(hub);
  WriteSafetensors(hub / "model.safetensors", tensors);
  fs::copy_file(folder / "config.json", hub / "config.json");
  const nlohmann::json reference = ReadJsonFile(folder / "reference.json");
  EXPECT_LT(RelativeError(LoadModel(hub.string()), reference), 1e-4);
  EXPECT_LT(RelativeError(LoadModel(folder.string()), reference), 1e-4);
}

// Granite MoE's engines (transformers, vLLM) load its experts only as block_sparse_moe.input_linear / output_linear
// stacks, which the engine exports do not write: refused by name, leaving no folder. GPTQ calibrates each expert on
// the rows routed to it and beats RTN.
TEST(ArchitectureFixtureGraniteMoe, EngineExportRefusedGptqBeatsRtn) {
  ExpectEngineExportRefused("granitemoeshared", {"GraniteMoeSharedForCausalLM", "stacked tensors (block_sparse_moe."});
  const testing_util::RtnAndGptq q =
      testing_util::QuantizeRtnAndGptq(LoadModel((kFixtures / "granitemoeshared").string()), "int4:g8");
  EXPECT_EQ(q.gptq_report.uncalibrated_linears, 0u);
  EXPECT_LT(q.gptq_error, q.rtn_error);
}

// An F32 GGUF export of `s` is refused with a message holding `needles`, and leaves no file.
void ExpectF32GgufRefused(StreamedModel& s, std::initializer_list<std::string_view> needles) {
  testing_util::ScratchDir dir("lowbit-arch-gguf-refused");
  GgufExportOptions options;
  options.type = "F32";
  ExpectError([&] { ExportGguf(s, dir / "m.gguf", options); }, needles);
  EXPECT_TRUE(dir.Entries().empty());
}

// llama.cpp's exaone4 slides its window only in 64-layer models (EXAONE 4.0 32B): a smaller model with sliding layers
// would run in the file without its window and with RoPE everywhere, so its export is refused, naming why.
TEST(ArchitectureFixtureExaone4, SlidingLayersOutsideLlamaCppsLayoutAreNotExported) {
  StreamedModel streamed = OpenModel(kFixtures / "exaone4_swa");
  ExpectF32GgufRefused(streamed, {"exaone4", "64-layer", "window of 6"});
}

// llama.cpp's ernie4_5-moe loads experts in every layer from its dense lead on: a model whose sparse layers skip one
// (moe_layer_interval 2) or stop early (moe_layer_end_index) is refused, naming the layer.
TEST(ArchitectureFixtureErnieMoe, LayoutsLlamaCppCannotLoadAreNotExported) {
  Model m = LoadModel((kFixtures / "ernie4_5_moe").string());
  ASSERT_EQ(m.config.sparse_layers, (std::vector<uint8_t>{0, 1}));
  m.config.sparse_layers = {1, 0};  // refused before any weight is read
  StreamedModel s{std::move(m), nullptr};
  ExpectF32GgufRefused(s, {"ernie4_5-moe", "layer 1 is dense"});
}

// llama.cpp's llama4 chunks attention and tunes the NoPE layers' temperature at its constant 8192 positions: the
// fixture (4, so both show within 16 tokens) is refused naming the field; with 8192 the F32 file runs as lowbit runs
// the folder (chunk and temperature are the reader's constants), and its layout comes back.
TEST(ArchitectureFixtureLlama4, GgufNeedsLlamaCppsChunkAndRunsAsTheFolder) {
  StreamedModel fixture = OpenModel(kFixtures / "llama4");
  ExpectF32GgufRefused(fixture, {"llama4", "chunks of 8192", "is 4"});
  testing_util::ScratchDir dir("lowbit-arch-llama4");
  GgufExportOptions options;
  options.type = "F32";
  Model m = LoadModel((kFixtures / "llama4").string());
  m.config.attention_chunk = m.config.attn_temperature_floor = 8192;
  const auto tokens = ReadJsonFile(kFixtures / "llama4" / "reference.json")["tokens"].get<std::vector<int32_t>>();
  Engine engine(m, 2);
  KvCache cache = engine.NewCache(tokens.size());
  const std::vector<float> folder_logits = engine.Forward(cache, tokens, /*all_logits=*/true);
  StreamedModel s{m, nullptr};
  ExportGguf(s, dir / "m.gguf", options);
  const Model back = LoadModel((dir / "m.gguf").string());
  EXPECT_EQ(back.config.attention_chunk, 8192u);
  EXPECT_EQ(back.config.nope_layers, m.config.nope_layers);
  EXPECT_EQ(back.config.sparse_layers, m.config.sparse_layers);
  EXPECT_TRUE(back.config.qk_norm_unweighted && back.config.expert_weight_on_input);
  EXPECT_EQ(back.config.rope_scaling.high_freq_factor, 1.0f);  // Scout's Llama 3 scaling, from rope_freqs
  EXPECT_FLOAT_EQ(back.config.rope_scaling.factor, 16.0f);
  Engine back_engine(back, 2);
  KvCache back_cache = back_engine.NewCache(tokens.size());
  const std::vector<float> file_logits = back_engine.Forward(back_cache, tokens, /*all_logits=*/true);
  double diff = 0;
  for (size_t i = 0; i < file_logits.size(); ++i)
    diff = std::max(diff, std::abs(double(file_logits[i]) - folder_logits[i]));
  EXPECT_LT(diff, 1e-4);
}

// Every PTQ method runs on Llama 4, whose routed experts see their inputs already weighted: GPTQ and AWQ (scales
// folded into the norms and the routers' columns, each expert judged on its weighted rows) beat RTN, and a rotation
// of the residual stream leaves the logits as they were (its q/k norms act on heads, after the projections).
TEST(ArchitectureFixtureLlama4, GptqAwqAndRotation) {
  const Model fp = LoadModel((kFixtures / "llama4").string());
  ASSERT_TRUE(fp.config.expert_weight_on_input);
  testing_util::RtnAndGptq q = testing_util::QuantizeRtnAndGptq(fp, "int4:g8");
  EXPECT_EQ(q.gptq_report.uncalibrated_linears, 0u);
  EXPECT_LT(q.gptq_error, q.rtn_error);
  Model awq = fp;
  q.request.method = "awq";
  (void)QuantizeModel(awq, q.request);
  const auto windows = testing_util::RandomWindows(2, 16, fp.config.vocab_size);
  const double awq_error = testing_util::LogitError(fp, awq, windows);
  std::cout << "llama4 int4:g8 logit MSE rtn " << q.rtn_error << ", gptq " << q.gptq_error << ", awq " << awq_error
            << "\n";
  EXPECT_LT(awq_error, q.rtn_error);
  Model rotated = fp;
  (void)RotateModel(rotated, 3);
  EXPECT_LT(testing_util::LogitError(fp, rotated, windows), 1e-9);
}

// GPTQ calibrates the fixture (beating RTN), while the methods that fold input scales into a norm, and a rotation of
// the residual stream, are refused with messages naming the method, the architecture and the reasons given.
void ExpectGptqButNoScaleFoldingOrRotation(const std::string& fixture, const std::string& architecture,
                                           const std::string& no_folding, const std::string& no_rotation) {
  const Model fp = LoadModel((kFixtures / fixture).string());
  testing_util::RtnAndGptq q = testing_util::QuantizeRtnAndGptq(fp, "int4:g8");
  EXPECT_LT(q.gptq_error, q.rtn_error);
  QuantizeRequest& req = q.request;
  for (const char* method : {"awq", "smoothquant"}) {
    Model m = fp;
    req.method = method;
    req.scheme = ParseScheme(method == std::string("awq") ? "int4:g8" : "int8");
    if (method == std::string("smoothquant")) req.act_scheme = ParseScheme("int8:token");
    ExpectError([&] { (void)QuantizeModel(m, req); }, {std::string("method '") + method + "'", architecture, no_folding});
  }
  Model rotated = fp;
  ExpectError([&] { (void)RotateModel(rotated, 1); }, {"rotate", architecture, no_rotation});
}

// OLMo 2 has no norm before its attention and MLP to fold scales into, and norms on their outputs that a rotation
// would not pass.
TEST(ArchitectureFixtureOlmo2, GptqYesScaleFoldingAndRotationNo) {
  ExpectGptqButNoScaleFoldingOrRotation("olmo2", "Olmo2ForCausalLM", "no norm before", "do not commute");
}

// Cohere's attention and MLP read one norm, which cannot hold both groups' input scales, and it is a LayerNorm,
// whose mean subtraction a rotation does not pass.
TEST(ArchitectureFixtureCohere, GptqYesScaleFoldingAndRotationNo) {
  ASSERT_TRUE(LoadModel((kFixtures / "cohere").string()).config.parallel_block);
  ExpectGptqButNoScaleFoldingOrRotation("cohere", "CohereForCausalLM", "one norm", "LayerNorm");
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchitectureFixture,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3",
                                           "gemma3mm", "mistral3mm", "mixtral", "qwen2_moe", "qwen2_moe_dense",
                                           "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "granite", "smollm3",
                                           "olmo2", "olmo3", "exaone4", "exaone4_swa", "seed_oss", "ernie4_5",
                                           "ernie4_5_moe", "glm4", "glm", "glm4_moe", "glm4_moe_lite",
                                           "hunyuan_v1_dense", "hunyuan_v1_moe", "cohere", "cohere_qk_norm", "cohere2",
                                           "llama4", "llama4mm", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v",
                                           "glm4v_moe", "granitemoe", "granitemoeshared", "granite4", "ministral3mm",
                                           "mistral4mm", "minimax_m2", "olmoe"));

}  // namespace
}  // namespace lowbit
