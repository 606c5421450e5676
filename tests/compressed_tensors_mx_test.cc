// compressed-tensors' NVFP4 and MX formats (io/compressed_tensors_mx.h): packings checked byte by byte
// against values worked out by hand from docs/formats.md 1.8 and 5.3, the NVFP4 global scale whose
// reciprocal is exactly lowbit's tensor scale, bad files refused with the tensor and the reason, and
// the shards of a fused matrix (q/k/v, gate/up) sharing one tensor scale from quantizer to export.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "io/compressed_tensors.h"
#include "io/compressed_tensors_mx.h"
#include "io/engine_export.h"
#include "io/hf_model.h"
#include "io/model_loader.h"
#include "io/safetensors.h"
#include "model/ptq.h"
#include "model/quantize_weights.h"
#include "quant/scale_rules.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

const fs::path kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

class Scratch : public testing_util::ScratchDir {
 public:
  Scratch() : ScratchDir("lowbit-mx-test") {}
};

SafetensorsModel Written(const Scratch& dir, const std::string& name, const TensorList& list) {
  TensorList copy = list;
  WriteSafetensors(dir / name, std::move(copy).Sorted());
  return SafetensorsModel::Open(dir / name);
}

std::vector<uint8_t> BytesOf(const SafetensorsModel& st, const std::string& name) {
  const std::span<const std::byte> d = st.Get(name).data;
  return {reinterpret_cast<const uint8_t*>(d.data()), reinterpret_cast<const uint8_t*>(d.data()) + d.size()};
}

void ExpectSame(const QuantizedTensor& a, const QuantizedTensor& b) {
  EXPECT_EQ(a.scheme().ToString(), b.scheme().ToString());
  ASSERT_EQ(a.codes().size(), b.codes().size());
  EXPECT_EQ(0, std::memcmp(a.codes().data(), b.codes().data(), a.codes().size()));
  ASSERT_EQ(a.scale_bytes().size(), b.scale_bytes().size());
  EXPECT_EQ(0, std::memcmp(a.scale_bytes().data(), b.scale_bytes().data(), a.scale_bytes().size()));
  EXPECT_EQ(a.tensor_scale(), b.tensor_scale());
}

using testing_util::ExpectError;

// One row of 32 codes code(i) with the given scales.
QuantizedTensor Row(const std::string& scheme, uint32_t (*code)(uint64_t), std::vector<float> scales) {
  QuantizedTensor q(ParseScheme(scheme), 1, 32);
  for (uint64_t i = 0; i < 32; ++i) WriteCode(q.codes().data(), i, q.scheme().element->bits, code(i));
  for (size_t c = 0; c < scales.size(); ++c) q.SetScale(c, scales[c]);
  return q;
}

TEST(MicroscaledFormats, Nvfp4PacksTwoE2M1CodesPerByteByHand) {
  Scratch dir;
  // Codes i % 16 (E2M1 bit patterns: 0x1 = 0.5, 0x9 = -0.5): byte k holds code 2k low, 2k + 1 high.
  QuantizedTensor q = Row("nvfp4", [](uint64_t i) { return static_cast<uint32_t>(i % 16); }, {448.0f, 0.5f});
  q.set_tensor_scale(0.25f);
  ASSERT_EQ(MicroscaledFormatOf(q.scheme()), "nvfp4-pack-quantized");
  EXPECT_EQ(CompressedTensorsFormatOf(q.scheme(), std::nullopt, "p"), "nvfp4-pack-quantized");
  TensorList list;
  AddCompressedTensorsLinear(list, "p", q, std::nullopt);
  const SafetensorsModel st = Written(dir, "nvfp4.safetensors", list);
  EXPECT_EQ(st.Get("p.weight_packed").dtype, DType::kU8);
  EXPECT_EQ(st.Get("p.weight_packed").shape, (std::vector<uint64_t>{1, 16}));
  const std::vector<uint8_t> packed = BytesOf(st, "p.weight_packed");
  for (int k = 0; k < 16; ++k) EXPECT_EQ(packed[k], ((2 * k) % 16) | (((2 * k + 1) % 16) << 4)) << k;
  // E4M3: 448 = 0 1111 110, 0.5 = 0 0110 000.
  EXPECT_EQ(st.Get("p.weight_scale").dtype, DType::kF8E4M3);
  EXPECT_EQ(BytesOf(st, "p.weight_scale"), (std::vector<uint8_t>{0x7E, 0x30}));
  // The global scale divides: 1 / 0.25.
  EXPECT_EQ(ToFloat32(st.Get("p.weight_global_scale"))[0], 4.0f);
  const QuantizedTensor back = ReadMicroscaledLinear(st, "p", 1, 32, q.scheme());
  ExpectSame(q, back);
  // W = e2m1 * scale * t: code 3 (1.5) in block 0, code 9 (-0.5) in block 1.
  std::vector<float> w(32);
  back.DequantizeRow(0, w.data());
  EXPECT_EQ(w[3], 1.5f * 448.0f * 0.25f);
  EXPECT_EQ(w[25], -0.5f * 0.5f * 0.25f);
}

