// DeepSeek-V2/V3 in GGUF (llama.cpp's deepseek2): the keys llama.cpp's converter writes for DeepSeek-V3's real
// config, worked out by hand from convert_hf_to_gguf's rules; kv_b_proj's split into attn_k_b / attn_v_b by hand;
// the fixtures exported and read back to the same logits; what llama.cpp cannot run refused. llama.cpp itself runs
// the exported fixtures in `make test-interop` (tests/interop/hf_architectures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/gguf.h"
#include "io/gguf_deepseek.h"
#include "io/gguf_export.h"
#include "io/gguf_writer.h"
#include "io/imatrix.h"
#include "io/model_loader.h"
#include "pipeline/convert_job.h"
#include "pipeline/imatrix_job.h"
#include "model/config.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::ExpectError;
const fs::path kFixtures = LOWBIT_SOURCE_DIR "/tests/data/architectures";

// The fixtures as llama.cpp can run them: V3's YaRN with mscale = mscale_all_dim (as every released DeepSeek
// has it; the fixture's 1.0 / 0.8 tests transformers' general formula), V2's groups scored by their best two.
Model LlamaCppRunnable(const std::string& name) {
  Model m = LoadModel((kFixtures / name).string());
  m.config.rope_scaling.attention_factor = 1;
  m.config.group_score = GroupScore::kBestTwoSum;
  return m;
}

