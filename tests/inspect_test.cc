// lowbit inspect: format detection, per-layer schemes, bits/weight and KV scales on fake checkpoints
// of every format (tests/inspect_fixtures_for_tests.h), a real lowbit checkpoint, the bundled fp32
// model and a GGUF file; the kernel path per GPU and every trap of the published rules; and the CLI.
#include "plan/inspect.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "core/error.h"
#include "gguf_writer_for_tests.h"
#include "inspect_fixtures_for_tests.h"
#include "test_util.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "model/quantize_weights.h"
#include "plan/hardware.h"
#include "plan/kernel_rules.h"
#include "quant/scheme.h"

namespace lowbit {
namespace {

using inspect_testing::FakeCheckpoint;
using inspect_testing::kLayers;
using inspect_testing::Linear;
using nlohmann::json;

// The fixtures' folders go when the test binary ends (the CLI test reads one after its builder).
class RemoveFixtures : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(FakeCheckpoint("cleanup").dir().parent_path(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveFixtures =
    ::testing::AddGlobalTestEnvironment(new RemoveFixtures);

constexpr uint32_t kV1Zeros4 = 0x77777777, kV2Zeros4 = 0x88888888;  // symmetric 4-bit zero point 8

const LayerInfo& Layer(const CheckpointInfo& info, const std::string& name) {
  for (const LayerInfo& l : info.layers)
    if (l.name == name) return l;
  throw std::runtime_error("no layer " + name);
}

std::map<std::string, KernelPath> Kernels(const CheckpointInfo& info, const std::string& flags = "") {
  std::map<std::string, KernelPath> out;
  const EngineFlags f = ParseEngineFlags({flags});
  for (const std::string& gpu : DefaultInspectGpus()) out[gpu] = ChooseKernel(info.summary, FindHardware(gpu), f);
  return out;
}

std::vector<Trap> Traps(const CheckpointInfo& info, const std::string& flags = "") {
  std::vector<Hardware> gpus;
  for (const std::string& gpu : DefaultInspectGpus()) gpus.push_back(FindHardware(gpu));
  return FindTraps(info.summary, gpus, ParseEngineFlags({flags}));
}

// A copy: the callers' trap lists are temporaries.
std::optional<Trap> FindTrap(const std::vector<Trap>& traps, const std::string& id) {
  for (const Trap& t : traps)
    if (t.id == id) return t;
  return std::nullopt;
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The whole checkpoint's parameters are the fixture's, and its bytes are every tensor's.
void ExpectTotals(const CheckpointInfo& info, const FakeCheckpoint& c) {
  EXPECT_EQ(info.params, inspect_testing::LinearParams() + inspect_testing::OtherParams());
  EXPECT_EQ(info.linear_params, inspect_testing::LinearParams());
  EXPECT_EQ(info.bytes, c.bytes());
  EXPECT_EQ(info.n_layers, kLayers);
}

struct GptqOptions {
  int bits = 4, group = 128;
  bool sym = true, desc_act = false;
  std::string checkpoint_format = "gptq";
  uint32_t zeros = kV1Zeros4;
  bool quantize_config_json = false;  // AutoGPTQ's side file instead of config.json
};

CheckpointInfo Gptq(const std::string& name, const GptqOptions& o = {}) {
  FakeCheckpoint c(name);
  c.AddUnquantized();
  c.ForEachLinear([&](const std::string& p, const Linear& l) { c.AddGptq(p, l, o.bits, o.group, o.zeros); });
  c.WriteTensors();
  const json qc = {{"quant_method", "gptq"}, {"bits", o.bits}, {"group_size", o.group},
                   {"desc_act", o.desc_act}, {"sym", o.sym},   {"checkpoint_format", o.checkpoint_format}};
  c.WriteConfig(o.quantize_config_json ? json(nullptr) : qc);
  if (o.quantize_config_json) c.WriteJson("quantize_config.json", qc);
  CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  return info;
}

// ---- Detection, schemes, bits/weight ---------------------------------------------------------

TEST(InspectDense, BundledKjvModelIsPlainFp32) {
  const CheckpointInfo info = InspectCheckpoint(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  EXPECT_EQ(info.format, CheckpointFormat::kDense);
  EXPECT_EQ(info.format_name, "dense F32");
  EXPECT_EQ(info.layers.size(), 6u * 7 + 2);  // 42 linears + embeddings + lm_head
  EXPECT_EQ(info.n_layers, 6u);
  EXPECT_DOUBLE_EQ(info.bits_per_weight(), 32.0);
  EXPECT_EQ(info.linear_params, 0u);
  const LayerInfo& q = Layer(info, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(q.rows, 256u);
  EXPECT_EQ(q.cols, 256u);
  EXPECT_FALSE(q.quantized);
  EXPECT_FALSE(q.ignored);
  EXPECT_EQ(info.summary.family, QuantFamily::kDense);
  for (const auto& [gpu, k] : Kernels(info)) EXPECT_EQ(k.status, PathStatus::kFast) << gpu;
  EXPECT_TRUE(Traps(info).empty());
  // --quantization fp8 on an unquantized checkpoint is online FP8 (weight-only where not native).
  const auto online = Kernels(info, "--quantization fp8");
  EXPECT_EQ(online.at("H100-SXM").kernel, "CUTLASS FP8 W8A8");
  EXPECT_EQ(online.at("A100-80G").status, PathStatus::kWeightOnly);
  EXPECT_EQ(Kernels(info, "--quantization gptq").at("H100-SXM").status, PathStatus::kError);
}

TEST(InspectLowbit, CheckpointFromTheRealWriter) {
  Model model = LoadModel(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  const QuantScheme scheme = ParseScheme("int4:g32:asym");
  QuantizeLinears(model.weights, scheme);
  FakeCheckpoint scratch("lowbit");
  const std::filesystem::path out = scratch.dir() / "out";
  SaveQuantizedModel(model, out, LOWBIT_SOURCE_DIR "/models/kjv-llama-7m", json::object());
  const CheckpointInfo info = InspectCheckpoint(out);
  EXPECT_EQ(info.format, CheckpointFormat::kLowbit);
  EXPECT_EQ(info.format_name, "lowbit-packed");
  const LayerInfo& q = Layer(info, "model.layers.3.self_attn.q_proj");
  EXPECT_TRUE(q.quantized);
  EXPECT_EQ(q.scheme, scheme.ToString());
  EXPECT_EQ(q.bits, 4);
  EXPECT_EQ(q.group, 32);
  EXPECT_TRUE(q.zero_points);
  EXPECT_FALSE(q.symmetric);
  EXPECT_EQ(q.rows, 256u);
  EXPECT_EQ(q.cols, 256u);
  // Codes + f16 scales + 4-bit zeros per 32, plus the int32 g_idx over 256 rows.
  EXPECT_DOUBLE_EQ(q.bits_per_weight(), scheme.BitsPerWeight(256, 256) + 32.0 / 256);
  EXPECT_EQ(info.linear_params, 4718592u);  // 6 x (2x256x256 + 2x128x256 + 3x768x256)
  EXPECT_TRUE(Layer(info, "lm_head").ignored);
  for (const auto& [gpu, k] : Kernels(info)) EXPECT_EQ(k.status, PathStatus::kUnsupported) << gpu;
  EXPECT_TRUE(FindTrap(Traps(info), "lowbit-only"));
}

TEST(InspectGptq, V1Group128) {
  const CheckpointInfo info = Gptq("gptq_v1");
  EXPECT_EQ(info.format, CheckpointFormat::kGptq);
  EXPECT_EQ(info.format_name, "GPTQ v1");
  EXPECT_NE(info.details.find("minus one"), std::string::npos);
  const LayerInfo& down = Layer(info, "model.layers.1.mlp.down_proj");
  EXPECT_EQ(down.scheme, "int4 g128 sym");
  EXPECT_EQ(down.rows, 256u);
  EXPECT_EQ(down.cols, 512u);
  EXPECT_FALSE(down.act_order);
  EXPECT_FALSE(down.zero_points);
  // qweight 4 bits + qzeros 4/128 + fp16 scales 16/128 + int32 g_idx 32/out.
  EXPECT_DOUBLE_EQ(down.bits_per_weight(), 4 + 4.0 / 128 + 16.0 / 128 + 32.0 / 256);
  EXPECT_DOUBLE_EQ(Layer(info, "model.layers.0.mlp.up_proj").bits_per_weight(),
                   4 + 4.0 / 128 + 16.0 / 128 + 32.0 / 512);
  EXPECT_TRUE(Layer(info, "lm_head").ignored);
  EXPECT_FALSE(Layer(info, "model.embed_tokens").ignored);
  EXPECT_TRUE(info.notes.empty());
  ASSERT_EQ(info.summary.variants.size(), 1u);
  EXPECT_EQ(info.summary.variants[0].layers, 14u);

  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").method, "gptq_marlin");
  EXPECT_EQ(k.at("H100-SXM").kernel, "Machete");
  for (const char* gpu : {"A100-80G", "L40S", "RTX-3090", "B200"}) {
    EXPECT_EQ(k.at(gpu).kernel, "Marlin") << gpu;
    EXPECT_EQ(k.at(gpu).status, PathStatus::kFast) << gpu;
  }
  EXPECT_NE(k.at("B200").reason.find("sm90-only"), std::string::npos);
  EXPECT_EQ(k.at("MI300X").kernel, "GPTQ exllama");
  EXPECT_EQ(k.at("MI300X").status, PathStatus::kSlow);
  EXPECT_TRUE(Traps(info).empty());
}

TEST(InspectGptq, V2FromQuantizeConfigJsonAndTheZerosWord) {
  GptqOptions o;
  o.checkpoint_format = "gptq_v2";
  o.zeros = kV2Zeros4;
  o.quantize_config_json = true;
  const CheckpointInfo v2 = Gptq("gptq_v2", o);
  EXPECT_EQ(v2.format_name, "GPTQ v2");
  EXPECT_TRUE(v2.notes.empty());
  // A v1 config over v2-style zeros ("zeros minus one" missing) shifts every weight: say so.
  o.checkpoint_format = "gptq";
  const CheckpointInfo wrong = Gptq("gptq_v1_wrong_zeros", o);
  EXPECT_EQ(wrong.format_name, "GPTQ v1");
  ASSERT_EQ(wrong.notes.size(), 1u);
  EXPECT_NE(wrong.notes[0].find("0x88888888"), std::string::npos);
  EXPECT_NE(wrong.notes[0].find("v2"), std::string::npos);
}

TEST(InspectGptq, ExplicitQuantizationFlagForcesTheOriginalKernel) {
  const CheckpointInfo info = Gptq("gptq_flag");
  const auto forced = Kernels(info, "--quantization gptq");
  for (const char* gpu : {"H100-SXM", "A100-80G", "L40S", "RTX-3090", "B200"}) {
    EXPECT_EQ(forced.at(gpu).kernel, "GPTQ exllama (original)") << gpu;
    EXPECT_EQ(forced.at(gpu).status, PathStatus::kSlow) << gpu;
  }
  const std::optional<Trap> t = FindTrap(Traps(info, "--quantization gptq"), "forced-original-kernel");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->severity, "warning");
  EXPECT_EQ(t->gpus, (std::vector<std::string>{"H100-SXM", "A100-80G", "L40S", "RTX-3090", "B200"}));
  // Naming the Marlin method is fine; naming another method is a start-up error everywhere.
  EXPECT_EQ(Kernels(info, "-q gptq_marlin").at("H100-SXM").kernel, "Machete");
  EXPECT_EQ(Kernels(info, "--quantization=marlin").at("A100-80G").kernel, "Marlin");
  const auto wrong = Kernels(info, "--quantization awq");
  for (const auto& [gpu, k] : wrong) EXPECT_EQ(k.status, PathStatus::kError) << gpu;
  const std::optional<Trap> e = FindTrap(Traps(info, "--quantization awq"), "flag-contradicts-config");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->severity, "error");
  EXPECT_NE(e->message.find("(gptq)"), std::string::npos);
  EXPECT_NE(e->message.find("(awq)"), std::string::npos);
}

TEST(InspectGptq, GroupActOrderIsAStartUpErrorOnEveryGpu) {
  // vLLM 0.32's GPTQ config check (normalize_and_validate_gptq_desc_act): desc_act with groups is
  // refused, whatever the GPU; make test-vllm sees the same refusal from vLLM itself.
  GptqOptions o;
  o.desc_act = true;
  const CheckpointInfo info = Gptq("gptq_desc_act", o);
  const LayerInfo& down = Layer(info, "model.layers.1.mlp.down_proj");
  EXPECT_EQ(down.scheme, "int4 g128 sym act-order");
  EXPECT_TRUE(down.act_order);
  for (const auto& [gpu, k] : Kernels(info)) {
    EXPECT_EQ(k.status, PathStatus::kError) << gpu;
    EXPECT_NE(k.reason.find("desc_act: true"), std::string::npos) << gpu << ": " << k.reason;
  }
  const std::optional<Trap> t = FindTrap(Traps(info), "group-act-order");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->severity, "error");
  EXPECT_EQ(t->gpus.size(), DefaultInspectGpus().size());
  EXPECT_NE(t->message.find("--act-order=static"), std::string::npos) << t->message;
  EXPECT_FALSE(FindTrap(Traps(info), "flag-contradicts-config"));
  // A contradicting --quantization flag is still named as such (vLLM checks the method first).
  EXPECT_TRUE(FindTrap(Traps(info, "--quantization awq"), "flag-contradicts-config"));
  // One group per output channel: act-order changes nothing, and vLLM drops it.
  o.group = -1;
  const CheckpointInfo channel = Gptq("gptq_desc_act_channel", o);
  EXPECT_FALSE(Layer(channel, "model.layers.0.mlp.up_proj").act_order);
  EXPECT_EQ(Kernels(channel).at("H100-SXM").kernel, "Machete");
  EXPECT_FALSE(FindTrap(Traps(channel), "group-act-order"));
}
TEST(InspectGptq, Group256HasNoFastKernel) {
  GptqOptions o;
  o.group = 256;
  const CheckpointInfo info = Gptq("gptq_g256", o);
  EXPECT_EQ(Layer(info, "model.layers.0.mlp.down_proj").group, 256);
  const auto k = Kernels(info);
  for (const char* gpu : {"H100-SXM", "A100-80G", "B200"}) {
    EXPECT_EQ(k.at(gpu).kernel, "GPTQ exllama (original)") << gpu;
    EXPECT_EQ(k.at(gpu).status, PathStatus::kSlow) << gpu;
    EXPECT_NE(k.at(gpu).reason.find("group 256"), std::string::npos) << gpu;
  }
  const std::optional<Trap> t = FindTrap(Traps(info), "group-no-fast-kernel");
  ASSERT_TRUE(t);
  EXPECT_NE(t->message.find("group_size 256 (14 linears)"), std::string::npos);
  // Asking for the Marlin method explicitly cannot convert it: a start-up error.
  EXPECT_EQ(Kernels(info, "--quantization gptq_marlin").at("A100-80G").status, PathStatus::kError);
}

TEST(InspectGptq, AsymmetricRunsTheOriginalKernel) {
  GptqOptions o;
  o.sym = false;
  const CheckpointInfo info = Gptq("gptq_asym", o);
  const LayerInfo& l = Layer(info, "model.layers.0.self_attn.k_proj");
  EXPECT_EQ(l.scheme, "int4 g128 asym");
  EXPECT_TRUE(l.zero_points);
  EXPECT_EQ(Kernels(info).at("A100-80G").kernel, "GPTQ exllama (original)");
  EXPECT_TRUE(FindTrap(Traps(info), "gptq-asymmetric"));
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes.back().find("v1 asymmetric defect"), std::string::npos);
}

TEST(InspectGptq, DynamicOverridesGiveLayerOne8Bits) {
  FakeCheckpoint c("gptq_dynamic");
  c.AddUnquantized();
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    const bool eight = p.starts_with("model.layers.1.");
    c.AddGptq(p, l, eight ? 8 : 4, 128, eight ? 0x7f7f7f7fu : kV1Zeros4);
  });
  c.WriteTensors();
  c.WriteConfig({{"quant_method", "gptq"},
                 {"bits", 4},
                 {"group_size", 128},
                 {"desc_act", false},
                 {"sym", true},
                 {"dynamic", {{"+:.*\\.1\\..*", {{"bits", 8}}}}}});
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  EXPECT_EQ(Layer(info, "model.layers.0.mlp.up_proj").bits, 4);
  EXPECT_EQ(Layer(info, "model.layers.1.mlp.up_proj").bits, 8);
  EXPECT_EQ(info.summary.variants.size(), 2u);
  EXPECT_EQ(Kernels(info).at("H100-SXM").kernel, "Machete");
}

TEST(InspectGptq, ConfigThatContradictsTheTensorsIsAnError) {
  FakeCheckpoint c("gptq_bad_group");
  c.AddUnquantized();
  c.ForEachLinear([&](const std::string& p, const Linear& l) { c.AddGptq(p, l, 4, 128, kV1Zeros4); });
  c.WriteTensors();
  c.WriteConfig({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 64}, {"desc_act", false}, {"sym", true}});
  const std::string e = ErrorOf([&] { InspectCheckpoint(c.dir()); });
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find(".scales"), std::string::npos) << e;
  EXPECT_NE(e.find("group_size 64"), std::string::npos) << e;
  c.WriteConfig({{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 128}, {"desc_act", false}, {"sym", true}});
  EXPECT_NE(ErrorOf([&] { InspectCheckpoint(c.dir()); }).find("int32 rows"), std::string::npos);
  c.WriteConfig(nullptr);  // qweight tensors but no config at all
  EXPECT_NE(ErrorOf([&] { InspectCheckpoint(c.dir()); }).find("no quantization config"), std::string::npos);
}