TEST(MicroscaledFormats, MxFormatsStoreLowbitRowsAndE8M0BytesByHand) {
  Scratch dir;
  // MXFP6 E2M3: four 6-bit codes in three bytes, little-endian: codes 0, 1, 2, 3 make the word
  // 1 << 6 | 2 << 12 | 3 << 18 = 0x0C2040.
  const QuantizedTensor fp6 = Row("mxfp6_e2m3", [](uint64_t i) { return static_cast<uint32_t>(i); }, {1.0f});
  ASSERT_EQ(MicroscaledFormatOf(fp6.scheme()), "mxfp6-pack-quantized");
  TensorList l6;
  AddMicroscaledLinear(l6, "p", fp6);
  const SafetensorsModel s6 = Written(dir, "mxfp6.safetensors", l6);
  EXPECT_EQ(s6.Get("p.weight_packed").shape, (std::vector<uint64_t>{1, 24}));
  const std::vector<uint8_t> p6 = BytesOf(s6, "p.weight_packed");
  EXPECT_EQ((std::vector<uint8_t>(p6.begin(), p6.begin() + 3)), (std::vector<uint8_t>{0x40, 0x20, 0x0C}));
  EXPECT_EQ(BytesOf(s6, "p.weight_scale"), (std::vector<uint8_t>{127}));  // E8M0: 2^(127 - 127)
  EXPECT_EQ(s6.Find("p.weight_global_scale"), nullptr);
  ExpectSame(fp6, ReadMicroscaledLinear(s6, "p", 1, 32, fp6.scheme()));

  // MXFP8 keeps compressed-tensors' unpacked name and dtype; MXFP4 packs like NVFP4.
  const QuantizedTensor fp8 = Row("mxfp8_e4m3", [](uint64_t i) { return static_cast<uint32_t>(0x30 + i); }, {0.25f});
  ASSERT_EQ(MicroscaledFormatOf(fp8.scheme()), "mxfp8-quantized");
  TensorList l8;
  AddMicroscaledLinear(l8, "p", fp8);
  const SafetensorsModel s8 = Written(dir, "mxfp8.safetensors", l8);
  EXPECT_EQ(s8.Get("p.weight").dtype, DType::kF8E4M3);
  EXPECT_EQ(BytesOf(s8, "p.weight")[5], 0x35);
  EXPECT_EQ(BytesOf(s8, "p.weight_scale"), (std::vector<uint8_t>{125}));
  ExpectSame(fp8, ReadMicroscaledLinear(s8, "p", 1, 32, fp8.scheme()));
  EXPECT_EQ(MicroscaledFormatOf(ParseScheme("mxfp4")), "mxfp4-pack-quantized");

  // fp4 with float scales, FP6 E3M2 and NVFP4 activations have no compressed-tensors form.
  for (const char* s : {"fp4_e2m1:g32:scale=f16", "mxfp6_e3m2", "fp4_e2m1:g32:scale=ue4m3:tscale"}) {
    EXPECT_EQ(MicroscaledFormatOf(ParseScheme(s)), std::nullopt) << s;
    ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme(s), std::nullopt, "p"); }, {"p:", "element format"});
  }
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("nvfp4"), InputQuant{ParseScheme("fp8_e4m3:token"), 0}, "p"); },
              {"weight-only"});
}

TEST(MicroscaledFormats, TheGlobalScalesReciprocalIsTheTensorScale) {
  // The stored global scale is 1 / t, and readers (lowbit, vLLM) multiply by its reciprocal: every
  // tensor scale the quantizer chooses comes back exactly. amax / 2688 itself would not, often.
  const QuantScheme nvfp4 = ParseScheme("nvfp4");
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log_amax(-20.0f, 20.0f);
  int plain_quotient_misses = 0;
  for (int i = 0; i < 200000; ++i) {
    const float amax = std::exp2(log_amax(rng));
    const float t = ChooseTensorScale(nvfp4, amax);
    ASSERT_EQ(1.0f / (1.0f / t), t) << "amax " << amax;
    EXPECT_EQ(t, 1.0f / (2688.0f / amax));
    const float plain = amax / 2688.0f;
    plain_quotient_misses += 1.0f / (1.0f / plain) != plain;
  }
  EXPECT_GT(plain_quotient_misses, 200000 / 20);
}

