// GPT-OSS (GptOssForCausalLM): what sets it apart from the other mixtures of experts, each shown to move the
// fixture's logits (so that architecture_fixture_test's match against transformers, 4e-7 of the logit scale,
// covers every one of them); its experts as released, MXFP4 blocks, read as stored; GPTQ and rotation on it,
// saved and read back; and what cannot hold it refusing it. (transformers on the MXFP4 form:
// tests/interop/hf_architectures.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/engine_export.h"
#include "io/gguf.h"
#include "io/gguf_export.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "model/ptq.h"
#include "pipeline/convert_job.h"
#include "model/rotation.h"
#include "model_test_util.h"
#include "plan/hardware.h"
#include "plan/inspect.h"
#include "plan/kernel_rules.h"
#include "quant/rtn.h"
#include "quant/scheme.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::ExpectError;
const fs::path kFixture = LOWBIT_SOURCE_DIR "/tests/data/architectures/gpt_oss";

// lowbit's logits are within 4e-7 of transformers' (relative), a logit MSE near 1e-12: every variant moves
// them by far more.
TEST(GptOss, EachOfItsFeaturesMovesTheLogits) {
  const Model fp = LoadModel(kFixture.string());
  const auto windows = testing_util::RandomWindows(2, 16, fp.config.vocab_size);
  const struct {
    const char* what;
    std::function<void(Model&)> change;
  } variants[] = {
      {"attention sinks", [](Model& m) {
         m.config.attention_sinks = false;
         for (LayerWeights& l : m.weights.layers) l.attn_sinks.clear();
       }},
      {"the clamp", [](Model& m) { m.config.swiglu_limit = 1e9f; }},
      {"the clamped SwiGLU's alpha and + 1", [](Model& m) { m.config.activation = FfnActivation::kSilu; }},
      {"the router's logit bias", [](Model& m) {
         for (LayerWeights& l : m.weights.layers) std::fill(l.router_logit_bias.begin(), l.router_logit_bias.end(), 0.0f);
       }},
      {"o_proj's bias", [](Model& m) {
         m.config.o_bias = false;
         for (LayerWeights& l : m.weights.layers) l.wo.bias.clear();
       }},
      {"the experts' biases", [](Model& m) {
         for (LayerWeights& l : m.weights.layers)
           for (Expert& e : l.experts) std::fill(e.down.bias.begin(), e.down.bias.end(), 0.0f);
       }},
      {"YaRN's untruncated ramp", [](Model& m) { m.config.rope_scaling.truncate = true; }},
      {"the sliding window", [](Model& m) { m.config.sliding_window = 0; m.config.sliding_layers.clear(); }},
  };
  for (const auto& v : variants) {
    Model changed = fp;
    v.change(changed);
    const double moved = testing_util::LogitError(fp, changed, windows);
    std::cout << "without " << v.what << ": logit MSE " << moved << "\n";
    EXPECT_GT(moved, 1e-8) << v.what;
  }
}