TEST(InspectAwq, GemmWithZeroPointsRunsMarlinNotMachete) {
  FakeCheckpoint c("awq");
  c.AddUnquantized();
  c.ForEachLinear([&](const std::string& p, const Linear& l) { c.AddAwq(p, l, 128); });
  c.WriteTensors();
  c.WriteConfig({{"quant_method", "awq"},
                 {"bits", 4},
                 {"group_size", 128},
                 {"zero_point", true},
                 {"version", "gemm"},
                 {"modules_to_not_convert", {"lm_head"}}});
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.format_name, "AWQ GEMM");
  EXPECT_EQ(info.config_ignored, std::vector<std::string>{"lm_head"});
  const LayerInfo& o = Layer(info, "model.layers.0.self_attn.o_proj");
  EXPECT_EQ(o.scheme, "int4 g128 asym");
  EXPECT_TRUE(o.zero_points);
  EXPECT_DOUBLE_EQ(o.bits_per_weight(), 4 + 4.0 / 128 + 16.0 / 128);
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").method, "awq_marlin");
  EXPECT_EQ(k.at("H100-SXM").kernel, "Marlin");
  EXPECT_NE(k.at("H100-SXM").reason.find("zero points"), std::string::npos);
  EXPECT_EQ(k.at("MI300X").kernel, "AWQ Triton");
  EXPECT_EQ(Kernels(info, "--quantization awq").at("L40S").kernel, "AWQ GEMM (original)");
  EXPECT_TRUE(FindTrap(Traps(info, "--quantization awq"), "forced-original-kernel"));
  EXPECT_TRUE(FindTrap(Traps(info, "--quantization gptq"), "flag-contradicts-config"));
}