TEST(MicroscaledFormats, BadTensorsAndConfigsAreNamedErrors) {
  Scratch dir;
  QuantizedTensor q = Row("nvfp4", [](uint64_t i) { return static_cast<uint32_t>(i % 16); }, {1.0f, 2.0f});
  q.set_tensor_scale(0.5f);
  const auto with = [&](const std::string& file, auto edit) {
    TensorList list;
    AddMicroscaledLinear(list, "p", q);
    std::vector<TensorToWrite> tensors = std::move(list).Sorted();
    std::vector<std::vector<std::byte>> keep;
    for (TensorToWrite& t : tensors) {
      keep.emplace_back(t.data.begin(), t.data.end());
      edit(t.name, keep.back());
      t.data = keep.back();
    }
    WriteSafetensors(dir / file, tensors);
    return SafetensorsModel::Open(dir / file);
  };
  const auto set_global = [](float v) {
    return [v](const std::string& name, std::vector<std::byte>& b) {
      if (name == "p.weight_global_scale") std::memcpy(b.data(), &v, 4);
    };
  };
  const auto set_scale_byte = [](uint8_t v) {
    return [v](const std::string& name, std::vector<std::byte>& b) {
      if (name == "p.weight_scale") b[1] = std::byte{v};
    };
  };
  ExpectError([&] { (void)ReadMicroscaledLinear(with("nan.safetensors", set_scale_byte(0x7F)), "p", 1, 32, q.scheme()); },
              {"nan.safetensors", "p.weight_scale", "[0, 1]", "NaN"});
  ExpectError([&] { (void)ReadMicroscaledLinear(with("neg.safetensors", set_scale_byte(0x90)), "p", 1, 32, q.scheme()); },
              {"p.weight_scale", "negative"});
  for (const float g : {0.0f, -2.0f, INFINITY, 1e-45f})
    ExpectError([&] { (void)ReadMicroscaledLinear(with("g.safetensors", set_global(g)), "p", 1, 32, q.scheme()); },
                {"p.weight_global_scale"});
  ExpectError([&] { (void)ReadMicroscaledLinear(with("ok.safetensors", set_global(2.0f)), "p", 2, 32, q.scheme()); },
              {"p.weight_packed", "[2, 16]"});
  // The global scale is one F32 value, shaped [1] or [] (a scalar).
  for (const std::vector<uint64_t>& shape : {std::vector<uint64_t>{2}, std::vector<uint64_t>{}}) {
    TensorList list;
    AddMicroscaledLinear(list, "p", q);
    std::vector<TensorToWrite> tensors = std::move(list).Sorted();
    const std::vector<float> globals = {2.0f, 2.0f};
    for (TensorToWrite& t : tensors)
      if (t.name == "p.weight_global_scale") {
        t.shape = shape;
        t.data = std::as_bytes(std::span(globals)).first(shape.empty() ? 4 : 8);
      }
    WriteSafetensors(dir / "shape.safetensors", tensors);
    const SafetensorsModel st = SafetensorsModel::Open(dir / "shape.safetensors");
    if (shape.empty()) EXPECT_EQ(ReadMicroscaledLinear(st, "p", 1, 32, q.scheme()).tensor_scale(), 0.5f);
    else ExpectError([&] { (void)ReadMicroscaledLinear(st, "p", 1, 32, q.scheme()); }, {"p.weight_global_scale", "one F32 value"});
  }
  const QuantizedTensor mx = Row("mxfp4", [](uint64_t i) { return static_cast<uint32_t>(i % 16); }, {1.0f});
  TensorList mx_list;
  AddMicroscaledLinear(mx_list, "p", mx);
  std::vector<TensorToWrite> mx_tensors = std::move(mx_list).Sorted();
  std::vector<std::byte> nan_scale{std::byte{0xFF}};
  for (TensorToWrite& t : mx_tensors)
    if (t.name == "p.weight_scale") t.data = nan_scale;
  WriteSafetensors(dir / "mx.safetensors", mx_tensors);
  ExpectError([&] { (void)ReadMicroscaledLinear(SafetensorsModel::Open(dir / "mx.safetensors"), "p", 1, 32, mx.scheme()); },
              {"p.weight_scale", "0xFF", "NaN"});

  // The config group's QuantizationArgs: each field that does not fit the format is named.
  const auto args = [](nlohmann::json edit) {
    nlohmann::json w = {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"group_size", 16},
                        {"strategy", "tensor_group"}, {"scale_dtype", "torch.float8_e4m3fn"}};
    w.update(edit);
    return w;
  };
  EXPECT_EQ(MicroscaledScheme(JsonView(args(nlohmann::json::object()), "config.json"), "nvfp4-pack-quantized").ToString(), "fp4_e2m1:g16:scale=ue4m3:tscale");
  for (const auto& [edit, key] : {std::pair{nlohmann::json{{"num_bits", 8}}, "num_bits"},
                                  {nlohmann::json{{"group_size", 32}}, "group_size"},
                                  {nlohmann::json{{"symmetric", false}}, "symmetric"},
                                  {nlohmann::json{{"type", "int"}}, "type"},
                                  {nlohmann::json{{"strategy", "group"}}, "strategy"},
                                  {nlohmann::json{{"scale_dtype", "torch.uint8"}}, "scale_dtype"}}) {
    const nlohmann::json w = args(edit);
    ExpectError([&] { (void)MicroscaledScheme(JsonView(w, "config.json"), "nvfp4-pack-quantized"); }, {"config.json", key});
  }
}