TEST(GgufDeepSeek, V3ConfigWritesTheConverterKeys) {
  const ModelConfig c = HfConfigFromJson(nlohmann::json::parse(testing_util::kDeepSeekV3Config), "v3/config.json");
  testing_util::ScratchDir dir("ds-keys");
  GgufWriter out(dir / "keys.gguf");
  SetDeepSeek2Metadata(out, c, "deepseek2");
  out.Set("deepseek2.expert_count", c.n_experts);  // the MoE keys every architecture's export writes
  out.Set("deepseek2.expert_used_count", c.experts_per_token);
  out.Set("deepseek2.expert_feed_forward_length", c.expert_ffn_dim);
  out.Commit();
  const GgufFile f = GgufFile::Open(dir / "keys.gguf");
  const std::string p = "deepseek2.";
  EXPECT_EQ(f.GetU32(p + "leading_dense_block_count"), 3u);  // first_k_dense_replace
  EXPECT_EQ(f.GetU32(p + "attention.q_lora_rank"), 1536u);
  EXPECT_EQ(f.GetU32(p + "attention.kv_lora_rank"), 512u);
  EXPECT_EQ(f.GetU32(p + "attention.key_length"), 576u);  // kv_lora_rank + qk_rope_head_dim: the cached latent
  EXPECT_EQ(f.GetU32(p + "attention.value_length"), 512u);
  EXPECT_EQ(f.GetU32(p + "attention.key_length_mla"), 192u);  // qk_nope_head_dim + qk_rope_head_dim
  EXPECT_EQ(f.GetU32(p + "attention.value_length_mla"), 128u);
  EXPECT_EQ(f.GetU32(p + "rope.dimension_count"), 64u);
  EXPECT_EQ(f.GetU32(p + "expert_shared_count"), 1u);
  EXPECT_FLOAT_EQ(f.GetF32(p + "expert_weights_scale"), 2.5f);
  EXPECT_TRUE(f.GetBool(p + "expert_weights_norm"));
  EXPECT_EQ(f.GetU32(p + "expert_gating_func"), 2u);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
  EXPECT_EQ(f.GetU32(p + "expert_group_count"), 8u);
  EXPECT_EQ(f.GetU32(p + "expert_group_used_count"), 4u);
  EXPECT_EQ(f.GetString(p + "rope.scaling.type"), "yarn");
  EXPECT_FLOAT_EQ(f.GetF32(p + "rope.scaling.factor"), 40.0f);
  EXPECT_EQ(f.GetU32(p + "rope.scaling.original_context_length"), 4096u);
  EXPECT_NEAR(f.GetF32(p + "rope.scaling.yarn_log_multiplier"), 0.1f, 1e-6f);  // 0.1 x mscale_all_dim

  // Read back as llama.cpp runs it: the same latent shapes, softmax scale and routing.
  ModelConfig back = c;
  back.q_lora_rank = back.kv_lora_rank = back.qk_nope_dim = back.v_head_dim = 0;
  back.query_scale = 0;
  back.n_experts = 0;
  back.rope_scaling.attention_factor = 7;
  back.rope_scaling.original_max_position = 0;
  ReadDeepSeek2Keys(f, back, "deepseek2");
  EXPECT_EQ(back.q_lora_rank, 1536u);
  EXPECT_EQ(back.kv_lora_rank, 512u);
  EXPECT_EQ(back.qk_nope_dim, 128u);
  EXPECT_EQ(back.v_head_dim, 128u);
  EXPECT_EQ(back.head_dim, 576u);
  EXPECT_NEAR(back.query_scale, c.query_scale, 1e-6f * c.query_scale);
  EXPECT_EQ(back.rope_scaling.attention_factor, 1.0f);
  EXPECT_EQ(back.rope_scaling.original_max_position, 4096u);
  EXPECT_EQ(back.n_experts, 256u);
  EXPECT_EQ(back.experts_per_token, 8u);
  EXPECT_EQ(back.shared_expert_ffn_dim, 2048u);
  EXPECT_FALSE(back.shared_expert_gated);
  EXPECT_EQ(back.router_scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(back.group_score, GroupScore::kBestTwoSum);
  EXPECT_EQ(back.expert_groups_used, 4u);
  EXPECT_EQ(back.sparse_layers, c.sparse_layers);
}

// kv_b_proj of 2 heads, qk_nope 2, v_head 1, kv_lora_rank 3: rows per head [k0, k1, v0], value 100 h + 10 r + j.
TEST(GgufDeepSeek, LatentKeysAndValuesSplitByHand) {
  ModelConfig c;
  c.n_heads = 2;
  c.qk_nope_dim = 2;
  c.v_head_dim = 1;
  c.kv_lora_rank = 3;
  DenseMatrix kv_b{6, 3, std::vector<float>(18)};
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < 3; ++j) kv_b.values[(h * 3 + r) * 3 + j] = static_cast<float>(100 * h + 10 * r + j);
  Linear l;
  l.weight = kv_b;
  // attn_k_b ne [nope 2, lora 3, heads 2]: each head's key rows transposed.
  EXPECT_EQ(GgufLatentKeys(c, l), (std::vector<float>{0, 10, 1, 11, 2, 12, 100, 110, 101, 111, 102, 112}));
  // attn_v_b ne [lora 3, v 1, heads 2]: each head's value rows as they are.
  EXPECT_EQ(GgufLatentValues(c, l), (std::vector<float>{20, 21, 22, 120, 121, 122}));
  EXPECT_EQ(LatentKvFromGguf(c, GgufLatentKeys(c, l), GgufLatentValues(c, l)).values, kv_b.values);
}