// The fixture with its experts as openai/gpt-oss ships them: gate_up_proj_blocks [E, 2 ffn, dim / 32, 16] (gate
// row j at 2j, up row j at 2j + 1) and down_proj_blocks [E, dim, ffn / 32, 16], E8M0 scales beside, under
// quantization_config.quant_method "mxfp4". Each expert's rows come back as stored (codes and scale bytes), the
// model computes exactly what the same MXFP4 experts compute in memory, and a NaN scale byte is an error.
TEST(GptOss, Mxfp4ExpertsAreReadAsStored) {
  testing_util::ScratchDir dir("lowbit-gpt-oss-mxfp4");
  Model expected = LoadModel(kFixture.string());
  const ModelConfig& c = expected.config;
  const uint64_t n = c.n_experts, dim = c.dim, ffn = c.expert_ffn_dim;
  const QuantScheme mxfp4 = ParseScheme("mxfp4");
  std::vector<std::vector<uint8_t>> buffers;  // the new tensors' bytes, alive until written
  std::vector<TensorToWrite> tensors;
  const SafetensorsFile fixture = SafetensorsFile::Open(kFixture / "model.safetensors");
  for (const TensorView& t : fixture.tensors())
    if (!t.name.ends_with("mlp.experts.gate_up_proj") && !t.name.ends_with("mlp.experts.down_proj"))
      tensors.push_back({t.name, t.dtype, t.shape, t.data});
  const auto stack = [&](const std::string& name, uint64_t rows, uint64_t cols,
                         const std::function<const QuantizedTensor&(uint64_t e, uint64_t r, uint64_t* row)>& source) {
    std::vector<uint8_t> codes(n * rows * cols / 2), scales(n * rows * cols / 32);
    for (uint64_t e = 0; e < n; ++e)
      for (uint64_t r = 0; r < rows; ++r) {
        uint64_t row = 0;
        const QuantizedTensor& q = source(e, r, &row);
        std::memcpy(&codes[(e * rows + r) * cols / 2], &q.codes()[row * cols / 2], cols / 2);
        std::memcpy(&scales[(e * rows + r) * cols / 32], &q.scale_bytes()[row * cols / 32], cols / 32);
      }
    buffers.push_back(std::move(codes));
    tensors.push_back({name + "_blocks", DType::kU8, {n, rows, cols / 32, 16}, std::as_bytes(std::span(buffers.back()))});
    buffers.push_back(std::move(scales));
    tensors.push_back({name + "_scales", DType::kU8, {n, rows, cols / 32}, std::as_bytes(std::span(buffers.back()))});
  };
  buffers.reserve(4 * c.n_layers);
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (Expert& e : expected.weights.layers[l].experts)
      for (Linear* linear : {&e.gate, &e.up, &e.down}) {
        const DenseMatrix& d = std::get<DenseMatrix>(linear->weight);
        linear->weight = QuantizeRtn(d.values, d.rows(), d.cols(), mxfp4);
      }
    const std::vector<Expert>& experts = expected.weights.layers[l].experts;
    const std::string p = fmt::format("model.layers.{}.mlp.experts.", l);
    stack(p + "gate_up_proj", 2 * ffn, dim, [&](uint64_t e, uint64_t r, uint64_t* row) -> const QuantizedTensor& {
      *row = r / 2;
      return std::get<QuantizedTensor>((r % 2 == 0 ? experts[e].gate : experts[e].up).weight);
    });
    stack(p + "down_proj", dim, ffn, [&](uint64_t e, uint64_t r, uint64_t* row) -> const QuantizedTensor& {
      *row = r;
      return std::get<QuantizedTensor>(experts[e].down.weight);
    });
  }
  const fs::path folder = dir / "gpt-oss-mxfp4";
  fs::create_directories(folder);
  WriteSafetensors(folder / "model.safetensors", tensors);
  nlohmann::json config = ReadJsonFile(kFixture / "config.json");
  config["quantization_config"] = {
      {"quant_method", "mxfp4"},
      {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  WriteFileAtomic(folder / "config.json", config.dump(2));

  // inspect reads the form as vLLM's Mxfp4Config does: an mxfp4 matrix per expert, the rest bf16 and left alone.
  const CheckpointInfo info = InspectCheckpoint(folder);
  EXPECT_EQ(info.summary.method, "mxfp4");
  EXPECT_EQ(info.summary.family, QuantFamily::kMxfp4);
  uint64_t stacks = 0;
  for (const LayerInfo& l : info.layers) {
    if (!l.quantized) continue;
    ++stacks;
    EXPECT_EQ(l.experts, n) << l.name;
    EXPECT_EQ(l.scheme, "mxfp4 (fp4_e2m1 g32, e8m0 scales)") << l.name;
    const bool gate_up = l.name.ends_with("gate_up_proj");
    EXPECT_EQ(l.rows, gate_up ? 2 * ffn : dim) << l.name;
    EXPECT_EQ(l.cols, gate_up ? dim : ffn) << l.name;
    EXPECT_DOUBLE_EQ(l.bits_per_weight(), 4.25) << l.name;  // 4-bit codes + one E8M0 byte per 32
  }
  EXPECT_EQ(stacks, 2 * c.n_layers);
  const EngineFlags no_flags;
  EXPECT_EQ(ChooseKernel(info.summary, FindHardware("H100-SXM"), no_flags).kernel, "Triton MXFP4 MoE (triton_kernels)");
  EXPECT_EQ(ChooseKernel(info.summary, FindHardware("A100-80G"), no_flags).kernel, "MXFP4 Marlin MoE (W4A16)");

  const Model back = LoadModel(folder.string());
  for (size_t l = 0; l < c.n_layers; ++l)
    for (size_t e = 0; e < n; ++e)
      for (const auto member : {&Expert::gate, &Expert::up, &Expert::down}) {
        const auto& got = std::get<QuantizedTensor>((back.weights.layers[l].experts[e].*member).weight);
        const auto& want = std::get<QuantizedTensor>((expected.weights.layers[l].experts[e].*member).weight);
        EXPECT_EQ(got.scheme().ToString(), mxfp4.ToString());
        EXPECT_TRUE(std::ranges::equal(got.codes(), want.codes())) << l << " " << e;
        EXPECT_TRUE(std::ranges::equal(got.scale_bytes(), want.scale_bytes())) << l << " " << e;
      }
  const auto windows = testing_util::RandomWindows(2, 16, c.vocab_size);
  EXPECT_EQ(testing_util::LogitError(expected, back, windows), 0.0);

  for (TensorToWrite& t : tensors)
    if (t.name == "model.layers.1.mlp.experts.down_proj_scales") {
      buffers.back()[5] = 0xFF;  // the last buffer: layer 1's down_proj scales
      t.data = std::as_bytes(std::span(buffers.back()));
    }
  WriteSafetensors(folder / "model.safetensors", tensors);
  ExpectError([&] { (void)LoadModel(folder.string()); },
              {(folder / "model.safetensors").string(), "model.layers.1.mlp.experts.down_proj_scales", "0xFF, NaN"});
}

// GPTQ on the routed tokens and QuaRot on GPT-OSS: the rotated model computes the same logits (o_proj's and the
// experts' down biases rotate with their rows, the router's columns with the residual), GPTQ after it beats RTN
// at 4 bits, and the quantized model, saved as a lowbit folder (one linear per expert), reads back exactly.
TEST(GptOss, RotationGptqAndSavingKeepTheModel) {
  testing_util::ScratchDir dir("lowbit-gpt-oss-quantize");
  const Model fp = LoadModel(kFixture.string());
  const auto windows = testing_util::RandomWindows(2, 16, fp.config.vocab_size);
  Model rotated = fp;
  (void)RotateModel(rotated, 5);
  EXPECT_LT(testing_util::LogitError(fp, rotated, windows), 1e-9);

  testing_util::RtnAndGptq q = testing_util::QuantizeRtnAndGptq(fp, "int4:g8");
  QuantizeRequest& req = q.request;
  EXPECT_EQ(q.gptq_report.uncalibrated_linears, 0u);
  std::cout << "gpt_oss int4:g8 logit MSE rtn " << q.rtn_error << ", gptq " << q.gptq_error << "\n";
  EXPECT_LT(q.gptq_error, q.rtn_error);
  SaveQuantizedModel(q.gptq, dir / "gptq", kFixture, nlohmann::json::object());
  EXPECT_EQ(testing_util::LogitError(q.gptq, LoadModel((dir / "gptq").string()), windows), 0.0);

  // AWQ's down_proj scales fold into up_proj's rows, which the clamp and the + 1 do not carry through.
  Model awq = fp;
  req.method = "awq";
  ExpectError([&] { (void)QuantizeModel(awq, req); }, {"method 'awq'", "GptOssForCausalLM", "clamped SwiGLU"});
  // The engines load GPT-OSS's experts stacked; lowbit writes them one linear each, so no engine folder is written.
  StreamedModel s = OpenModel(kFixture);
  EngineExportOptions o;
  o.scheme = ParseScheme("int4:g32");
  ExpectError([&] { (void)ExportEngineCheckpoint(s, kFixture, dir / "ct", nlohmann::json::object(), o); },
              {"GptOssForCausalLM", "stacked tensors"});
  EXPECT_FALSE(fs::exists(dir / "ct"));
}

// GGUF gpt-oss, as llama.cpp's converter writes it and llama.cpp runs it: the fixture as llama.cpp can run it (its
// constant swiglu_limit 7, YaRN's ramp truncated) goes out as F32 and MXFP4_MOE and comes back to the same
// logits, also as a Hugging Face folder; a model llama.cpp would run otherwise is refused, leaving no file.
TEST(GptOss, GgufGoesOutAndComesBack) {
  testing_util::ScratchDir dir("lowbit-gpt-oss-gguf");
  Model runnable = LoadModel(kFixture.string());
  runnable.config.swiglu_limit = 7.0f;
  runnable.config.rope_scaling.truncate = true;
  const auto windows = testing_util::RandomWindows(2, 16, runnable.config.vocab_size);
  GgufExportOptions o;
  o.type = "F32";
  StreamedModel s{runnable, nullptr};
  EXPECT_EQ(ExportGguf(s, dir / "f32.gguf", o).architecture, "gpt-oss");
  const GgufFile f = GgufFile::Open(dir / "f32.gguf");
  for (const char* name : {"blk.0.attn_sinks.weight", "blk.0.post_attention_norm.weight", "blk.1.ffn_gate_inp.bias",
                           "blk.1.ffn_gate_exps.bias", "blk.1.ffn_down_exps.bias", "blk.0.attn_output.bias"})
    EXPECT_NE(f.FindTensor(name), nullptr) << name;
  EXPECT_EQ(f.FindTensor("blk.0.ffn_norm.weight"), nullptr);
  const Model back = LoadModel(dir / "f32.gguf");
  EXPECT_EQ(back.config.architecture, "gguf:gpt-oss");
  EXPECT_LT(testing_util::LogitError(runnable, back, windows), 1e-10);

  ConvertJob job;
  job.in = (dir / "f32.gguf").string();
  job.out = (dir / "hf").string();
  job.to = "lowbit";
  EXPECT_TRUE(RunConvertJob(job)["exact"].get<bool>());
  const nlohmann::json config = ReadJsonFile(dir / "hf" / "config.json");
  EXPECT_EQ(config["architectures"][0], "GptOssForCausalLM");
  EXPECT_EQ(config["swiglu_limit"], 7.0);
  EXPECT_LT(testing_util::LogitError(runnable, LoadModel((dir / "hf").string()), windows), 1e-10);

  // MXFP4_MOE: the experts in MXFP4, the rest in Q8_0 (llama-quantize's mix for gpt-oss).
  o.type = "MXFP4_MOE";
  StreamedModel s2{runnable, nullptr};
  ExportGguf(s2, dir / "mxfp4.gguf", o);
  const Model mx = LoadModel(dir / "mxfp4.gguf");
  EXPECT_EQ(std::get<QuantizedTensor>(mx.weights.layers[0].experts[0].gate.weight).scheme().ToString(),
            ParseScheme("mxfp4").ToString());
  EXPECT_LT(testing_util::LogitError(runnable, mx, windows), 0.1);

  StreamedModel fixture{LoadModel(kFixture.string()), nullptr};  // swiglu_limit 1
  ExpectError([&] { (void)ExportGguf(fixture, dir / "refused.gguf", o); }, {"swiglu_limit 7", "has 1.702 and 1"});
  EXPECT_FALSE(fs::exists(dir / "refused.gguf"));
}

}  // namespace
}  // namespace lowbit