// compressed-tensors config with one group targeting Linear.
json CtConfig(const std::string& format, const json& weights, const json& input = nullptr, const json& kv = nullptr) {
  return {
      {"quant_method", "compressed-tensors"},
      {"format", format},
      {"quantization_status", "compressed"},
      {"ignore", {"lm_head"}},
      {"kv_cache_scheme", kv},
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input}}}}}};
}

TEST(InspectCompressedTensors, W4A16PackQuantized) {
  FakeCheckpoint c("ct_w4a16");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) { c.AddCtPacked(p, l, 128); });
  c.WriteTensors();
  c.WriteConfig(
      CtConfig("pack-quantized",
               {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"group_size", 128}, {"strategy", "group"}}));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.format_name, "compressed-tensors pack-quantized");
  const LayerInfo& v = Layer(info, "model.layers.1.self_attn.v_proj");
  EXPECT_EQ(v.scheme, "int4 g128 sym");
  EXPECT_EQ(v.rows, 128u);
  EXPECT_EQ(v.cols, 256u);
  EXPECT_DOUBLE_EQ(v.bits_per_weight(), 4 + 16.0 / 128 + 8.0 * 16 / (128 * 256));  // + the int64 weight_shape
  EXPECT_EQ(info.summary.family, QuantFamily::kWeightInt);
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").kernel, "Machete");
  EXPECT_EQ(k.at("B200").kernel, "Marlin");
  EXPECT_EQ(k.at("RTX-3090").kernel, "Marlin");
}