TEST(GgufDeepSeek, FixturesRoundTripToTheSameLogits) {
  for (const char* name : {"deepseek_v2", "deepseek_v3"}) {
    testing_util::ScratchDir dir("ds-gguf");
    StreamedModel s{LlamaCppRunnable(name), nullptr};
    const Model reference = LlamaCppRunnable(name);
    GgufExportOptions o;
    o.type = "F32";
    EXPECT_EQ(ExportGguf(s, dir / "m.gguf", o).architecture, "deepseek2");
    const GgufFile f = GgufFile::Open(dir / "m.gguf");
    const GgufTensorInfo* k_b = f.FindTensor("blk.1.attn_k_b.weight");
    ASSERT_NE(k_b, nullptr) << name;
    EXPECT_EQ(k_b->dims, (std::vector<uint64_t>{8, 16, 4})) << name;  // [qk_nope, kv_lora_rank, heads]
    EXPECT_EQ(f.FindTensor("blk.0.attn_kv_b.weight"), nullptr) << name;
    EXPECT_EQ(f.FindTensor("blk.1.exp_probs_b.bias") != nullptr, std::string(name) == "deepseek_v3") << name;
    EXPECT_EQ(f.FindTensor("blk.1.ffn_gate_inp_shexp.weight"), nullptr) << name;  // shared experts are ungated
    EXPECT_EQ(f.FindTensor("blk.0.ffn_gate_exps.weight"), nullptr) << name;       // layer 0 is dense
    const Model back = LoadModel(dir / "m.gguf");
    EXPECT_EQ(back.config.architecture, "gguf:deepseek2");
    const auto windows = testing_util::RandomWindows(2, 12, reference.config.vocab_size);
    const double err = testing_util::LogitError(reference, back, windows);
    EXPECT_LT(err, 1e-10) << name;
  }
}

// `m` written as an F32 deepseek2 file dir/m.gguf, and the job converting it back to the folder dir/back.
ConvertJob F32FileAndItsConversion(Model m, const testing_util::ScratchDir& dir) {
  StreamedModel s{std::move(m), nullptr};
  GgufExportOptions o;
  o.type = "F32";
  ExportGguf(s, dir / "m.gguf", o);
  ConvertJob job;
  job.in = (dir / "m.gguf").string();
  job.out = (dir / "back").string();
  job.to = "lowbit";
  return job;
}

