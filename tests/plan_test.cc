// Planner and advisor: the worked figures of issue 6 (exact), hardware and preset tables, model
// inputs (--params, config.json, folders, GGUF), and advise decisions on a few scenarios.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "gguf_writer_for_tests.h"
#include "model_test_util.h"
#include "plan/advise.h"
#include "plan/arch.h"
#include "plan/hardware.h"
#include "plan/plan.h"
#include "plan/presets.h"
#include "plan/synth.h"

namespace lowbit {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

ModelSpec Preset(const char* name) { return SpecFromArch(FindPreset(name)); }
ModelSpec Params(const char* text) { return SpecFromParams(ParseParamCount(text), 0, text); }

FormatPlan PlanOf(const ModelSpec& spec, const char* hw, const char* format, const PlanOptions& o = {}) {
  return PlanFormat(spec, FindHardware(hw), format, o);
}

double Gb2(uint64_t bytes) { return RoundTo(bytes / 1e9, 2); }  // what the table prints

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- Worked figures --------------------------------------------------------------------------

TEST(PlanWorkedFigures, SeventyBillionIs140_70_35GB) {
  const ModelSpec s = Params("70B");
  EXPECT_EQ(s.TotalParams(), 70'000'000'000u);
  const FormatPlan p16 = PlanOf(s, "H100-SXM", "fp16");
  EXPECT_EQ(p16.weight_bytes, 140'000'000'000u);
  EXPECT_EQ(RoundTo(p16.bits_per_weight, 3), 16.0);
  // 8 and 4 bits: the codes are exactly 70 and 35 GB; a per-tensor scale adds a few KB.
  const FormatPlan p8 = PlanOf(s, "H100-SXM", "fp8_e4m3:tensor");
  EXPECT_EQ(p8.quantized.codes, 70'000'000'000u);
  EXPECT_EQ(Gb2(p8.weight_bytes), 70.00);
  const FormatPlan p4 = PlanOf(s, "H100-SXM", "int4:tensor");
  EXPECT_EQ(p4.quantized.codes, 35'000'000'000u);
  EXPECT_EQ(Gb2(p4.weight_bytes), 35.00);
  EXPECT_EQ(RoundTo(p4.bits_per_weight, 3), 4.0);
  // The int4 preset (g128, fp16 scale) adds 16/128 bits per weight on top: 1.09375 GB of scales.
  const FormatPlan g128 = PlanOf(s, "H100-SXM", "int4");
  EXPECT_EQ(g128.quantized.codes, 35'000'000'000u);
  EXPECT_EQ(g128.quantized.scales, 1'093'750'000u);
  EXPECT_EQ(RoundTo(g128.bits_per_weight, 3), 4.125);
  // Bare counts are weights only.
  EXPECT_EQ(p16.kv_bytes, 0u);
  EXPECT_EQ(p16.total_bytes, p16.weight_bytes);
}

TEST(PlanWorkedFigures, DecodeBound140GBOver3_35TBs) {
  const FormatPlan p = PlanOf(Params("70B"), "H100-SXM", "fp16");
  EXPECT_DOUBLE_EQ(p.memory_ms, 140e9 / 3.35e12 * 1e3);
  EXPECT_EQ(fmt::format("{:.1f}", p.decode_ms_per_token_lower_bound), "41.8");
  EXPECT_NEAR(p.decode_ms_per_token_lower_bound, 41.791, 1e-3);
  EXPECT_NEAR(p.tokens_per_s_per_sequence, 23.93, 1e-2);
  EXPECT_LT(p.compute_ms, p.memory_ms);  // batch 1 is memory-bound
  EXPECT_EQ(p.devices_needed, 2u);       // 140 GB over 90% of 80 GiB
  EXPECT_DOUBLE_EQ(p.arithmetic_intensity_batch1, 1.0);  // 2 FLOPs per 2-byte weight
  ASSERT_TRUE(p.ridge_batch.has_value());
  EXPECT_EQ(*p.ridge_batch, 296u);  // ceil(989 TFLOPS / 3.35 TB/s) at 1 FLOP/byte per sequence
}

// Sliding-window layers cache at most their window. Mistral-7B-v0.1 (every layer, window 4096): 32 layers x
// 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131,072 bytes per token; at 32k tokens the cache holds 4096 of them
// per layer, 8x less than full attention; below the window nothing changes. The bytes one decode step reads
// shrink with it (ms/token).
TEST(PlanWorkedFigures, SlidingWindowLayersCacheTheirWindowOnly) {
  const ModelSpec s = Preset("mistral-7b");
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("fp16")), 131'072u);
  EXPECT_EQ(KvLayerTokens(s, 2048), 32u * 2048);
  EXPECT_EQ(KvLayerTokens(s, 32768), 32u * 4096);
  PlanOptions o;
  o.ctx = 32768;
  o.batch = 4;
  const FormatPlan p = PlanOf(s, "H100-SXM", "fp16", o);
  EXPECT_EQ(p.kv_bytes, 131'072u * 4096 * 4);
  ModelSpec full = s;
  full.kv_window = 0;
  const FormatPlan q = PlanOf(full, "H100-SXM", "fp16", o);
  EXPECT_EQ(q.kv_bytes, 8 * p.kv_bytes);
  EXPECT_LT(p.memory_ms, q.memory_ms);
  EXPECT_NEAR(q.step_bytes - p.step_bytes, 4.0 * 131'072 * (32768 - 4096), 1.0);
  // From a config: Gemma 3's layer_types (one sliding layer of two, window 6).
  const ModelSpec g = SpecFromArch(ArchFromPath(LOWBIT_SOURCE_DIR "/tests/data/architectures/gemma3"));
  EXPECT_EQ(g.kv_window, 6u);
  EXPECT_EQ(g.window_layers, 1u);
  EXPECT_EQ(KvLayerTokens(g, 100), 100u + 6);
}

TEST(PlanWorkedFigures, Llama2_70bKvCache) {
  const ModelSpec s = Preset("llama-2-70b");
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("fp16")), 327'680u);
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("fp8")), 160u * 1024);  // 160 KiB
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("fp8_e4m3")), 163'840u);
  PlanOptions o;
  o.ctx = 4096;
  FormatPlan p = PlanOf(s, "H100-SXM", "fp16", o);
  EXPECT_EQ(p.kv_bytes_per_token, 327'680u);
  EXPECT_EQ(p.kv_bytes, 1'342'177'280u);
  EXPECT_EQ(Gb2(p.kv_bytes), 1.34);
  o.ctx = 32768;
  p = PlanOf(s, "H100-SXM", "fp16", o);
  EXPECT_EQ(Gb2(p.kv_bytes), 10.74);
  o.ctx = 131072;
  p = PlanOf(s, "H100-SXM", "fp16", o);
  EXPECT_EQ(Gb2(p.kv_bytes), 42.95);
}

TEST(PlanWorkedFigures, Int4G128ZeroPointOverhead) {
  const QuantScheme int_zero = ParseScheme("int4:g128:asym");
  const QuantScheme f16_zero = ParseScheme("int4:g128:asym:zero=f16");
  EXPECT_EQ(RoundTo(int_zero.BitsPerWeight(8192, 8192) - 4, 3), 0.156);
  EXPECT_DOUBLE_EQ(int_zero.BitsPerWeight(8192, 8192) - 4, 0.15625);
  EXPECT_DOUBLE_EQ(f16_zero.BitsPerWeight(8192, 8192) - 4, 0.25);
  // The same on every linear of Llama-2-70B (all widths are multiples of 128).
  const ModelSpec s = Preset("llama-2-70b");
  const FormatPlan pi = PlanOf(s, "H100-SXM", "int4:g128:asym");
  const FormatPlan pf = PlanOf(s, "H100-SXM", "int4:g128:asym:zero=f16");
  EXPECT_EQ(RoundTo(pi.linear_bits_per_weight, 3), 4.156);
  EXPECT_DOUBLE_EQ(pf.linear_bits_per_weight, 4.25);
  EXPECT_EQ(pi.quantized.scales * 32, pi.quantized.codes);   // 16 bits per 128 four-bit codes
  EXPECT_EQ(pi.quantized.zeros * 128, pi.quantized.codes);   // 4 bits per 128 four-bit codes
  EXPECT_EQ(PlanToJson(pi)["linear_bits_per_weight"].get<double>(), 4.156);
}

TEST(PlanWorkedFigures, KvCache128x8192Is320GiB) {
  PlanOptions o;
  o.ctx = 8192;
  o.batch = 128;
  const FormatPlan p = PlanOf(Preset("llama-2-70b"), "H100-SXM", "fp16", o);
  EXPECT_EQ(p.kv_bytes, 128ull * 8192 * 80 * 8 * 128 * 2 * 2);
  EXPECT_EQ(p.kv_bytes, 320 * kGiB);
}

// ---- Plan details ----------------------------------------------------------------------------

TEST(Plan, JsonHasTheRequiredFields) {
  const nlohmann::json j = PlanToJson(PlanOf(Preset("llama-3-8b"), "H100-SXM", "int4:g128"));
  for (const char* key : {"format", "weight_bytes", "bits_per_weight", "kv_bytes_per_token", "kv_bytes", "total_bytes",
                          "decode_ms_per_token_lower_bound", "codes_bytes", "scales_bytes", "zeros_bytes",
                          "devices_needed", "arithmetic_intensity_batch1", "ridge_batch"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["format"], "int4:g128");
  EXPECT_EQ(j["weight_bytes"].get<uint64_t>(),
            j["codes_bytes"].get<uint64_t>() + j["scales_bytes"].get<uint64_t>() + j["zeros_bytes"].get<uint64_t>() +
                j["unquantized_bytes"].get<uint64_t>());
}

TEST(Plan, WeightsUseEveryMatrixShape) {
  const ModelSpec s = Preset("llama-2-7b");
  const FormatPlan p = PlanOf(s, "H100-SXM", "int4:g128");
  // Linears: 32 x (4 x 4096^2 + 3 x 4096 x 11008); embeddings + lm_head and norms stay fp16.
  const uint64_t linear = 32ull * (4 * 4096 * 4096 + 3ull * 4096 * 11008);
  EXPECT_EQ(p.quantized.codes, linear / 2);
  EXPECT_EQ(p.quantized.scales, linear / 128 * 2);
  EXPECT_EQ(p.quantized.zeros, 0u);
  EXPECT_EQ(p.unquantized_bytes, (s.TotalParams() - linear) * 2);
  PlanOptions o;
  o.quantize_embeddings = true;
  const FormatPlan q = PlanOf(s, "H100-SXM", "int4:g128", o);
  EXPECT_TRUE(q.embeddings_quantized);
  EXPECT_EQ(q.unquantized_bytes, s.other_params * 2);  // norms only
  EXPECT_LT(q.weight_bytes, p.weight_bytes);
  // A plain float format keeps everything in that format.
  EXPECT_EQ(PlanOf(s, "H100-SXM", "fp32").weight_bytes, s.TotalParams() * 4);
}

TEST(Plan, KvDtypesCountTheirScales) {
  const ModelSpec s = Preset("llama-2-70b");
  // int8 = int8:channel: one fp16 scale per token and KV head.
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("int8")), 80u * 16 * (128 + 2));
  // int4 group 32 asymmetric: 4-bit codes, an fp16 scale and a 4-bit zero per 32 values.
  EXPECT_EQ(KvBytesPerToken(s, ParseKvCacheDtype("int4:g32:asym")), 80u * 16 * (64 + 4 * 2 + 2));
  // MLA caches the 512 + 64 latent per layer.
  EXPECT_EQ(KvBytesPerToken(Preset("deepseek-v3"), ParseKvCacheDtype("bf16")), 61u * 576 * 2);
  EXPECT_NE(ErrorOf([] { ParseKvCacheDtype("fp7"); }).find("unknown format"), std::string::npos);
}

TEST(Plan, MoeDecodeReadsOnlyRoutedExperts) {
  const ModelSpec s = Preset("mixtral-8x7b");
  PlanOptions o;
  o.ctx = 1;
  const FormatPlan p = PlanOf(s, "H100-SXM", "bf16", o);
  // At batch 1 a step reads the active parameters (minus all but one embedding row), not all 46.7B.
  EXPECT_NEAR(double(p.step_bytes), 2.0 * (s.ActiveParams() - 32000ull * 4096 + 4096), 1e6);
  o.batch = 256;  // a big batch touches (almost) every expert
  const FormatPlan big = PlanOf(s, "H100-SXM", "bf16", o);
  EXPECT_GT(double(big.step_bytes), 0.99 * 2.0 * (s.TotalParams() - 32000ull * 4096));
}

TEST(Plan, LongContextKeepsDecodeMemoryBound) {
  PlanOptions o;
  o.ctx = 32768;
  const FormatPlan p = PlanOf(Preset("llama-2-70b"), "H100-SXM", "fp16", o);
  EXPECT_TRUE(p.ridge_batch.has_value());           // the weight GEMMs do turn compute-bound
  EXPECT_FALSE(p.ridge_batch_at_ctx.has_value());   // GQA attention over 32K tokens never does
  EXPECT_EQ(PlanToJson(p)["ridge_batch_at_ctx"], nullptr);
}

TEST(Plan, Fp8UsesFp8PeakOnlyWhereNative) {
  const ModelSpec s = Preset("llama-3-8b");
  EXPECT_EQ(PlanOf(s, "H100-SXM", "fp8_e4m3").compute_path, "fp8");
  EXPECT_EQ(PlanOf(s, "RTX-3090", "fp8_e4m3").compute_path, "bf16");
  EXPECT_EQ(PlanOf(s, "B200", "nvfp4").compute_path, "fp4");
  EXPECT_EQ(PlanOf(s, "H100-SXM", "int4").compute_path, "bf16");
}

TEST(Plan, ParsesParameterCounts) {
  EXPECT_EQ(ParseParamCount("70B"), 70'000'000'000u);
  EXPECT_EQ(ParseParamCount("1.5b"), 1'500'000'000u);
  EXPECT_EQ(ParseParamCount("500M"), 500'000'000u);
  EXPECT_EQ(ParseParamCount("7e9"), 7'000'000'000u);
  EXPECT_EQ(ParseParamCount("405000000000"), 405'000'000'000u);
  for (const char* bad : {"", "B", "seventy", "-7B", "7X", "0"})
    EXPECT_NE(ErrorOf([&] { ParseParamCount(bad); }).find("parameter count"), std::string::npos) << bad;
  EXPECT_NE(ErrorOf([] { SpecFromParams(10, 20, "x"); }).find("--active-params"), std::string::npos);
}

// ---- Tables ----------------------------------------------------------------------------------

TEST(Hardware, LooksUpDatasheetFigures) {
  const Hardware h100 = FindHardware("h100-sxm");
  EXPECT_EQ(h100.name, "H100-SXM");
  EXPECT_DOUBLE_EQ(h100.bandwidth, 3.35e12);
  EXPECT_EQ(h100.memory_bytes, 80 * kGiB);
  EXPECT_EQ(h100.compute_capability(), "9.0");
  EXPECT_TRUE(h100.fp8_native());
  const Hardware rtx3090 = FindHardware("RTX-3090");
  EXPECT_EQ(rtx3090.compute_capability(), "8.6");
  EXPECT_FALSE(rtx3090.fp8_native());
  EXPECT_TRUE(FindHardware("RTX-4090").fp8_native());  // Ada, cc 8.9
  EXPECT_TRUE(FindHardware("B200").fp4_native());
  EXPECT_EQ(FindHardware("MI300X").compute_capability(), "-");
  EXPECT_EQ(HardwareTable().size(), 13u);
  for (const Hardware& h : HardwareTable()) {
    EXPECT_GT(h.memory_bytes, 0u) << h.name;
    EXPECT_GT(h.bandwidth, 0) << h.name;
    EXPECT_GT(h.bf16_flops, 0) << h.name;
    EXPECT_FALSE(h.source.empty()) << h.name;
  }
}

TEST(Hardware, CpuUsesTheGivenBandwidth) {
  const Hardware cpu = FindHardware("CPU", 42);
  EXPECT_TRUE(cpu.is_cpu());
  EXPECT_DOUBLE_EQ(cpu.bandwidth, 42e9);
  EXPECT_GT(cpu.memory_bytes, 0u);
  EXPECT_DOUBLE_EQ(FindHardware("cpu").bandwidth, kDefaultCpuBandwidthGBs * 1e9);
  EXPECT_NE(ErrorOf([] { FindHardware("cpu", 0); }).find("--cpu-bandwidth"), std::string::npos);
}

TEST(Hardware, UnknownNameListsKnownOnes) {
  const std::string e = ErrorOf([] { FindHardware("H300"); });
  EXPECT_NE(e.find("unknown hardware 'H300'"), std::string::npos);
  for (const char* n : {"A100-40G", "A100-80G", "H100-SXM", "H100-PCIe", "H200", "H20", "B200", "L40S", "RTX-4090",
                        "RTX-3090", "MI300X", "Gaudi3", "Ascend-910B", "cpu"})
    EXPECT_NE(e.find(n), std::string::npos) << n;
}

TEST(Presets, ShapesReproducePublishedParameterCounts) {
  EXPECT_EQ(ModelPresets().size(), 16u);
  for (const ModelArch& a : ModelPresets()) {
    const ModelSpec s = SpecFromArch(a);
    if (a.name == "deepseek-v3") {  // published as 671B / 37B
      EXPECT_NEAR(s.TotalParams() / 1e9, 671, 0.5);
      EXPECT_NEAR(s.ActiveParams() / 1e9, 37, 0.6);
    } else if (a.name == "deepseek-v2-lite") {  // published as 15.7B / 2.4B
      EXPECT_EQ(s.TotalParams(), 15'706'484'224u);  // the shapes' sum, by hand in the preset's terms
      EXPECT_NEAR((s.ActiveParams() - 102400.0 * 2048) / 1e9, 2.4, 0.06);  // the count leaves out the table
    } else {  // exact counts from the checkpoints' safetensors
      EXPECT_EQ(double(s.TotalParams()), a.published_total) << a.name;
    }
  }
  EXPECT_EQ(Preset("llama-2-7b").TotalParams(), 6'738'415'616u);
  EXPECT_EQ(Preset("llama-3-8b").TotalParams(), 8'030'261'248u);
  EXPECT_EQ(Preset("qwen2.5-7b").TotalParams(), 7'615'616'512u);
  EXPECT_EQ(Preset("qwen3-8b").TotalParams(), 8'190'735'360u);  // q/k norms included
  EXPECT_EQ(Preset("mixtral-8x7b").TotalParams(), 46'702'792'704u);
  EXPECT_NEAR(Preset("mixtral-8x7b").ActiveParams() / 1e9, 12.9, 0.05);
  EXPECT_EQ(Preset("qwen3-30b-a3b").TotalParams(), 30'532'122'624u);
  // 48 x (18.87M attention + 8 x 3 x 768 x 2048 experts + the 128 x 2048 router) + 2 x 311.2M embeddings/lm_head
  // = 3.353B ("3.3B activated").
  EXPECT_NEAR(Preset("qwen3-30b-a3b").ActiveParams() / 1e9, 3.353, 0.001);
  // GPT-OSS's model card: 3.61B / 5.13B active without the embedding table (the lm_head counted).
  EXPECT_EQ(Preset("gpt-oss-20b").TotalParams(), 20'914'757'184u);
  EXPECT_EQ(Preset("gpt-oss-120b").TotalParams(), 116'829'156'672u);
  EXPECT_NEAR((Preset("gpt-oss-20b").ActiveParams() - 201088.0 * 2880) / 1e9, 3.61, 0.005);
  EXPECT_NEAR((Preset("gpt-oss-120b").ActiveParams() - 201088.0 * 2880) / 1e9, 5.13, 0.005);
}

// A synthetic folder holds exactly the preset's parameters, each tensor as the loader names it: its config.json
// read back by the Hugging Face reader gives the same architecture, and its tensors add up to the plan's count
// (for GPT-OSS the stacked experts and every bias; for the checkpoints with exact published counts, those).
TEST(Presets, SynthFoldersHoldThePresetsParameters) {
  for (const ModelArch& a : ModelPresets()) {
    uint64_t params = 0;
    for (const auto& [name, shape] : SynthTensorShapes(a)) {
      uint64_t n = 1;
      for (const uint64_t d : shape) n *= d;
      params += n;
    }
    EXPECT_EQ(params, SpecFromArch(a).TotalParams()) << a.name;
  }
  const auto shapes = SynthTensorShapes(FindPreset("gpt-oss-20b"));
  const auto has = [&](const std::string& name, std::vector<uint64_t> shape) {
    return std::ranges::find(shapes, std::pair{name, shape}) != shapes.end();
  };
  EXPECT_TRUE(has("model.layers.23.mlp.experts.gate_up_proj", {32, 2880, 5760}));
  EXPECT_TRUE(has("model.layers.0.mlp.experts.down_proj_bias", {32, 2880}));
  EXPECT_TRUE(has("model.layers.0.self_attn.sinks", {64}));
  EXPECT_TRUE(has("model.layers.0.self_attn.o_proj.bias", {2880}));
  EXPECT_TRUE(has("model.layers.0.mlp.router.bias", {32}));
}

TEST(Presets, ArchitectureNumbers) {
  const ModelArch& l3 = FindPreset("Llama-3-70B");
  EXPECT_EQ(l3.n_layers, 80u);
  EXPECT_EQ(l3.n_kv_heads, 8u);
  EXPECT_EQ(l3.vocab, 128256u);
  EXPECT_FALSE(l3.tied);
  EXPECT_TRUE(FindPreset("qwen2.5-7b").qkv_bias);
  EXPECT_TRUE(FindPreset("deepseek-v3").mla());
  EXPECT_EQ(FindPreset("mixtral-8x7b").experts_per_token, 2u);
}

TEST(Presets, UnknownNameListsKnownOnes) {
  const std::string e = ErrorOf([] { FindPreset("llama-4"); });
  EXPECT_NE(e.find("unknown model preset 'llama-4'"), std::string::npos);
  for (const ModelArch& a : ModelPresets()) EXPECT_NE(e.find(a.name), std::string::npos) << a.name;
}

// ---- Model inputs ----------------------------------------------------------------------------

class PlanModelInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lowbit_plan_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

TEST_F(PlanModelInput, BundledModelFolderAndConfig) {
  const std::filesystem::path folder = std::filesystem::path(LOWBIT_SOURCE_DIR) / "models/kjv-llama-7m";
  for (const auto& path : {folder, folder / "config.json"}) {
    const ModelArch a = ArchFromPath(path);
    EXPECT_EQ(a.name, "kjv-llama-7m");
    const ModelSpec s = SpecFromArch(a);
    uint64_t linear = 0;
    for (const TensorGroup& t : s.tensors)
      if (t.role == TensorRole::kLinear) linear += t.count * t.rows * t.cols;
    EXPECT_EQ(linear, 4'718'592u);  // the 42 linear weights `lowbit demo` quantizes
    EXPECT_EQ(s.kv_rows * s.kv_cols, 2u * 4 * 32);
  }
}

TEST_F(PlanModelInput, GgufMetadata) {
  const std::filesystem::path path = dir_ / "tiny.gguf";
  gguf_testing::MakeTinyLlama().writer.Write(path);
  const ModelArch a = ArchFromPath(path);
  EXPECT_EQ(a.name, "tiny");
  EXPECT_EQ(a.n_layers, gguf_testing::kLayers);
  EXPECT_EQ(a.hidden, gguf_testing::kDim);
  EXPECT_EQ(a.n_kv_heads, gguf_testing::kKvHeads);
  EXPECT_EQ(a.vocab, gguf_testing::kVocab);
}

TEST_F(PlanModelInput, Errors) {
  EXPECT_NE(ErrorOf([&] { ArchFromPath(dir_ / "missing"); }).find("no such file"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ArchFromPath(dir_); }).find("no config.json"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ArchFromPath(Write("weights.bin", "x")); }).find("unknown model input"), std::string::npos);
  const auto other = Write("config.json", R"({"architectures": ["Starcoder2ForCausalLM"]})");
  EXPECT_NE(ErrorOf([&] { ArchFromPath(other); }).find("unsupported architecture 'Starcoder2ForCausalLM'"),
            std::string::npos);
}

// deepseek-ai/DeepSeek-V3's config.json (its multi-token-prediction block aside) plans the model of the
// deepseek-v3 preset, tensor for tensor: latent attention, 3 dense layers, 256 experts + 1 shared.
TEST_F(PlanModelInput, DeepSeekV3ConfigMatchesItsPreset) {
  const auto config = Write("config.json", testing_util::kDeepSeekV3Config);
  const ModelSpec s = SpecFromArch(ArchFromPath(config)), preset = Preset("deepseek-v3");
  EXPECT_EQ(s.TotalParams(), preset.TotalParams());
  EXPECT_EQ(s.ActiveParams(), preset.ActiveParams());
  EXPECT_EQ(s.kv_cols, preset.kv_cols);
  ASSERT_EQ(s.tensors.size(), preset.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    EXPECT_EQ(s.tensors[i].name, preset.tensors[i].name);
    EXPECT_EQ(s.tensors[i].rows * s.tensors[i].cols * s.tensors[i].count,
              preset.tensors[i].rows * preset.tensors[i].cols * preset.tensors[i].count) << s.tensors[i].name;
  }
}

// mistralai/Mixtral-8x7B-v0.1's config.json plans the model its preset (and the published 46.7B
// parameters, 12.9B active) describes.
TEST_F(PlanModelInput, MixtralConfigMatchesPublishedCounts) {
  const auto config = Write("config.json", R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1e6,
      "tie_word_embeddings": false, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5})");
  const ModelSpec s = SpecFromArch(ArchFromPath(config));
  EXPECT_EQ(s.TotalParams(), 46'702'792'704u);
  EXPECT_EQ(s.ActiveParams(), Preset("mixtral-8x7b").ActiveParams());
}

// ---- Advise ----------------------------------------------------------------------------------

Advice AdviseOn(const ModelSpec& s, const char* hw, uint64_t ctx = 4096, uint64_t batch = 1, uint32_t devices = 1,
                std::string checkpoint = "") {
  AdviseOptions o;
  o.plan.ctx = ctx;
  o.plan.batch = batch;
  o.devices = devices;
  o.checkpoint_format = std::move(checkpoint);
  return Advise(s, FindHardware(hw), o);
}

TEST(Advise, SeventyBOnOneH100Needs4Bits) {
  for (const ModelSpec& s : {Preset("llama-3-70b"), Preset("llama-2-70b"), Params("70B")}) {
    const Advice a = AdviseOn(s, "H100-SXM");
    EXPECT_EQ(a.recipe(), "gptq int4:g128") << s.name;
    EXPECT_TRUE(a.fits) << s.name;
    ASSERT_GE(a.steps.size(), 3u);
    EXPECT_EQ(a.steps[0].answer, "yes");  // FP8 exists, but 8 bits do not fit
    EXPECT_EQ(a.steps[1].answer, "yes");
    EXPECT_EQ(a.steps[2].answer, "yes, 4x (4-bit)");
  }
}

TEST(Advise, EightBOnH100GetsFp8) {
  const Advice a = AdviseOn(Preset("llama-3-8b"), "H100-SXM");
  EXPECT_EQ(a.format, "fp8_e4m3:channel");
  EXPECT_EQ(a.method, "rtn");
  EXPECT_EQ(a.kv_cache_dtype, "fp16");
  EXPECT_EQ(a.steps[1].answer, "no");
  EXPECT_LT(a.plan.decode_ms_per_token_lower_bound,
            PlanOf(Preset("llama-3-8b"), "H100-SXM", "bf16").decode_ms_per_token_lower_bound);
}

TEST(Advise, SevenBOnRtx3090AvoidsFp8) {
  const Advice a = AdviseOn(Preset("llama-2-7b"), "RTX-3090");
  EXPECT_EQ(a.steps[0].answer, "no");
  EXPECT_NE(a.steps[0].reason.find("8.6"), std::string::npos);
  EXPECT_TRUE(a.format.starts_with("int8") || a.format.starts_with("int4")) << a.format;
  EXPECT_EQ(a.format.find("fp8"), std::string::npos);
  EXPECT_TRUE(a.fits);
}

TEST(Advise, LongContextTimesBatchQuantizesTheKvCache) {
  const Advice a = AdviseOn(Preset("llama-3-8b"), "H100-SXM", 32768, 16);
  EXPECT_EQ(a.kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(a.steps.back().answer, "yes");
  EXPECT_TRUE(a.fits);
  const Advice b = AdviseOn(Preset("llama-2-7b"), "RTX-3090", 8192, 4);  // no FP8: INT8 cache
  EXPECT_EQ(b.kv_cache_dtype, "int8");
  EXPECT_TRUE(b.fits);
}

TEST(Advise, TrustedCheckpoint) {
  const Advice used = AdviseOn(Preset("llama-3-70b"), "H100-SXM", 4096, 1, 1, "int4:g128");
  EXPECT_EQ(used.recipe(), "pre-quantized int4:g128");
  const Advice too_big = AdviseOn(Preset("llama-3-70b"), "H100-SXM", 4096, 1, 1, "fp8_e4m3:channel");
  EXPECT_EQ(too_big.recipe(), "gptq int4:g128");
  EXPECT_EQ(too_big.steps[3].answer, "yes, not used");
  const Advice less_precise = AdviseOn(Preset("llama-3-8b"), "H100-SXM", 4096, 1, 1, "int4:g128");
  EXPECT_EQ(less_precise.format, "fp8_e4m3:channel");
}

TEST(Advise, DevicesAndBlackwell) {
  const Advice one = AdviseOn(Preset("llama-3-405b"), "H100-SXM");
  EXPECT_FALSE(one.fits);
  EXPECT_EQ(one.steps[2].answer, "yes, more than 4x");
  EXPECT_EQ(one.kv_cache_dtype, "fp16");  // the weights are the problem, not the cache
  EXPECT_NE(one.notes[0].find("needs 4 x H100-SXM"), std::string::npos) << one.notes[0];
  const Advice eight = AdviseOn(Preset("llama-3-405b"), "H100-SXM", 4096, 1, 8);
  EXPECT_EQ(eight.format, "fp8_e4m3:channel");
  EXPECT_TRUE(eight.fits);
  EXPECT_EQ(AdviseOn(Preset("llama-3-405b"), "B200", 4096, 1, 2).format, "nvfp4");  // 4x on FP4 hardware
  const nlohmann::json j = AdviceToJson(one);
  EXPECT_EQ(j["recipe"], one.recipe());
  EXPECT_TRUE(j["plan"].contains("decode_ms_per_token_lower_bound"));
}

}  // namespace
}  // namespace lowbit