// W4A8 / W4AFP8 (packed int4 weights with int8 or FP8 inputs per token): vLLM's WnA8 scheme runs the
// W4A16 kernels on 16-bit activations; FP8 inputs take CUTLASS W4A8 on Hopper and nothing elsewhere.
TEST(InspectCompressedTensors, W4A8RunsWeightOnlyAndW4Afp8OnlyOnHopper) {
  for (const char* type : {"int", "float"}) {
    FakeCheckpoint c(std::string("ct_w4a8_") + type);
    c.AddUnquantized(DType::kBF16);
    c.ForEachLinear([&](const std::string& p, const Linear& l) { c.AddCtPacked(p, l, 128); });
    c.WriteTensors();
    c.WriteConfig(CtConfig("pack-quantized",
                           {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"group_size", 128}, {"strategy", "group"}},
                           {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}}));
    const CheckpointInfo info = InspectCheckpoint(c.dir());
    EXPECT_EQ(info.summary.family, QuantFamily::kWeightInt) << type;
    EXPECT_TRUE(info.summary.activations_quantized);
    const auto k = Kernels(info);
    if (std::string(type) == "int") {
      EXPECT_EQ(k.at("H100-SXM").kernel, "Machete");
      EXPECT_EQ(k.at("H100-SXM").status, PathStatus::kWeightOnly);
      EXPECT_NE(k.at("A100-80G").reason.find("16-bit activations"), std::string::npos);
    } else {
      EXPECT_EQ(k.at("H100-SXM").kernel, "CUTLASS W4A8 (FP8 activations)");
      EXPECT_EQ(k.at("H100-SXM").status, PathStatus::kFast);
      EXPECT_EQ(k.at("A100-80G").status, PathStatus::kUnsupported);
      EXPECT_EQ(k.at("B200").status, PathStatus::kUnsupported);
    }
  }
}