// Back from deepseek2 to a Hugging Face folder: V3 (sigmoid gating) as DeepseekV3ForCausalLM with mscale =
// mscale_all_dim, V2 as DeepseekV2ForCausalLM; kv_b_proj joined from attn_k_b / attn_v_b, the rotary rows in
// their adjacent order. The folder runs as the model the file came from, but for V2's groups, which
// transformers' V2 scores by their best expert again (llama.cpp by the best two).
TEST(GgufDeepSeek, FixturesConvertBackToTheHuggingFaceFolder) {
  for (const char* name : {"deepseek_v2", "deepseek_v3"}) {
    testing_util::ScratchDir dir("ds-gguf-back");
    const bool v3 = std::string(name) == "deepseek_v3";
    EXPECT_TRUE(RunConvertJob(F32FileAndItsConversion(LlamaCppRunnable(name), dir))["exact"].get<bool>()) << name;
    const nlohmann::json config = ReadJsonFile(dir / "back" / "config.json");
    EXPECT_EQ(config["architectures"][0], v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM");
    EXPECT_EQ(config["first_k_dense_replace"], 1) << name;
    EXPECT_EQ(config["topk_method"], v3 ? "noaux_tc" : "group_limited_greedy") << name;
    EXPECT_EQ(config["q_lora_rank"], v3 ? nlohmann::json(16) : nlohmann::json()) << name;
    if (v3) {
      EXPECT_EQ(config["rope_scaling"]["mscale"], 0.8);  // the fixture's mscale_all_dim
    }
    const Model back = LoadModel((dir / "back").string());
    const Model reference = v3 ? LlamaCppRunnable(name) : LoadModel((kFixtures / name).string());
    EXPECT_EQ(back.config.group_score, reference.config.group_score) << name;
    const auto windows = testing_util::RandomWindows(2, 12, reference.config.vocab_size);
    EXPECT_LT(testing_util::LogitError(reference, back, windows), 1e-10) << name;
  }
}

// What transformers' DeepSeek classes cannot express refuses the folder, naming the key, and leaves nothing.
TEST(GgufDeepSeek, FilesTransformersCannotRunStayGguf) {
  testing_util::ScratchDir dir("ds-gguf-refused");
  const auto refuse = [&](Model m, std::initializer_list<std::string_view> needles) {
    const ConvertJob job = F32FileAndItsConversion(std::move(m), dir);
    ExpectError([&] { RunConvertJob(job); }, needles);
    EXPECT_EQ(dir.Entries(), std::vector<std::string>{"m.gguf"});  // no folder, no staging folder
  };
  Model normed = LlamaCppRunnable("deepseek_v2");
  normed.config.norm_expert_weights = true;
  refuse(std::move(normed), {"m.gguf", "deepseek2.expert_weights_norm", "DeepseekV2ForCausalLM"});
  Model unbiased = LlamaCppRunnable("deepseek_v3");
  unbiased.config.router_bias = false;
  for (LayerWeights& layer : unbiased.weights.layers) layer.router_bias.clear();
  refuse(std::move(unbiased), {"m.gguf", "blk.1.exp_probs_b.bias", "DeepseekV3ForCausalLM"});
}

TEST(GgufDeepSeek, WhatLlamaCppCannotRunIsAnError) {
  testing_util::ScratchDir dir("ds-refused");
  const auto refuse = [&](Model m, std::initializer_list<std::string_view> needles, bool calibrate = false) {
    StreamedModel s{std::move(m), nullptr};
    GgufExportOptions o;
    o.type = "Q8_0";
    if (calibrate) o.calibration = testing_util::RandomWindows(1, 8, s.model.config.vocab_size);
    ExpectError([&] { ExportGguf(s, dir / "m.gguf", o); }, needles);
    EXPECT_TRUE(fs::is_empty(dir.path()));  // never a partial file
  };
  refuse(LoadModel((kFixtures / "deepseek_v3").string()), {"mscale", "mscale_all_dim"});
  Model halves = LlamaCppRunnable("deepseek_v3");
  halves.config.rope_style = RopeStyle::kHalf;
  refuse(std::move(halves), {"rope_interleave"});
  Model interleaved = LlamaCppRunnable("deepseek_v2");
  interleaved.config.sparse_layers = {1, 0};
  interleaved.weights.layers = {LoadModel((kFixtures / "deepseek_v2").string()).weights.layers[1],
                                LoadModel((kFixtures / "deepseek_v2").string()).weights.layers[0]};
  refuse(std::move(interleaved), {"first_k_dense_replace"});
}

// GPTQ onto the ggml grids with latent attention calibrated in its stages (q_a / q and kv_a, q_b, o, each MLP unit
// on its routed rows): closer to the full-precision logits on held-out windows than llama-quantize's rounding.
// attn_k_b / attn_v_b are rounded directly from kv_b (their rows run along other axes than kv_b's inputs).
TEST(GgufDeepSeek, CalibratedFileBeatsDirectEncoding) {
  for (const char* name : {"deepseek_v2", "deepseek_v3"}) {
    testing_util::ScratchDir dir("ds-calibrated");
    const Model reference = LlamaCppRunnable(name);
    GgufExportOptions o;
    o.type = "Q4_0";
    StreamedModel direct{LlamaCppRunnable(name), nullptr};
    ExportGguf(direct, dir / "direct.gguf", o);
    o.calibration = testing_util::RandomWindows(32, 32, reference.config.vocab_size);
    StreamedModel calibrated{LlamaCppRunnable(name), nullptr};
    size_t gptq = 0;
    for (const GgufExportedTensor& t : ExportGguf(calibrated, dir / "calibrated.gguf", o).tensors) gptq += t.gptq;
    // V2: q, kv_a, o and the dense MLP's 3 tensors in layer 0; in layer 1 the same attention, the shared experts'
    // 3 and the routed experts' 3 (ffn_*_exps); the output matrix. V3 adds q_b in both layers.
    EXPECT_EQ(gptq, std::string(name) == "deepseek_v2" ? 6u + 9 + 1 : 7u + 10 + 1) << name;
    const auto held_out = testing_util::RandomWindows(8, 32, reference.config.vocab_size, 999);
    const double e_direct = testing_util::LogitError(reference, LoadModel(dir / "direct.gguf"), held_out);
    const double e_calibrated = testing_util::LogitError(reference, LoadModel(dir / "calibrated.gguf"), held_out);
    std::cout << name << " Q4_0 logit MSE: calibrated " << e_calibrated << ", direct " << e_direct << "\n";
    EXPECT_LT(e_calibrated, e_direct) << name << ": calibrated " << e_calibrated << ", direct " << e_direct;
  }
}

// The fixtures' vocabulary as a byte-level tokenizer.json (96 single-character tokens from '!', as
// tests/interop/hf_architectures.py writes it), and a text of it without BOS, EOS or pad ids.
void WriteByteTokenizer(const fs::path& folder) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 96; ++i) {  // code points U+0021..U+0080, in UTF-8
    const int cp = 0x21 + i;
    vocab[cp < 0x80 ? std::string(1, static_cast<char>(cp))
                    : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))}] = i;
  }
  const nlohmann::json tokenizer = {
      {"version", "1.0"}, {"added_tokens", nlohmann::json::array()}, {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr}, {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  WriteFileAtomic(folder / "tokenizer.json", tokenizer.dump());
  std::string text;
  for (const auto& window : testing_util::RandomWindows(8, 32, 91))  // '$'..'~': ids 3..93
    for (const int32_t t : window) text += static_cast<char>(0x21 + 3 + t);
  WriteFileAtomic(folder / "calib.txt", text);
}

// `lowbit imatrix` of fixture `name` over the byte text, 32-token chunks, into dir/im.gguf.
ImatrixJob FixtureImatrixJob(const std::string& name, const fs::path& dir) {
  WriteByteTokenizer(dir);
  ImatrixJob job;
  job.model = (kFixtures / name).string();
  job.tokenizer = (dir / "tokenizer.json").string();
  job.calib = (dir / "calib.txt").string();
  job.out = (dir / "im.gguf").string();
  job.ctx = 32;
  return job;
}

// Every entry of the imatrix names a matrix of `model`'s F32 GGUF export (dir/m.gguf, returned) with its input
// width, one per expert for ffn_*_exps.
GgufFile ExpectEntriesAreExportedMatrices(const std::string& name, const std::string& imatrix, Model model,
                                          const fs::path& dir) {
  StreamedModel s{std::move(model), nullptr};
  GgufExportOptions o;
  o.type = "F32";
  ExportGguf(s, dir / "m.gguf", o);
  GgufFile exported = GgufFile::Open(dir / "m.gguf");
  for (const auto& [entry, importance] : ReadImatrix(imatrix).columns) {
    const GgufTensorInfo* t = exported.FindTensor(entry);
    EXPECT_NE(t, nullptr) << name << ": " << entry;
    if (t) EXPECT_EQ(importance.size(), t->dims[0] * (t->dims.size() > 2 ? t->dims[2] : 1)) << entry;
  }
  return exported;
}

// llama-imatrix's entries for mixtures of experts and latent attention: ffn_*_exps one matrix per expert with its
// own row count (the counts sum to tokens x experts per token, and the experts' sums to top-k times the shared
// expert's, which sees every row once), the shared expert's and latent attention's under llama.cpp's names; every
// entry names a matrix of the model's GGUF export.
TEST(Imatrix, ExpertsAndLatentAttentionAsLlamaImatrixWritesThem) {
  for (const char* name : {"qwen2_moe", "deepseek_v2", "deepseek_v3"}) {
    testing_util::ScratchDir dir("imatrix-moe");
    const ImatrixJob job = FixtureImatrixJob(name, dir.path());
    const nlohmann::json r = RunImatrixJob(job);
    const size_t tokens = r.at("tokens").get<size_t>();
    const Model m = LoadModel(kFixtures / name);
    const ModelConfig& c = m.config;
    const GgufFile f = GgufFile::Open(job.out);
    const auto values = [&](const std::string& tensor) {
      const GgufTensorInfo* t = f.FindTensor("blk.1." + tensor);
      if (!t) ADD_FAILURE() << name << ": no " << tensor;
      return t ? DequantizeGgufTensor(*t) : std::vector<float>{};
    };
    const std::vector<float> counts = values("ffn_gate_exps.weight.counts");
    ASSERT_EQ(counts.size(), c.n_experts) << name;
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0.0), double(tokens) * c.experts_per_token) << name;
    const std::vector<float> experts = values("ffn_up_exps.weight.in_sum2"), shared = values("ffn_up_shexp.weight.in_sum2");
    ASSERT_EQ(experts.size(), c.n_experts * c.dim) << name;
    ASSERT_EQ(shared.size(), c.dim) << name;
    EXPECT_EQ(values("ffn_gate_inp.weight.in_sum2"), shared) << name;  // the router reads every row, as the shared expert
    EXPECT_EQ(f.FindTensor("blk.1.ffn_gate_inp_shexp.weight.in_sum2") != nullptr, c.shared_expert_gated) << name;
    for (size_t i = 0; i < c.dim; ++i) {
      double sum = 0;
      for (size_t e = 0; e < c.n_experts; ++e) sum += experts[e * c.dim + i];
      EXPECT_NEAR(sum, c.experts_per_token * shared[i], 1e-4 * sum) << name << " column " << i;
    }
    if (c.mla()) {
      EXPECT_EQ(values("attn_kv_a_mqa.weight.in_sum2"), values(c.q_lora_rank ? "attn_q_a.weight.in_sum2" : "attn_q.weight.in_sum2"));
      EXPECT_EQ(values(c.q_lora_rank ? "attn_q_b.weight.in_sum2" : "attn_kv_a_mqa.weight.in_sum2").size(),
                c.q_lora_rank ? c.q_lora_rank : c.dim);
      // attn_k_b / attn_v_b: one vector per head, one count (llama-imatrix's 3-d mul_mat), positive everywhere.
      for (const auto& [tensor, width] : {std::pair{"attn_k_b", c.qk_nope_dim}, {"attn_v_b", c.kv_lora_rank}}) {
        const std::vector<float> sums = values(std::string(tensor) + ".weight.in_sum2");
        EXPECT_EQ(sums.size(), c.n_heads * width) << name << " " << tensor;
        EXPECT_GT(*std::min_element(sums.begin(), sums.end()), 0.0f) << name << " " << tensor;
        EXPECT_EQ(values(std::string(tensor) + ".weight.counts"), std::vector<float>{float(tokens)}) << name;
      }
    }
    // Every entry is a matrix of the model's GGUF file (llama.cpp runs V2's groups by its own rule: as exported).
    (void)ExpectEntriesAreExportedMatrices(
        name, job.out, std::string(name).starts_with("deepseek") ? LlamaCppRunnable(name) : LoadModel(kFixtures / name),
        dir.path());
  }
}

// The imatrix's names are the export's: every entry names a matrix of lowbit's GGUF file with its input width, and
// every matrix but the embeddings has one, so `export --imatrix` and llama-quantize use all of them. Phi-3's q/k/v go
// out fused as attn_qkv and its gate and up as ffn_up, as llama.cpp's converter writes them; GLM-4's gate and up too.
TEST(Imatrix, EveryEntryIsAMatrixOfTheExportAndBack) {
  for (const char* name : {"phi3", "glm4", "hunyuan_v1_moe"}) {
    testing_util::ScratchDir dir("imatrix-names");
    const ImatrixJob job = FixtureImatrixJob(name, dir.path());
    (void)RunImatrixJob(job);
    const auto columns = ReadImatrix(job.out).columns;
    const GgufFile exported = ExpectEntriesAreExportedMatrices(name, job.out, LoadModel(kFixtures / name), dir.path());
    for (const GgufTensorInfo& t : exported.tensors())
      if (t.dims.size() >= 2 && t.name != "token_embd.weight" && t.name != "output.weight")
        EXPECT_TRUE(columns.contains(t.name)) << name << ": no entry for " << t.name;
  }
}

}  // namespace
}  // namespace lowbit