TEST(MicroscaledFormats, FusedShardsShareOneTensorScaleFromQuantizerToExport) {
  EXPECT_EQ(FusedMatrixOf("model.layers.3.self_attn.k_proj"), "model.layers.3.self_attn.qkv_proj");
  EXPECT_EQ(FusedMatrixOf("mlp.experts.7.up_proj"), "mlp.experts.7.gate_up_proj");
  EXPECT_EQ(FusedMatrixOf("block_sparse_moe.experts.2.w3"), "block_sparse_moe.experts.2.w13");
  EXPECT_EQ(FusedMatrixOf("block_sparse_moe.experts.2.w2"), "block_sparse_moe.experts.2.w2");
  EXPECT_EQ(FusedMatrixOf("mlp.down_proj"), "mlp.down_proj");
  EXPECT_EQ(FusedMatrixOf("self_attn.o_proj"), "self_attn.o_proj");
  EXPECT_EQ(FusedMatrixOf("mlp.not_up_proj"), "mlp.not_up_proj");

  Scratch dir;
  const QuantScheme nvfp4 = ParseScheme("nvfp4");
  const Model source = LoadHfModel(kModelDir);
  const auto amax = [](const Linear& l) {
    float a = 0;
    for (const float v : std::get<DenseMatrix>(l.weight).values) a = std::max(a, std::fabs(v));
    return a;
  };
  const auto scale_of = [](const Linear& l) { return std::get<QuantizedTensor>(l.weight).tensor_scale(); };
  // Both quantizing paths: QuantizeLinears (export from a float folder) and the PTQ pipeline.
  Model direct = source, pipeline = source;
  QuantizeLinears(direct.weights, nvfp4);
  QuantizeRequest req;
  req.scheme = nvfp4;
  QuantizeModel(pipeline, req);
  int shards_that_differ = 0;
  for (const Model* m : {&direct, &pipeline})
    for (size_t i = 0; i < source.weights.layers.size(); ++i) {
      const LayerWeights &s = source.weights.layers[i], &l = m->weights.layers[i];
      const float qkv = std::max({amax(s.wq), amax(s.wk), amax(s.wv)}), gate_up = std::max(amax(s.w_gate), amax(s.w_up));
      shards_that_differ += amax(s.wk) != qkv;
      for (const Linear* x : {&l.wq, &l.wk, &l.wv}) EXPECT_EQ(scale_of(*x), ChooseTensorScale(nvfp4, qkv)) << i;
      for (const Linear* x : {&l.w_gate, &l.w_up}) EXPECT_EQ(scale_of(*x), ChooseTensorScale(nvfp4, gate_up)) << i;
      EXPECT_EQ(scale_of(l.wo), ChooseTensorScale(nvfp4, amax(s.wo))) << i;
      EXPECT_EQ(scale_of(l.w_down), ChooseTensorScale(nvfp4, amax(s.w_down))) << i;
    }
  EXPECT_GT(shards_that_differ, 0);  // the sharing is visible on this model

  // The export reads back to the same tensors; shards with different tensor scales are refused.
  StreamedModel s{direct, nullptr};
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  EXPECT_EQ(ExportEngineCheckpoint(s, kModelDir, dir / "nvfp4", nullptr, o).format, "nvfp4-pack-quantized");
  const Model back = LoadHfModel(dir / "nvfp4");
  for (size_t i = 0; i < back.weights.layers.size(); ++i)
    for (auto m : {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::w_gate,
                   &LayerWeights::w_up, &LayerWeights::w_down})
      ExpectSame(std::get<QuantizedTensor>((direct.weights.layers[i].*m).weight),
                 std::get<QuantizedTensor>((back.weights.layers[i].*m).weight));
  Model apart = direct;
  std::get<QuantizedTensor>(apart.weights.layers[2].w_up.weight).set_tensor_scale(0.001f);
  StreamedModel a{std::move(apart), nullptr};
  ExpectError([&] { (void)ExportEngineCheckpoint(a, kModelDir, dir / "apart", nullptr, o); },
              {"model.layers.2.mlp.gate_proj", "model.layers.2.mlp.up_proj", "gate_up_proj"});
  EXPECT_FALSE(fs::exists(dir / "apart"));
}

}  // namespace
}  // namespace lowbit