// MXFP4 with FP8 inputs (MXFP4xFP8): Blackwell's FP4 GEMM runs, quantizing the inputs to MXFP4
// instead, which is a warning; before Blackwell FP4 Marlin runs weight-only.
TEST(InspectCompressedTensors, Mxfp4WithFp8InputsRunsMxfp4InputsOnBlackwell) {
  FakeCheckpoint c("ct_mxfp4_fp8");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight_packed", DType::kU8, {l.out, l.in / 2});
    c.Add(p + ".weight_scale", DType::kU8, {l.out, l.in / 32});
  });
  c.WriteTensors();
  c.WriteConfig(CtConfig("mxfp4-pack-quantized",
                         {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"group_size", 32}, {"strategy", "group"},
                          {"scale_dtype", "torch.uint8"}},
                         {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"group_size", 128}, {"strategy", "group"},
                          {"dynamic", true}}));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  EXPECT_EQ(info.summary.family, QuantFamily::kMxfp4);
  EXPECT_TRUE(info.summary.fp8_activations);
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("B200").status, PathStatus::kFast);
  EXPECT_NE(k.at("B200").reason.find("quantized to MXFP4"), std::string::npos);
  EXPECT_EQ(k.at("H100-SXM").status, PathStatus::kWeightOnly);
  const std::optional<Trap> t = FindTrap(Traps(info), "mxfp4-fp8-inputs-as-mxfp4");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->gpus, std::vector<std::string>{"B200"});
}

// Block FP8 weights: vLLM's block kernels quantize the inputs per 1 x 128 group whatever the config
// says, so inputs declared per token are a warning on every GPU with a block kernel; FP8_BLOCK's
// grouped inputs are what they run.
TEST(InspectCompressedTensors, BlockFp8WithTokenInputsWarnsThatVllmQuantizesPerGroup) {
  for (const char* strategy : {"token", "group"}) {
    FakeCheckpoint c(std::string("ct_fp8_block_") + strategy);
    c.AddUnquantized(DType::kBF16);
    c.ForEachLinear([&](const std::string& p, const Linear& l) {
      c.Add(p + ".weight", DType::kF8E4M3, {l.out, l.in});
      c.Add(p + ".weight_scale", DType::kF32, {(l.out + 127) / 128, (l.in + 127) / 128});
    });
    c.WriteTensors();
    json input = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", strategy}, {"dynamic", true}};
    if (std::string(strategy) == "group") input["group_size"] = 128;
    c.WriteConfig(CtConfig("float-quantized",
                           {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "block"},
                            {"block_structure", {128, 128}}},
                           input));
    const CheckpointInfo info = InspectCheckpoint(c.dir());
    EXPECT_EQ(info.summary.family, QuantFamily::kFp8);
    EXPECT_TRUE(info.summary.fp8_block);
    EXPECT_EQ(Kernels(info).at("H100-SXM").kernel, "block FP8 W8A8 (DeepGEMM/CUTLASS)");
    const std::optional<Trap> t = FindTrap(Traps(info), "fp8-block-inputs-per-group");
    if (std::string(strategy) == "group") {
      EXPECT_FALSE(t);
      continue;
    }
    ASSERT_TRUE(t);
    EXPECT_EQ(t->gpus, (std::vector<std::string>{"H100-SXM", "L40S", "B200", "MI300X"}));
    EXPECT_NE(t->message.find("fp8_e4m3:g128:scale=f32"), std::string::npos);
  }
}

TEST(InspectCompressedTensors, Int8W8A8HasNoKernelOnBlackwell) {
  FakeCheckpoint c("ct_w8a8");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight", DType::kI8, {l.out, l.in});
    c.Add(p + ".weight_scale", DType::kBF16, {l.out, 1});
  });
  c.WriteTensors();
  c.WriteConfig(
      CtConfig("int-quantized", {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}},
               {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}}));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.summary.family, QuantFamily::kInt8W8A8);
  EXPECT_EQ(Layer(info, "model.layers.0.mlp.gate_proj").scheme, "int8 channel sym + int8 activations");
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").kernel, "CUTLASS INT8 W8A8");
  EXPECT_EQ(k.at("B200").status, PathStatus::kUnsupported);
  const std::optional<Trap> t = FindTrap(Traps(info), "int8-w8a8-unsupported");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->gpus, std::vector<std::string>{"B200"});
}

TEST(InspectCompressedTensors, Fp8WithCalibratedKvScales) {
  FakeCheckpoint c("ct_fp8");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight", DType::kF8E4M3, {l.out, l.in});
    c.Add(p + ".weight_scale", DType::kBF16, {l.out, 1});
  });
  for (uint64_t layer = 0; layer < kLayers; ++layer)
    for (const char* s : {"k_scale", "v_scale"})
      c.Add("model.layers." + std::to_string(layer) + ".self_attn." + s, DType::kF32, {1});
  c.WriteTensors();
  c.WriteConfig(CtConfig("float-quantized", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}},
                         {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}},
                         {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.kv.tensors, 4u);
  EXPECT_EQ(info.kv.layers, 2u);
  EXPECT_EQ(info.kv.spelling, "self_attn.k_scale");
  EXPECT_EQ(info.kv.declared, "fp8");
  EXPECT_EQ(Layer(info, "model.layers.0.self_attn.q_proj").scheme, "fp8_e4m3 channel + fp8 activations");
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").kernel, "CUTLASS FP8 W8A8");
  EXPECT_EQ(k.at("L40S").status, PathStatus::kFast);
  EXPECT_EQ(k.at("A100-80G").kernel, "FP8 Marlin (W8A16)");
  EXPECT_EQ(k.at("MI300X").status, PathStatus::kFast);
  const std::vector<Trap> traps = Traps(info, "--kv-cache-dtype fp8");
  EXPECT_FALSE(FindTrap(traps, "fp8-kv-without-scales"));
  const std::optional<Trap> w = FindTrap(traps, "fp8-weight-only");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->gpus, (std::vector<std::string>{"A100-80G", "RTX-3090"}));
}

TEST(InspectCompressedTensors, Nvfp4IsNativeOnlyOnBlackwell) {
  FakeCheckpoint c("ct_nvfp4");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight_packed", DType::kU8, {l.out, l.in / 2});
    c.Add(p + ".weight_scale", DType::kF8E4M3, {l.out, l.in / 16});
    c.Add(p + ".weight_global_scale", DType::kF32, {1});
    c.Add(p + ".input_global_scale", DType::kF32, {1});
  });
  c.WriteTensors();
  const json fp4 = {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}};
  c.WriteConfig(CtConfig("nvfp4-pack-quantized", fp4, fp4));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  const LayerInfo& l = Layer(info, "model.layers.0.mlp.down_proj");
  EXPECT_EQ(l.cols, 512u);
  EXPECT_EQ(l.group, 16);
  EXPECT_DOUBLE_EQ(l.bits_per_weight(), 4 + 8.0 / 16 + 64.0 / (256 * 512));
  EXPECT_EQ(info.summary.family, QuantFamily::kNvfp4);
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("B200").status, PathStatus::kFast);
  EXPECT_EQ(k.at("H100-SXM").kernel, "FP4 Marlin (W4A16)");
  EXPECT_EQ(k.at("H100-SXM").status, PathStatus::kWeightOnly);
  EXPECT_EQ(k.at("MI300X").status, PathStatus::kUnsupported);
}

TEST(InspectCompressedTensors, Mxfp6PacksFourCodesInThreeBytesAndIsOutsideTheRules) {
  FakeCheckpoint c("ct_mxfp6");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight_packed", DType::kU8, {l.out, l.in * 3 / 4});
    c.Add(p + ".weight_scale", DType::kU8, {l.out, l.in / 32});
  });
  c.WriteTensors();
  const json fp6 = {{"num_bits", 6}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}};
  c.WriteConfig(CtConfig("mxfp6-pack-quantized", fp6, nullptr));
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  const LayerInfo& l = Layer(info, "model.layers.0.mlp.down_proj");
  EXPECT_EQ(l.cols, 512u);
  EXPECT_EQ(l.scheme, "fp6_e2m3 g32");
  EXPECT_DOUBLE_EQ(l.bits_per_weight(), 6 + 8.0 / 32);
  EXPECT_EQ(info.summary.family, QuantFamily::kMxFloat);
  EXPECT_EQ(Kernels(info).at("B200").status, PathStatus::kNotCovered);
}

TEST(InspectFp8, BlockScaledAndAnFp8KvCacheWithoutScales) {
  FakeCheckpoint c("fp8_block");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight", DType::kF8E4M3, {l.out, l.in});
    c.Add(p + ".weight_scale_inv", DType::kF32, {l.out / 128, l.in / 128});
  });
  c.WriteTensors();
  c.WriteConfig({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}});
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.format_name, "FP8 (block 128x128)");
  const LayerInfo& l = Layer(info, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(l.scheme, "fp8_e4m3 block128x128");
  EXPECT_DOUBLE_EQ(l.bits_per_weight(), 8 + 32.0 / (128 * 128));
  EXPECT_TRUE(info.summary.fp8_block);
  const auto k = Kernels(info);
  EXPECT_EQ(k.at("H100-SXM").kernel, "block FP8 W8A8 (DeepGEMM/CUTLASS)");
  EXPECT_EQ(k.at("L40S").kernel, "block FP8 W8A8 (Triton)");
  EXPECT_EQ(k.at("RTX-3090").status, PathStatus::kWeightOnly);
  EXPECT_FALSE(FindTrap(Traps(info), "fp8-kv-without-scales"));
  const std::optional<Trap> t = FindTrap(Traps(info, "--kv-cache-dtype fp8_e4m3"), "fp8-kv-without-scales");
  ASSERT_TRUE(t);
  EXPECT_NE(t->message.find("scale 1.0"), std::string::npos);
  EXPECT_EQ(Kernels(info, "--quantization gptq").at("H100-SXM").status, PathStatus::kError);
}

TEST(InspectModelOpt, Nvfp4FromHfQuantConfigWithKvScales) {
  FakeCheckpoint c("modelopt_nvfp4");
  c.AddUnquantized(DType::kBF16);
  c.ForEachLinear([&](const std::string& p, const Linear& l) {
    c.Add(p + ".weight", DType::kU8, {l.out, l.in / 2});
    c.Add(p + ".weight_scale", DType::kF8E4M3, {l.out, l.in / 16});
    c.Add(p + ".weight_scale_2", DType::kF32, {});
    c.Add(p + ".input_scale", DType::kF32, {});
    if (p.ends_with("k_proj")) c.Add(p + ".k_scale", DType::kF32, {});
    if (p.ends_with("v_proj")) c.Add(p + ".v_scale", DType::kF32, {});
  });
  c.WriteTensors();
  c.WriteConfig(nullptr);
  c.WriteJson("hf_quant_config.json", {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
                                       {"quantization",
                                        {{"quant_algo", "NVFP4"},
                                         {"kv_cache_quant_algo", "FP8"},
                                         {"group_size", 16},
                                         {"exclude_modules", {"lm_head"}}}}});
  const CheckpointInfo info = InspectCheckpoint(c.dir());
  ExpectTotals(info, c);
  EXPECT_EQ(info.format_name, "ModelOpt NVFP4");
  EXPECT_EQ(info.summary.method, "modelopt_fp4");
  EXPECT_EQ(info.kv.layers, 2u);
  EXPECT_EQ(info.kv.spelling, "self_attn.k_proj.k_scale");
  EXPECT_EQ(Layer(info, "model.layers.1.mlp.gate_proj").scheme, "nvfp4 (fp4_e2m1 g16, e4m3 scales)");
  EXPECT_EQ(Kernels(info).at("B200").kernel, "NVFP4 W4A4 (CUTLASS/FlashInfer FP4 GEMM)");
  EXPECT_EQ(Kernels(info, "--quantization modelopt").at("B200").status, PathStatus::kFast);
  EXPECT_EQ(Kernels(info, "--quantization fp8").at("B200").status, PathStatus::kError);
  EXPECT_FALSE(FindTrap(Traps(info), "fp8-kv-without-scales"));
}

TEST(InspectGguf, TinyLlamaBlockTypes) {
  FakeCheckpoint c("gguf");
  const auto model = gguf_testing::MakeTinyLlama();
  model.writer.Write(c.dir() / "tiny.gguf");
  for (const std::filesystem::path& p : {c.dir() / "tiny.gguf", c.dir()}) {  // the file, or its folder
    const CheckpointInfo info = InspectCheckpoint(p);
    EXPECT_EQ(info.format_name, "GGUF v3");
    EXPECT_EQ(info.n_layers, 2u);
    const LayerInfo& down = Layer(info, "blk.0.ffn_down");
    EXPECT_EQ(down.type, "Q8_0");
    EXPECT_EQ(down.bits, 8);
    EXPECT_EQ(down.group, 32);
    EXPECT_DOUBLE_EQ(down.bits_per_weight(), 8.5);
    EXPECT_EQ(Layer(info, "blk.1.ffn_up").scheme, "BF16");
    EXPECT_EQ(info.linear_params, down.params);
    EXPECT_EQ(Kernels(info).at("A100-80G").kernel, "GGUF dequant + MMVQ/MMQ");
  }
}

TEST(InspectErrors, NameThePath) {
  EXPECT_NE(ErrorOf([] { InspectCheckpoint("/nonexistent/ckpt"); }).find("/nonexistent/ckpt"), std::string::npos);
  FakeCheckpoint empty("empty");
  EXPECT_NE(ErrorOf([&] { InspectCheckpoint(empty.dir()); }).find("no *.safetensors or *.gguf"), std::string::npos);
  FakeCheckpoint odd("unknown_method");
  odd.AddUnquantized();
  odd.WriteTensors();
  odd.WriteConfig({{"quant_method", "hqq"}});
  const std::string e = ErrorOf([&] { InspectCheckpoint(odd.dir()); });
  EXPECT_NE(e.find("config.json: quantization_config"), std::string::npos) << e;
  EXPECT_NE(e.find("'hqq'"), std::string::npos) << e;
  odd.WriteConfig({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}});
  EXPECT_NE(ErrorOf([&] { InspectCheckpoint(odd.dir()); }).find("no quantized tensors"), std::string::npos);
}

TEST(EngineFlags, ParsesTheFlagsThatMatter) {
  const EngineFlags f = ParseEngineFlags(
      {"--quantization=GPTQ -tp 4", "--max-model-len 4096 --enforce-eager", "--kv-cache-dtype fp8_e5m2"});
  EXPECT_EQ(f.quantization, "gptq");
  EXPECT_EQ(f.tensor_parallel, 4);
  EXPECT_EQ(f.kv_cache_dtype, "fp8_e5m2");
  EXPECT_EQ(f.ignored, (std::vector<std::string>{"--max-model-len 4096", "--enforce-eager"}));
  EXPECT_TRUE(ParseEngineFlags({"--kv-cache-dtype auto"}).kv_cache_dtype.empty());
  EXPECT_NE(ErrorOf([] { ParseEngineFlags({"--quantization"}); }).find("needs a value"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ParseEngineFlags({"-tp two"}); }).find("positive integer"), std::string::npos);
}

#ifdef LOWBIT_BINARY
std::pair<int, std::string> RunLowbit(const std::string& args) {
  const testing_util::RunResult r = testing_util::RunLowbit(args);
  return {r.status, r.out};
}

TEST(InspectCli, JsonTablesAndTraps) {
  auto [status, out] = RunLowbit("inspect models/kjv-llama-7m --json --gpu H100-SXM,RTX-3090");
  ASSERT_EQ(status, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["format"], "dense F32");
  EXPECT_EQ(j["bits_per_weight"], 32.0);
  ASSERT_EQ(j["kernels"].size(), 2u);
  EXPECT_EQ(j["kernels"][1]["gpu"], "RTX-3090");
  EXPECT_EQ(j["layers"].size(), 44u);
  const std::string gptq = Gptq("gptq_cli").path;
  std::tie(status, out) = RunLowbit("inspect " + gptq + " --gpu A100-80G --engine-flag \"--quantization gptq\"");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("model.layers.{0-1}.mlp.down_proj"), std::string::npos) << out;
  EXPECT_NE(out.find("GPTQ exllama (original)"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: --quantization gptq forces"), std::string::npos) << out;
  std::tie(status, out) = RunLowbit("inspect /nonexistent/ckpt");
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("lowbit: error: /nonexistent/ckpt"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace lowbit
