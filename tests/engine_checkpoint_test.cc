// GPTQ, AWQ and compressed-tensors: packings checked word by word against values worked out by hand
// from the formats' definitions (docs/formats.md sections 3-5), round trips through safetensors files
// to identical codes, scales and zeros, every "cannot be expressed" error naming its field, and a
// whole-model export that loads back to the same quantized tensors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "formats/codec.h"
#include "io/compressed_tensors.h"
#include "io/engine_export.h"
#include "io/gptq_awq.h"
#include "io/hf_model.h"
#include "test_util.h"
#include "io/model_loader.h"
#include "io/safetensors.h"
#include "model/kv_calibration.h"
#include "model/quantize_weights.h"
#include "quant/scale_rules.h"
#include "pipeline/session.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

const fs::path kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

// A fresh scratch folder per test, removed afterwards.
class Scratch : public testing_util::ScratchDir {
 public:
  Scratch() : ScratchDir("lowbit-engine-test") {}
};

// The bundled model with every linear quantized to `weights` and its inputs to `inputs` (dynamic: no
// static scale), and that model exported as compressed-tensors to `out`.
Model QuantizedWithInputs(const std::string& weights, const QuantScheme& inputs) {
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme(weights));
  for (LayerWeights& l : m.weights.layers)
    for (Linear* linear : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) linear->input_quant = InputQuant{inputs, 0};
  return m;
}
EngineExportResult ExportCompressedTensors(Model m, const fs::path& out) {
  StreamedModel s{std::move(m), nullptr};
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  return ExportEngineCheckpoint(s, kModelDir, out, nullptr, o);
}

// A [rows x cols] tensor of `scheme` whose codes are code(n, i), every scale `scale`, zero points zero(n, c).
template <class Code, class Zero>
QuantizedTensor Make(const std::string& scheme, uint64_t rows, uint64_t cols, Code code, Zero zero, float scale = 1.0f) {
  QuantizedTensor q(ParseScheme(scheme), rows, cols);
  const int bits = q.scheme().element->bits;
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t i = 0; i < cols; ++i) WriteCode(q.codes().data() + n * q.row_bytes(), i, bits, code(n, i));
  for (uint64_t cell = 0; cell < q.grid().cells(); ++cell) {
    q.SetScale(cell, scale);
    if (q.scheme().asymmetric()) q.SetZero(cell, static_cast<float>(zero(cell / q.grid().grid_cols, cell % q.grid().grid_cols)));
  }
  return q;
}

QuantizedTensor Random(const std::string& scheme, uint64_t rows, uint64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedTensor q(ParseScheme(scheme), rows, cols);
  for (uint8_t& b : q.codes()) b = static_cast<uint8_t>(rng());
  // Padding bits of a row beyond `cols` codes stay zero, as every writer leaves them.
  const int bits = q.scheme().element->bits;
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t i = cols * bits; i < q.row_bytes() * 8; ++i) q.codes()[n * q.row_bytes() + i / 8] &= ~(1u << (i % 8));
  std::uniform_real_distribution<float> u(0.001f, 0.1f);
  for (uint64_t cell = 0; cell < q.grid().cells(); ++cell) {
    q.SetScale(cell, u(rng));
    if (q.scheme().asymmetric()) q.SetZero(cell, static_cast<float>(1 + rng() % ((1u << bits) - 1)));
  }
  return q;
}

// The tensors `add` appends for linear "p", written to a file and opened again.
template <class Add>
SafetensorsModel Written(const Scratch& dir, const std::string& name, Add add) {
  TensorList list;
  add(list);
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();
  WriteSafetensors(dir / name, tensors);
  return SafetensorsModel::Open(dir / name);
}

std::vector<uint32_t> WordsOf(const SafetensorsModel& st, const std::string& name) {
  return CopyWords(st.Get(name).data);
}

void ExpectSame(const QuantizedTensor& a, const QuantizedTensor& b) {
  EXPECT_EQ(a.scheme().ToString(), b.scheme().ToString());
  ASSERT_EQ(a.codes().size(), b.codes().size());
  EXPECT_EQ(0, std::memcmp(a.codes().data(), b.codes().data(), a.codes().size()));
  ASSERT_EQ(a.scale_bytes().size(), b.scale_bytes().size());
  EXPECT_EQ(0, std::memcmp(a.scale_bytes().data(), b.scale_bytes().data(), a.scale_bytes().size()));
  for (uint64_t cell = 0; cell < a.grid().cells(); ++cell) EXPECT_EQ(a.Zero(cell), b.Zero(cell)) << cell;
}

using testing_util::ExpectError;

TEST(EngineFormats, GptqPacksAlongTheInputDimensionByHand) {
  Scratch dir;
  // 32 outputs x 16 inputs, int4 group 8, code(n, i) = i: qweight row r holds inputs 8r..8r+7 of every
  // column at nibble i % 8, so row 0 is 0x76543210 and row 1 0xFEDCBA98 in every column.
  const QuantizedTensor q = Make("int4:g8", 32, 16, [](uint64_t, uint64_t i) { return i; }, [](uint64_t, uint64_t) { return 0; });
  const SafetensorsModel st = Written(dir, "gptq.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, {}, false); });
  EXPECT_EQ(st.Get("p.qweight").shape, (std::vector<uint64_t>{2, 32}));
  const std::vector<uint32_t> qweight = WordsOf(st, "p.qweight");
  for (uint64_t n = 0; n < 32; ++n) {
    EXPECT_EQ(qweight[n], 0x76543210u);
    EXPECT_EQ(qweight[32 + n], 0xFEDCBA98u);
  }
  // Symmetric: the true zero is 8, v1 stores 7 in every nibble (AutoGPTQ's 0x77777777), 2 groups x 4 words.
  EXPECT_EQ(st.Get("p.qzeros").shape, (std::vector<uint64_t>{2, 4}));
  for (uint32_t w : WordsOf(st, "p.qzeros")) EXPECT_EQ(w, 0x77777777u);
  const std::vector<uint32_t> g_idx = WordsOf(st, "p.g_idx");
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(g_idx[i], i / 8);
  EXPECT_EQ(st.Get("p.scales").shape, (std::vector<uint64_t>{2, 32}));
  EXPECT_EQ(st.Get("p.scales").dtype, DType::kF16);

  // v2 stores the true zero: 0x88888888.
  const SafetensorsModel v2 = Written(dir, "v2.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, {}, true); });
  for (uint32_t w : WordsOf(v2, "p.qzeros")) EXPECT_EQ(w, 0x88888888u);
}

TEST(EngineFormats, AwqInterleavesOutputChannelsByHand) {
  Scratch dir;
  // code(n, i) = n % 8 and zero(n) = 7 - n % 8: nibble slot k of each word holds channel ORDER[k] with
  // ORDER = 0, 2, 4, 6, 1, 3, 5, 7, so every qweight word reads 0x75316420 and every qzeros word 0x02461357.
  const QuantizedTensor q = Make("int4:g128:asym", 16, 128, [](uint64_t n, uint64_t) { return n % 8; },
                                 [](uint64_t n, uint64_t) { return 7 - n % 8; });
  const SafetensorsModel st = Written(dir, "awq.safetensors", [&](TensorList& l) { AddAwqLinear(l, "p", q); });
  EXPECT_EQ(st.Get("p.qweight").shape, (std::vector<uint64_t>{128, 2}));
  for (uint32_t w : WordsOf(st, "p.qweight")) EXPECT_EQ(w, 0x75316420u);
  for (uint32_t w : WordsOf(st, "p.qzeros")) EXPECT_EQ(w, 0x02461357u);
}

TEST(EngineFormats, PackQuantizedIsLowbitsRowInWordsByHand) {
  Scratch dir;
  // int4, code(n, i) = i % 16: a row of 32 codes is 0x76543210, 0xFEDCBA98, 0x76543210, 0xFEDCBA98.
  const QuantizedTensor q = Make("int4:g32:asym", 3, 32, [](uint64_t, uint64_t i) { return i % 16; },
                                 [](uint64_t n, uint64_t) { return n + 1; });
  const SafetensorsModel st = Written(dir, "ct.safetensors", [&](TensorList& l) { AddPackQuantizedLinear(l, "p", q); });
  const std::vector<uint32_t> packed = WordsOf(st, "p.weight_packed");
  ASSERT_EQ(packed.size(), 12u);
  for (size_t w = 0; w < 12; ++w) EXPECT_EQ(packed[w], w % 2 ? 0xFEDCBA98u : 0x76543210u) << w;
  // Zero points 1, 2, 3 of the three rows, packed along the output dimension: one word 0x321.
  EXPECT_EQ(st.Get("p.weight_zero_point").shape, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(WordsOf(st, "p.weight_zero_point")[0], 0x321u);
  int64_t shape[2];
  std::memcpy(shape, st.Get("p.weight_shape").data.data(), 16);
  EXPECT_EQ(shape[0], 3);
  EXPECT_EQ(shape[1], 32);

  // 3-bit codes straddle words (compressed-tensors >= 0.17): 32 codes of 7 fill three words, all ones.
  const QuantizedTensor q3 = Make("int3:channel", 1, 32, [](uint64_t, uint64_t) { return 7; }, [](uint64_t, uint64_t) { return 0; });
  const SafetensorsModel st3 = Written(dir, "ct3.safetensors", [&](TensorList& l) { AddPackQuantizedLinear(l, "p", q3); });
  for (uint32_t w : WordsOf(st3, "p.weight_packed")) EXPECT_EQ(w, 0xFFFFFFFFu);
}

TEST(EngineFormats, EveryFormatReadsBackItsOwnCodes) {
  Scratch dir;
  for (const std::string scheme : {"int4:g128", "int4:g128:asym", "int8:channel", "int3:g64", "int2:g32:asym:scale=bf16"}) {
    SCOPED_TRACE(scheme);
    const QuantizedTensor q = Random(scheme, 64, 256, 7);
    const QweightParams p = GptqParamsOf(q.scheme(), "p");
    for (bool v2 : {false, true}) {
      if (!v2 && q.scheme().asymmetric()) continue;  // random zeros may be 0, which v1 cannot hold (tested below)
      QweightParams read = p;
      read.gptq_v2 = v2;
      const SafetensorsModel st = Written(dir, "g.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, {}, v2); });
      ExpectSame(q, ReadGptqLinear(st, "p", 64, 256, read).tensor);
    }
    const SafetensorsModel ct = Written(dir, "c.safetensors", [&](TensorList& l) { AddPackQuantizedLinear(l, "p", q); });
    ExpectSame(q, ReadPackQuantizedLinear(ct, "p", 64, 256, q.scheme()).tensor);
  }
  for (const std::string scheme : {"int4:g64:asym", "int4:g128"}) {  // AWQ: symmetric tensors store zeros of 8
    const QuantizedTensor q = Random(scheme, 64, 256, 3);
    const SafetensorsModel st = Written(dir, "a.safetensors", [&](TensorList& l) { AddAwqLinear(l, "p", q); });
    ExpectSame(q, ReadAwqLinear(st, "p", 64, 256, AwqParamsOf(q.scheme(), "p")));
  }
}

TEST(EngineFormats, WhatAFormatCannotHoldIsAnErrorNamingTheField) {
  const auto zero0 = Make("int4:g128:asym", 32, 128, [](uint64_t, uint64_t) { return 1; }, [](uint64_t, uint64_t) { return 0; });
  TensorList l;
  ExpectError([&] { AddGptqLinear(l, "p", zero0, {}, false); }, {"p", "zero point 0", "gptq_v2"});
  ExpectError([&] { (void)GptqParamsOf(ParseScheme("int5:g128"), "p"); }, {"bits", "2, 3, 4 and 8"});
  ExpectError([&] { (void)GptqParamsOf(ParseScheme("int4:g128:scale=f32"), "p"); }, {"scale type", "fp16"});
  ExpectError([&] { (void)GptqParamsOf(ParseScheme("nf4:g64"), "p"); }, {"nf4"});
  ExpectError([&] { (void)GptqParamsOf(ParseScheme("int4:g128:asym:zero=f16"), "p"); }, {"zero points are integers"});
  ExpectError([&] { (void)AwqParamsOf(ParseScheme("int8:g128"), "p"); }, {"bits", "4-bit"});
  ExpectError([&] { (void)AwqParamsOf(ParseScheme("int4:channel"), "p"); }, {"granularity"});
  ExpectError([&] { CheckPackQuantized(ParseScheme("mxfp4"), "p"); }, {"element format", "fp4_e2m1"});
  ExpectError([&] { CheckPackQuantized(ParseScheme("int4:tensor:asym"), "p"); }, {"zero points", "channel and group"});
  const auto odd = Make("int4:g4", 8, 4, [](uint64_t, uint64_t) { return 0; }, [](uint64_t, uint64_t) { return 0; });
  ExpectError([&] { AddGptqLinear(l, "odd", odd, {}, false); }, {"odd", "in_features 4", "multiple of 32"});
}

TEST(EngineFormats, ActOrderIsAStoredColumnOrderByHand) {
  Scratch dir;
  // 32 outputs x 256 inputs, int4 g128, as desc_act leaves them: input column i is in group i % 2. lowbit
  // stores the even columns, then the odd ones (each group contiguous); stored column j of row n holds code
  // (j + n) % 16, and group 1's scale is 2.
  std::vector<uint32_t> order(256);
  for (uint32_t j = 0; j < 256; ++j) order[j] = j < 128 ? 2 * j : 2 * (j - 128) + 1;
  QuantizedTensor q = Make("int4:g128", 32, 256, [](uint64_t n, uint64_t j) { return (j + n) % 16; },
                           [](uint64_t, uint64_t) { return 0; });
  for (uint64_t n = 0; n < 32; ++n) q.SetScale(n * 2 + 1, 2.0f);
  const SafetensorsModel g = Written(dir, "g.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, order, false); });
  // g_idx: the group of each input column, i % 2.
  const std::vector<uint32_t> g_idx = WordsOf(g, "p.g_idx");
  ASSERT_EQ(g_idx.size(), 256u);
  for (uint32_t i = 0; i < 256; ++i) EXPECT_EQ(g_idx[i], i % 2) << i;
  // Codes go back to input order: input column i = 2k (stored at k) or 2k + 1 (stored at 128 + k) of row n.
  const std::vector<uint32_t> qweight = WordsOf(g, "p.qweight");
  const auto stored_at = [](uint64_t i) { return i % 2 == 0 ? i / 2 : 128 + i / 2; };
  for (uint64_t n = 0; n < 32; ++n)
    for (uint64_t i = 0; i < 256; ++i)
      ASSERT_EQ((qweight[(i / 8) * 32 + n] >> (4 * (i % 8))) & 15, (stored_at(i) + n) % 16) << n << " " << i;
  // compressed-tensors' actorder "group" as llm-compressor wrote it before 0.20: codes in input order (the
  // same rows as above), weight_scale by group id, weight_g_idx = i % 2.
  QuantizedTensor in_input_order = Make("int4:g128", 32, 256, [&](uint64_t n, uint64_t i) { return (stored_at(i) + n) % 16; },
                                        [](uint64_t, uint64_t) { return 0; });
  for (uint64_t n = 0; n < 32; ++n) in_input_order.SetScale(n * 2 + 1, 2.0f);
  const SafetensorsModel c = Written(dir, "c.safetensors", [&](TensorList& l) {
    AddPackQuantizedLinear(l, "p", in_input_order);
    l.AddOwned("p.weight_g_idx", DType::kI32, {256}, std::vector<int32_t>(g_idx.begin(), g_idx.end()));
  });
  // Read back: the same stored tensor and order (ties within a group keep input order, as written).
  const OrderedTensor from_gptq = ReadGptqLinear(g, "p", 32, 256, GptqParamsOf(q.scheme(), "p"));
  const OrderedTensor from_ct = ReadPackQuantizedLinear(c, "p", 32, 256, q.scheme());
  for (const OrderedTensor* t : {&from_gptq, &from_ct}) {
    ExpectSame(q, t->tensor);
    EXPECT_EQ(t->order, order);
  }
  // In order (no act-order), nothing is stored.
  EXPECT_TRUE(ReadGptqLinear(Written(dir, "plain.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, {}, false); }),
                             "p", 32, 256, GptqParamsOf(q.scheme(), "p"))
                  .order.empty());
}

TEST(EngineFormats, ActOrderAndForeignShapesAreNamedErrors) {
  Scratch dir;
  const QuantizedTensor q = Random("int4:g128", 32, 256, 5);
  const SafetensorsModel st = Written(dir, "ao.safetensors", [&](TensorList& l) { AddGptqLinear(l, "p", q, {}, false); });
  // A g_idx whose groups are not group_size columns each has no contiguous form: 129 columns in group 1.
  std::vector<int32_t> g_idx(256);
  for (int i = 0; i < 256; ++i) g_idx[i] = i < 127 ? 0 : 1;
  TensorList list;
  AddGptqLinear(list, "q", q, {}, false);
  std::vector<TensorToWrite> tensors = std::move(list).Sorted();
  for (TensorToWrite& t : tensors)
    if (t.name == "q.g_idx") t.data = std::as_bytes(std::span(g_idx));
  WriteSafetensors(dir / "ao2.safetensors", tensors);
  const SafetensorsModel ao = SafetensorsModel::Open(dir / "ao2.safetensors");
  ExpectError([&] { (void)ReadGptqLinear(ao, "q", 32, 256, GptqParamsOf(q.scheme(), "q")); },
              {"q.g_idx", "group 0 holds 127 input columns, not 128"});
  g_idx[3] = 2;  // past the last group
  for (TensorToWrite& t : tensors)
    if (t.name == "q.g_idx") t.data = std::as_bytes(std::span(g_idx));
  WriteSafetensors(dir / "ao3.safetensors", tensors);
  ExpectError([&] { (void)ReadGptqLinear(SafetensorsModel::Open(dir / "ao3.safetensors"), "q", 32, 256,
                                         GptqParamsOf(q.scheme(), "q")); },
              {"q.g_idx", "input column 3 is in group 2", "make 2 groups"});
  // The model's shape disagrees with the file's: named with both shapes.
  ExpectError([&] { (void)ReadGptqLinear(st, "p", 64, 256, GptqParamsOf(q.scheme(), "p")); }, {"p.qweight", "[32, 32]", "[32, 64]"});
}

TEST(EngineFormats, ExportedModelsLoadBackToTheSameTensors) {
  Scratch dir;
  Model quantized = LoadHfModel(kModelDir);
  QuantizeLinears(quantized.weights, ParseScheme("int4:g128:asym"));
  struct Case {
    EngineFormat format;
    bool v2;
    uint64_t shard;
  };
  for (const Case& c : {Case{EngineFormat::kGptq, true, kDefaultShardBytes}, Case{EngineFormat::kAwq, false, 1 << 20},
                        Case{EngineFormat::kCompressedTensors, false, kDefaultShardBytes}}) {
    SCOPED_TRACE(std::string(EngineFormatName(c.format)));
    const fs::path out = dir / std::string(EngineFormatName(c.format));
    StreamedModel s = OpenModel(kModelDir);  // float source, RTN while exporting
    EngineExportOptions o;
    o.format = c.format;
    o.gptq_v2 = c.v2;
    o.scheme = ParseScheme("int4:g128:asym");
    o.max_shard_bytes = c.shard;
    const EngineExportResult r = ExportEngineCheckpoint(s, kModelDir, out, nlohmann::json{{"method", "rtn"}}, o);
    EXPECT_EQ(r.quantized_linears, 42u);
    EXPECT_EQ(r.dense_linears, 1u);  // lm_head
    EXPECT_TRUE(fs::exists(out / "recipe.json"));
    EXPECT_TRUE(fs::exists(out / "tokenizer.model"));
    if (c.shard < kDefaultShardBytes) {
      EXPECT_GT(r.shards, 1u);
      EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
    }
    const Model back = LoadHfModel(out);
    for (size_t i = 0; i < back.weights.layers.size(); ++i) {
      const LayerWeights& a = quantized.weights.layers[i];
      const LayerWeights& b = back.weights.layers[i];
      for (auto m : {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::w_gate,
                     &LayerWeights::w_up, &LayerWeights::w_down})
        ExpectSame(std::get<QuantizedTensor>((a.*m).weight), std::get<QuantizedTensor>((b.*m).weight));
    }
  }
  // A second export into the same folder is refused, and leaves it as it was.
  StreamedModel s = OpenModel(kModelDir);
  EngineExportOptions o;
  o.scheme = ParseScheme("int4:g128");
  ExpectError([&] { (void)ExportEngineCheckpoint(s, kModelDir, dir / "gptq", nullptr, o); }, {"already exists"});
  // Mixed schemes have no GPTQ form.
  Model mixed = LoadHfModel(kModelDir);
  QuantizeLinears(mixed.weights, ParseScheme("int4:g128"));
  QuantizeBlockLinears(mixed.weights.layers[1] = LoadHfModel(kModelDir).weights.layers[1], 1, ParseScheme("int8:channel"));
  StreamedModel m{std::move(mixed), nullptr};
  o.format = EngineFormat::kGptq;
  o.scheme.reset();
  ExpectError([&] { (void)ExportEngineCheckpoint(m, kModelDir, dir / "mixed", nullptr, o); },
              {"model.layers.1.self_attn.q_proj", "one scheme", "compressed-tensors"});
  EXPECT_FALSE(fs::exists(dir / "mixed"));
}

TEST(EngineFormats, UnpackedFormatsStoreSignedInt8AndE4M3Bytes) {
  Scratch dir;
  // int8 code 128 + v is compressed-tensors' signed int8 v: row i holds -4 .. 3.
  const QuantizedTensor q8 = Make("int8:channel", 2, 8, [](uint64_t, uint64_t i) { return 124 + i; }, [](uint64_t, uint64_t) { return 0; });
  const InputQuant token{ParseScheme("int8:token"), 0};
  EXPECT_EQ(CompressedTensorsFormatOf(q8.scheme(), token, "p"), "int-quantized");
  const SafetensorsModel st = Written(dir, "i8.safetensors", [&](TensorList& l) { AddCompressedTensorsLinear(l, "p", q8, token); });
  const TensorView& w = st.Get("p.weight");
  ASSERT_EQ(w.dtype, DType::kI8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<int8_t>(w.data[8 + i]), i - 4);
  EXPECT_EQ(st.Get("p.weight_scale").shape, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(st.Find("p.input_scale"), nullptr);  // dynamic per token: nothing stored
  ExpectSame(q8, ReadUnpackedLinear(st, "p", 2, 8, q8.scheme()));

  // FP8 weight-only is naive-quantized; the E4M3 byte is stored as is. Static inputs store input_scale.
  const QuantizedTensor f8 = Random("fp8_e4m3:block128x128:scale=f32", 256, 384, 11);
  EXPECT_EQ(CompressedTensorsFormatOf(f8.scheme(), std::nullopt, "p"), "naive-quantized");
  const InputQuant fixed{ParseScheme("fp8_e4m3:tensor:scale=f32"), 0.25f};
  EXPECT_EQ(CompressedTensorsFormatOf(f8.scheme(), fixed, "p"), "float-quantized");
  const SafetensorsModel fs8 = Written(dir, "f8.safetensors", [&](TensorList& l) { AddCompressedTensorsLinear(l, "p", f8, fixed); });
  EXPECT_EQ(fs8.Get("p.weight").dtype, DType::kF8E4M3);
  EXPECT_EQ(0, std::memcmp(fs8.Get("p.weight").data.data(), f8.codes().data(), f8.codes().size()));
  EXPECT_EQ(fs8.Get("p.weight_scale").shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ToFloat32(fs8.Get("p.input_scale"))[0], 0.25f);
  ExpectSame(f8, ReadUnpackedLinear(fs8, "p", 256, 384, f8.scheme()));

  ExpectError([&] { (void)CompressedTensorsFormatOf(q8.scheme(), InputQuant{ParseScheme("fp8_e4m3:token"), 0}, "p"); },
              {"int8 weights with int8 inputs"});
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("fp4_e2m1:g32:scale=f16"), std::nullopt, "p"); },
              {"fp4_e2m1"});
}

TEST(EngineFormats, W8A8ExportsKeepTheirInputQuantization) {
  Scratch dir;
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("int8:channel"));
  for (LayerWeights& l : m.weights.layers) {
    l.wq.input_quant = l.wk.input_quant = l.wv.input_quant = InputQuant{ParseScheme("int8:token"), 0};
    l.wo.input_quant = l.w_gate.input_quant = l.w_up.input_quant = l.w_down.input_quant =
        InputQuant{ParseScheme("int8:tensor:scale=f32"), 0.0625f};
  }
  const Model expected = m;
  StreamedModel s{std::move(m), nullptr};
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  const EngineExportResult r = ExportEngineCheckpoint(s, kModelDir, dir / "w8a8", nullptr, o);
  EXPECT_EQ(r.format, "int-quantized");
  const Model back = LoadHfModel(dir / "w8a8");
  for (size_t i = 0; i < back.weights.layers.size(); ++i) {
    const LayerWeights& a = expected.weights.layers[i];
    const LayerWeights& b = back.weights.layers[i];
    ExpectSame(std::get<QuantizedTensor>(a.w_down.weight), std::get<QuantizedTensor>(b.w_down.weight));
    ASSERT_TRUE(b.wq.input_quant && b.w_down.input_quant);
    EXPECT_EQ(b.wq.input_quant->scheme.ToString(), a.wq.input_quant->scheme.ToString());
    EXPECT_EQ(b.w_down.input_quant->scheme.granularity.kind, GranularityKind::kTensor);
    EXPECT_EQ(b.w_down.input_quant->static_scale, 0.0625f);
  }
  // GPTQ is weight-only: the error says where W8A8 goes.
  StreamedModel again{expected, nullptr};
  o.format = EngineFormat::kGptq;
  ExpectError([&] { (void)ExportEngineCheckpoint(again, kModelDir, dir / "gptq", nullptr, o); },
              {"input_quant", "compressed-tensors"});
}

// Asymmetric int8 inputs (vLLM's W8A8 with azp): int-quantized with symmetric false and int8
// zero-points; the static zero-point is lowbit's code minus 128, and both schemes come back as written.
TEST(EngineFormats, AsymmetricInputsExportWithInt8ZeroPoints) {
  Scratch dir;
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("int8:channel"));
  const InputQuant token{ParseScheme("int8:token:asym:scale=f32")};
  const InputQuant fixed{ParseScheme("int8:tensor:asym:scale=f32"), 0.0625f, 100.0f};
  for (LayerWeights& l : m.weights.layers) {
    l.wq.input_quant = l.wk.input_quant = l.wv.input_quant = token;
    l.wo.input_quant = l.w_gate.input_quant = l.w_up.input_quant = l.w_down.input_quant = fixed;
  }
  EXPECT_EQ(ExportCompressedTensors(m, dir / "ct").format, "int-quantized");
  const nlohmann::json groups = ReadJsonFile(dir / "ct" / "config.json")["quantization_config"]["config_groups"];
  int asymmetric = 0;
  for (const auto& [name, g] : groups.items()) {
    const nlohmann::json& a = g["input_activations"];
    EXPECT_EQ(a["symmetric"], false) << name;
    EXPECT_EQ(a["zp_dtype"], "torch.int8") << name;
    asymmetric += a["dynamic"] == true ? a["strategy"] == "token" : a["strategy"] == "tensor";
  }
  EXPECT_EQ(asymmetric, static_cast<int>(groups.size()));
  const SafetensorsModel st = SafetensorsModel::Open(dir / "ct" / "model.safetensors");
  const TensorView& zero = st.Get("model.layers.0.mlp.down_proj.input_zero_point");
  ASSERT_EQ(zero.dtype, DType::kI8);
  EXPECT_EQ(static_cast<int8_t>(zero.data[0]), -28);
  EXPECT_EQ(st.Find("model.layers.0.self_attn.q_proj.input_zero_point"), nullptr);  // per token: chosen per call
  const Model back = LoadHfModel(dir / "ct");
  for (const LayerWeights& l : back.weights.layers) {
    EXPECT_EQ(l.wk.input_quant, token);
    EXPECT_EQ(l.w_down.input_quant, fixed);
  }

  // The zero-point compressed-tensors takes before rounding the scale: only fp32 scales agree per token.
  ExpectError([&] {
    (void)CompressedTensorsFormatOf(ParseScheme("int8:channel"), InputQuant{ParseScheme("int8:token:asym")}, "p");
  }, {"p:", "fp32 scales", "int8:token:asym:scale=f32"});
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("int4:g128"), token, "p"); }, {"p:", "int8 weights"});
  nlohmann::json config = ReadJsonFile(dir / "ct" / "config.json");
  for (auto& [name, g] : config["quantization_config"]["config_groups"].items())
    if (g["input_activations"]["dynamic"] == true) g["input_activations"]["scale_dtype"] = "torch.float16";
  WriteFileAtomic(dir / "ct" / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir / "ct"); }, {"config.json", "input_activations.scale_dtype", "fp32"});
  for (auto& [name, g] : config["quantization_config"]["config_groups"].items())
    g["input_activations"]["type"] = "float";
  WriteFileAtomic(dir / "ct" / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir / "ct"); }, {"config.json", "input_activations.symmetric", "int8"});
}

// llm-compressor's FP8_BLOCK (DeepSeek-V3's scheme): 128 x 128 block weights with FP8 inputs per
// group of 128 chosen per call, float-quantized; groups other than a block's columns, or on
// non-block weights, are not what vLLM runs and are refused with the spelling that is.
TEST(EngineFormats, BlockFp8WithGroupInputsIsFp8Block) {
  Scratch dir;
  const QuantScheme input = ParseScheme("fp8_e4m3:g128:scale=f32");
  const Model expected = QuantizedWithInputs("fp8_e4m3:block128x128:scale=f32", input);
  EXPECT_EQ(ExportCompressedTensors(expected, dir / "ct").format, "float-quantized");
  const nlohmann::json g = ReadJsonFile(dir / "ct" / "config.json")["quantization_config"]["config_groups"]["group_0"];
  EXPECT_EQ(g["weights"]["strategy"], "block");
  EXPECT_EQ(g["input_activations"]["strategy"], "group");
  EXPECT_EQ(g["input_activations"]["group_size"], 128);
  EXPECT_EQ(g["input_activations"]["dynamic"], true);
  EXPECT_EQ(g["input_activations"]["type"], "float");
  const Model back = LoadHfModel(dir / "ct");
  for (size_t i = 0; i < back.weights.layers.size(); ++i) {
    const LayerWeights &a = expected.weights.layers[i], &b = back.weights.layers[i];
    ExpectSame(std::get<QuantizedTensor>(a.w_gate.weight), std::get<QuantizedTensor>(b.w_gate.weight));
    EXPECT_EQ(b.w_gate.input_quant, a.w_gate.input_quant);
  }
  const QuantScheme block = ParseScheme("fp8_e4m3:block128x128:scale=f32");
  ExpectError([&] { (void)CompressedTensorsFormatOf(block, InputQuant{ParseScheme("fp8_e4m3:g64:scale=f32")}, "p"); },
              {"p:", "one group per block column", "fp8_e4m3:g128:scale=f32"});
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("fp8_e4m3"), InputQuant{input}, "p"); },
              {"p:", "only on block FP8 weights", "fp8_e4m3:token"});
}

// quant_method "fp8" (vLLM's Fp8Config: DeepSeek-V3 / Qwen3-FP8 block checkpoints, older per-tensor
// ones), written here from a compressed-tensors FP8 folder of the same codes: block scales renamed
// weight_scale_inv, per-tensor ones stored as scalars (in transformers' names where `transformers_names`:
// weight_scale_inv and activation_scale, as Ministral 3's checkpoints have them). `qc` is the quantization_config;
// `scalars` are added as F32 [] tensors (KV-cache scales).
void WriteFp8MethodFolder(const fs::path& ct, const fs::path& out, const nlohmann::json& qc, bool block = true,
                          const std::map<std::string, float>& scalars = {}, bool transformers_names = false) {
  fs::create_directories(out);
  for (const char* side : {"tokenizer.model", "tokenizer_config.json"})
    if (fs::exists(ct / side)) fs::copy_file(ct / side, out / side);
  nlohmann::json config = ReadJsonFile(ct / "config.json");
  config["quantization_config"] = qc;
  WriteFileAtomic(out / "config.json", config.dump());
  const SafetensorsModel st = SafetensorsModel::Open(ct / "model.safetensors");
  TensorList list;
  for (const std::string& name : st.names()) {
    const TensorView& t = st.Get(name);
    const bool scale = name.ends_with(".weight_scale") || name.ends_with(".input_scale");
    std::vector<uint64_t> shape = t.shape;
    if (scale && t.numel() == 1) shape.clear();  // [] as the per-tensor FP8 checkpoints store them
    std::string stored = name;
    if ((block || transformers_names) && name.ends_with(".weight_scale")) stored += "_inv";
    if (transformers_names && name.ends_with(".input_scale"))
      stored = name.substr(0, name.size() - std::string_view("input_scale").size()) + "activation_scale";
    list.AddOwnedBytes(stored, t.dtype, shape, {t.data.begin(), t.data.end()});
  }
  for (const auto& [name, value] : scalars) list.AddOwned(name, DType::kF32, {}, std::vector<float>{value});
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();
  WriteSafetensors(out / "model.safetensors", tensors);
}

TEST(EngineFormats, Fp8MethodCheckpointsRunTheirCodesOnVllmsInputs) {
  Scratch dir;
  // Block weights: every linear's codes and scales as stored, inputs FP8 per 1 x 128 group per call.
  const Model block = QuantizedWithInputs("fp8_e4m3:block128x128:scale=f32", ParseScheme("fp8_e4m3:g128:scale=f32"));
  (void)ExportCompressedTensors(block, dir / "ct-block");
  const nlohmann::json block_qc = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
                                   {"weight_block_size", {128, 128}}};
  WriteFp8MethodFolder(dir / "ct-block", dir / "fp8-block", block_qc);
  const Model back = LoadHfModel(dir / "fp8-block");
  for (size_t i = 0; i < back.weights.layers.size(); ++i) {
    const LayerWeights &a = block.weights.layers[i], &b = back.weights.layers[i];
    ExpectSame(std::get<QuantizedTensor>(a.wq.weight), std::get<QuantizedTensor>(b.wq.weight));
    ExpectSame(std::get<QuantizedTensor>(a.w_down.weight), std::get<QuantizedTensor>(b.w_down.weight));
    EXPECT_EQ(b.w_down.input_quant, a.w_down.input_quant);
  }
  nlohmann::json torch_fmt = block_qc;  // MiniMax-M2's spelling: torch's dtype name
  torch_fmt["fmt"] = "float8_e4m3fn";
  WriteFp8MethodFolder(dir / "ct-block", dir / "fp8-torch-fmt", torch_fmt);
  ExpectSame(std::get<QuantizedTensor>(block.weights.layers[0].wv.weight),
             std::get<QuantizedTensor>(LoadHfModel(dir / "fp8-torch-fmt").weights.layers[0].wv.weight));
  // Per tensor, static inputs: scalar weight_scale and input_scale.
  const InputQuant fixed{ParseScheme("fp8_e4m3:tensor:scale=f32"), 0.25f};
  Model tensor = QuantizedWithInputs("fp8_e4m3:tensor:scale=f32", fixed.scheme);
  for (LayerWeights& l : tensor.weights.layers)
    for (Linear* linear : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) linear->input_quant = fixed;
  (void)ExportCompressedTensors(tensor, dir / "ct-tensor");
  WriteFp8MethodFolder(dir / "ct-tensor", dir / "fp8-tensor", {{"quant_method", "fp8"}, {"activation_scheme", "static"}},
                       false);
  const Model back_tensor = LoadHfModel(dir / "fp8-tensor");
  ExpectSame(std::get<QuantizedTensor>(tensor.weights.layers[2].w_up.weight),
             std::get<QuantizedTensor>(back_tensor.weights.layers[2].w_up.weight));
  EXPECT_EQ(back_tensor.weights.layers[2].w_up.input_quant, fixed);
  // The same in transformers' names (weight_scale_inv, activation_scale: Ministral 3, Mistral Small 4).
  const nlohmann::json transformers_qc = {
      {"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", nullptr}};
  WriteFp8MethodFolder(dir / "ct-tensor", dir / "fp8-transformers", transformers_qc, false, {}, true);
  const Model named = LoadHfModel(dir / "fp8-transformers");
  ExpectSame(std::get<QuantizedTensor>(tensor.weights.layers[1].wk.weight),
             std::get<QuantizedTensor>(named.weights.layers[1].wk.weight));
  EXPECT_EQ(named.weights.layers[1].wk.input_quant, fixed);
  // Dynamic per-tensor checkpoints: vLLM quantizes their inputs per token.
  WriteFp8MethodFolder(dir / "ct-tensor", dir / "fp8-dynamic", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}},
                       false);
  EXPECT_EQ(LoadHfModel(dir / "fp8-dynamic").weights.layers[0].wo.input_quant,
            InputQuant{ParseScheme("fp8_e4m3:token:scale=f32")});

  // What vLLM would not run either, by key; a missing block scale by tensor.
  nlohmann::json bad = block_qc;
  bad["activation_scheme"] = "static";
  WriteFp8MethodFolder(dir / "ct-block", dir / "static-block", bad);
  ExpectError([&] { (void)LoadHfModel(dir / "static-block"); },
              {"config.json", "quantization_config.activation_scheme", "per call"});
  bad = block_qc;
  bad["fmt"] = "e5m2";
  WriteFp8MethodFolder(dir / "ct-block", dir / "e5m2", bad);
  ExpectError([&] { (void)LoadHfModel(dir / "e5m2"); }, {"config.json", "quantization_config.fmt", "E4M3"});
  bad = block_qc;
  bad.erase("weight_block_size");  // one scale per tensor expected, block scales found
  WriteFp8MethodFolder(dir / "ct-block", dir / "no-block", bad);
  ExpectError([&] { (void)LoadHfModel(dir / "no-block"); },
              {"model.layers.0.self_attn.q_proj.weight_scale_inv", "without weight_block_size by one"});
}

// quant_method fp8 has no kv_cache_scheme: vLLM's FP8 cache takes whatever scales the layers hold, under
// every spelling it remaps (a single kv_scale, ModelOpt's k_proj.k_scale, older v_proj.output_scale); a
// layer holding one of the two uses the larger for both, a layer holding none 1.0.
TEST(EngineFormats, Fp8MethodKvScalesAreTakenAsVllmTakesThem) {
  Scratch dir;
  const QuantScheme token = ParseScheme("fp8_e4m3:token:scale=f32");
  (void)ExportCompressedTensors(QuantizedWithInputs("fp8_e4m3:tensor:scale=f32", token), dir / "ct");
  const nlohmann::json qc = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  WriteFp8MethodFolder(dir / "ct", dir / "fp8", qc, false,
                       {{"model.layers.0.self_attn.k_scale", 0.5f},
                        {"model.layers.0.self_attn.v_scale", 0.25f},
                        {"model.layers.1.self_attn.kv_scale", 0.75f},
                        {"model.layers.2.self_attn.k_proj.k_scale", 0.0625f},
                        {"model.layers.2.self_attn.v_proj.v_scale", 0.125f},
                        {"model.layers.3.self_attn.v_proj.output_scale", 2.0f}});
  (void)LoadHfModel(dir / "fp8");  // the scale tensors belong to the checkpoint
  const KvCacheOptions kv = KvCacheOptionsFor("fp8_e4m3", (dir / "fp8").string(), "", 6);
  EXPECT_EQ(kv.k_scales, (std::vector<float>{0.5f, 0.75f, 0.0625f, 2.0f, 1.0f, 1.0f}));
  EXPECT_EQ(kv.v_scales, (std::vector<float>{0.25f, 0.75f, 0.125f, 2.0f, 1.0f, 1.0f}));
  ExpectError([&] { (void)KvCacheOptionsFor("fp8_e5m2", (dir / "fp8").string(), "", 6); },
              {"config.json", "fp8_e4m3 cache, not fp8_e5m2"});
  // No scale anywhere: 1.0 with vLLM's warning, as for any checkpoint.
  WriteFp8MethodFolder(dir / "ct", dir / "none", qc, false);
  EXPECT_TRUE(KvCacheOptionsFor("fp8_e4m3", (dir / "none").string(), "", 6).k_scales.empty());
  // Two spellings of one scale, or a scale that is not a positive number: named by tensor.
  WriteFp8MethodFolder(dir / "ct", dir / "twice", qc, false,
                       {{"model.layers.4.self_attn.k_scale", 0.5f}, {"model.layers.4.self_attn.kv_scale", 0.5f}});
  ExpectError([&] { (void)KvCacheOptionsFor("fp8_e4m3", (dir / "twice").string(), "", 6); },
              {"model.layers.4.self_attn.k_scale", "model.layers.4.self_attn.kv_scale", "layer 4's K"});
  WriteFp8MethodFolder(dir / "ct", dir / "zero", qc, false, {{"model.layers.5.self_attn.v_scale", 0.0f}});
  ExpectError([&] { (void)KvCacheOptionsFor("fp8_e4m3", (dir / "zero").string(), "", 6); },
              {"model.layers.5.self_attn.v_scale", "positive and finite"});
}

// MXFP4 weights with FP8 inputs, per token or per group of 128 (compressed-tensors' MXFP4xFP8 preset,
// vLLM's W4A8 MXFP4 scheme): dynamic float8 input_activations, read back as the same schemes.
TEST(EngineFormats, Mxfp4WithFp8InputsExportsDynamicFp8Activations) {
  for (const char* inputs : {"fp8_e4m3:token:scale=f32", "fp8_e4m3:g128:scale=f32"}) {
    Scratch dir;
    const QuantScheme input = ParseScheme(inputs);
    EXPECT_EQ(ExportCompressedTensors(QuantizedWithInputs("mxfp4", input), dir / "ct").format, "mxfp4-pack-quantized");
    const nlohmann::json a =
        ReadJsonFile(dir / "ct" / "config.json")["quantization_config"]["config_groups"]["group_0"]["input_activations"];
    EXPECT_EQ(a["type"], "float");
    EXPECT_EQ(a["num_bits"], 8);
    EXPECT_EQ(a["dynamic"], true);
    const bool group = input.granularity.kind == GranularityKind::kGroup;
    EXPECT_EQ(a["strategy"], group ? "group" : "token") << inputs;
    if (group) {
      EXPECT_EQ(a["group_size"], 128);
    }
    const Model back = LoadHfModel(dir / "ct");
    ASSERT_TRUE(back.weights.layers[1].w_down.input_quant.has_value());
    EXPECT_EQ(back.weights.layers[1].w_down.input_quant->scheme.ToString(), input.ToString());
  }
  ExpectError([&] {
    (void)CompressedTensorsFormatOf(ParseScheme("mxfp6_e2m3"), InputQuant{ParseScheme("fp8_e4m3:token:scale=f32"), 0}, "p");
  }, {"p:", "on mxfp4 weights"});
}

// W4A8 and W4AFP8 (compressed-tensors' presets of those names, vLLM's WnA8 schemes): pack-quantized
// integer weights whose inputs are quantized per token per call; they come back with those inputs.
// A static per-tensor input on packed weights has no engine to run it.
TEST(EngineFormats, W4A8ExportsArePackQuantizedWithDynamicTokenInputs) {
  for (const char* inputs : {"int8:token", "fp8_e4m3:token"}) {
    Scratch dir;
    const QuantScheme input = ParseScheme(inputs);
    const Model expected = QuantizedWithInputs("int4:g128", input);
    EXPECT_EQ(ExportCompressedTensors(expected, dir / "w4a8").format, "pack-quantized");
    const nlohmann::json group = ReadJsonFile(dir / "w4a8" / "config.json")["quantization_config"]["config_groups"]["group_0"];
    EXPECT_EQ(group["weights"]["num_bits"], 4);
    EXPECT_EQ(group["input_activations"]["num_bits"], 8);
    EXPECT_EQ(group["input_activations"]["type"], input.element->kind == ElementKind::kInt ? "int" : "float");
    EXPECT_EQ(group["input_activations"]["strategy"], "token");
    EXPECT_EQ(group["input_activations"]["dynamic"], true);
    const Model back = LoadHfModel(dir / "w4a8");
    for (size_t i = 0; i < back.weights.layers.size(); ++i) {
      const LayerWeights &a = expected.weights.layers[i], &b = back.weights.layers[i];
      ExpectSame(std::get<QuantizedTensor>(a.w_up.weight), std::get<QuantizedTensor>(b.w_up.weight));
      ASSERT_TRUE(b.w_up.input_quant.has_value());
      EXPECT_EQ(b.w_up.input_quant->scheme.ToString(), input.ToString());
    }
  }
  ExpectError([&] {
    (void)CompressedTensorsFormatOf(ParseScheme("int4:g128"), InputQuant{ParseScheme("int8:tensor:scale=f32"), 0.5f}, "p");
  }, {"p:", "dynamic per-token inputs"});
}

// NVFP4 W4A4 as llm-compressor's NVFP4 preset: the static input tensor scale goes out as
// input_global_scale = 1 / t and comes back exactly; MX activations and an uncalibrated one do not.
TEST(EngineFormats, Nvfp4W4A4ExportsKeepTheirStaticInputScale) {
  Scratch dir;
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("nvfp4"));
  const QuantScheme nvfp4 = ParseScheme("nvfp4");
  for (LayerWeights& l : m.weights.layers) {
    l.wq.input_quant = l.wk.input_quant = l.wv.input_quant = InputQuant{nvfp4, ChooseTensorScale(nvfp4, 13.0f)};
    l.wo.input_quant = InputQuant{nvfp4, ChooseTensorScale(nvfp4, 5.5f)};
    l.w_gate.input_quant = l.w_up.input_quant = InputQuant{nvfp4, ChooseTensorScale(nvfp4, 7.25f)};
    l.w_down.input_quant = InputQuant{nvfp4, ChooseTensorScale(nvfp4, 301.0f)};
  }
  const Model expected = m;
  StreamedModel s{std::move(m), nullptr};
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  EXPECT_EQ(ExportEngineCheckpoint(s, kModelDir, dir / "w4a4", nullptr, o).format, "nvfp4-pack-quantized");
  const nlohmann::json input =
      ReadJsonFile(dir / "w4a4" / "config.json")["quantization_config"]["config_groups"]["group_0"]["input_activations"];
  EXPECT_EQ(input["num_bits"], 4);
  EXPECT_EQ(input["strategy"], "tensor_group");
  EXPECT_EQ(input["group_size"], 16);
  EXPECT_EQ(input["dynamic"], "local");
  const SafetensorsModel st = SafetensorsModel::Open(dir / "w4a4" / "model.safetensors");
  EXPECT_EQ(ToFloat32(st.Get("model.layers.0.mlp.down_proj.input_global_scale"))[0],
            1.0f / expected.weights.layers[0].w_down.input_quant->static_scale);
  const Model back = LoadHfModel(dir / "w4a4");
  for (size_t i = 0; i < back.weights.layers.size(); ++i)
    for (auto field : {&LayerWeights::wq, &LayerWeights::wo, &LayerWeights::w_up, &LayerWeights::w_down}) {
      const Linear &a = expected.weights.layers[i].*field, &b = back.weights.layers[i].*field;
      ASSERT_TRUE(b.input_quant.has_value());
      EXPECT_EQ(b.input_quant->scheme.ToString(), "fp4_e2m1:g16:scale=ue4m3:tscale");
      EXPECT_EQ(b.input_quant->static_scale, a.input_quant->static_scale);
    }

  // A reader names the input key that is neither NVFP4's nor MX's (per-group inputs of 16).
  nlohmann::json config = ReadJsonFile(dir / "w4a4" / "config.json");
  config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["strategy"] = "group";
  WriteFileAtomic(dir / "w4a4" / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir / "w4a4"); }, {"config.json", "input_activations.group_size", "32"});
  config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor_group";
  config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;
  WriteFileAtomic(dir / "w4a4" / "config.json", config.dump());
  ExpectError([&] { (void)LoadHfModel(dir / "w4a4"); }, {"config.json", "input_activations.dynamic", "local"});

  ExpectError([&] { (void)CompressedTensorsFormatOf(nvfp4, InputQuant{nvfp4, 0}, "p"); },
              {"p:", "calibrated tensor scale", "input_global_scale"});
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("mxfp4"), InputQuant{nvfp4, 0.5f}, "p"); },
              {"p:", "weight-only", "nvfp4 inputs on nvfp4 weights"});
  ExpectError([&] { (void)CompressedTensorsFormatOf(nvfp4, InputQuant{ParseScheme("mxfp4:e8m0=round"), 0}, "p"); },
              {"p:", "MX inputs", "on MX weights"});
}

// The MX presets with quantized inputs (MXFP4 = W4A4, MXFP6A8, MXFP8): dynamic MX input_activations
// and no input tensor; they come back as MX inputs on compressed-tensors' scale rule. An input scheme
// on the OCP rule is refused: the engines would not run what lowbit measured.
TEST(EngineFormats, MxInputsExportAsDynamicGroupsOf32) {
  for (const auto& [weights, inputs, bits] : {std::tuple{"mxfp4", "mxfp4", 4}, std::tuple{"mxfp6_e2m3", "mxfp8_e4m3", 8},
                                              std::tuple{"mxfp8_e4m3", "mxfp8_e4m3", 8}}) {
    Scratch dir;
    const QuantScheme input = ParseScheme(std::string(inputs) + ":e8m0=round");
    (void)ExportCompressedTensors(QuantizedWithInputs(weights, input), dir / "ct");
    const nlohmann::json a =
        ReadJsonFile(dir / "ct" / "config.json")["quantization_config"]["config_groups"]["group_0"]["input_activations"];
    EXPECT_EQ(a["num_bits"], bits) << weights;
    EXPECT_EQ(a["type"], "float");
    EXPECT_EQ(a["strategy"], "group");
    EXPECT_EQ(a["group_size"], 32);
    EXPECT_EQ(a["dynamic"], true);
    EXPECT_EQ(a["scale_dtype"], "torch.uint8");
    const SafetensorsModel st = SafetensorsModel::Open(dir / "ct" / "model.safetensors");
    for (const std::string& name : st.names()) EXPECT_FALSE(name.ends_with("input_global_scale") || name.ends_with("input_scale")) << name;
    const Model back = LoadHfModel(dir / "ct");
    for (const LayerWeights& l : back.weights.layers)
      for (const Linear* linear : {&l.wq, &l.wo, &l.w_up, &l.w_down}) {
        ASSERT_TRUE(linear->input_quant.has_value());
        EXPECT_EQ(linear->input_quant->scheme.ToString(), input.ToString());
      }
  }
  ExpectError([&] { (void)CompressedTensorsFormatOf(ParseScheme("mxfp4"), InputQuant{ParseScheme("mxfp4"), 0}, "p"); },
              {"p:", "--act-format fp4_e2m1:g32:scale=e8m0:e8m0=round"});
  ExpectError([&] {
    (void)CompressedTensorsFormatOf(ParseScheme("mxfp4"), InputQuant{ParseScheme("int8:token:scale=f32"), 0}, "p");
  }, {"p:", "MX inputs (mxfp4, mxfp6_e2m3, mxfp8_e4m3) on MX weights"});
}

// GPTQ with static act-order (groups in column order) leaves nothing in the weights; the recipe card
// says which linears it quantized so, and compressed-tensors records them as llm-compressor does.
TEST(EngineFormats, StaticActOrderFromTheRecipeCardIsWrittenAsActorderStatic) {
  Scratch dir;
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("int4:g128"));
  const nlohmann::json card = {{"recipe",
                                {{"method", "gptq"},
                                 {"format", "int4:g128"},
                                 {"config", {{"act_order", "static"}}},
                                 {"overrides", {{{"match", "mlp\\.down_proj"}, {"format", "int4:g128"}, {"method", "rtn"}}}}}}};
  StreamedModel s{std::move(m), nullptr};
  EngineExportOptions o;
  o.format = EngineFormat::kCompressedTensors;
  (void)ExportEngineCheckpoint(s, kModelDir, dir / "ct", card, o);
  const nlohmann::json qc = ReadJsonFile(dir / "ct" / "config.json")["quantization_config"];
  std::map<std::string, nlohmann::json> actorder;  // target -> its group's weights.actorder
  for (const auto& [name, group] : qc["config_groups"].items())
    for (const nlohmann::json& t : group["targets"]) actorder[t.get<std::string>()] = group["weights"]["actorder"];
  EXPECT_EQ(actorder.at("model.layers.0.self_attn.q_proj"), "static");
  EXPECT_EQ(actorder.at("model.layers.5.mlp.up_proj"), "static");
  EXPECT_TRUE(actorder.at("model.layers.0.mlp.down_proj").is_null());  // the override's RTN
  EXPECT_EQ(actorder.size(), 42u);  // lm_head is dense here: ignored
  (void)LoadHfModel(dir / "ct");
}

TEST(EngineFormats, CalibratedKvScalesTravelAsKScaleAndVScale) {
  Scratch dir;
  const fs::path source = dir / "source";
  fs::create_directories(source);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"}) fs::create_symlink(kModelDir / f, source / f);
  KvScales kv;
  for (int i = 0; i < 6; ++i) {
    kv.k.push_back(0.01f * (i + 1));
    kv.v.push_back(0.02f * (i + 1));
  }
  WriteKvScales(kv, KvScalesPathFor(source));
  StreamedModel s = OpenModel(source);
  EngineExportOptions o;
  o.scheme = ParseScheme("int4:g128");
  (void)ExportEngineCheckpoint(s, source, dir / "out", nullptr, o);
  const SafetensorsModel st = SafetensorsModel::Open(dir / "out");
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ToFloat32(st.Get(fmt::format("model.layers.{}.self_attn.k_scale", i)))[0], kv.k[i]);
    EXPECT_EQ(ToFloat32(st.Get(fmt::format("model.layers.{}.self_attn.v_scale", i)))[0], kv.v[i]);
  }
  const nlohmann::json config = nlohmann::json::parse(ReadTextFile(dir / "out" / "config.json"));
  EXPECT_EQ(config["quantization_config"]["kv_cache_scheme"]["type"], "float");
  EXPECT_EQ(config["quantization_config"]["kv_cache_scheme"]["strategy"], "tensor");
  EXPECT_EQ(ReadKvScales(KvScalesPathFor(dir / "out"), 6).k, kv.k);  // lowbit's own file travels too
  (void)LoadHfModel(dir / "out");  // the scale tensors belong to the checkpoint
  // Anyone's compressed-tensors checkpoint (no kv_cache_scales.json): the FP8 cache runs on its own scales.
  fs::remove(KvScalesPathFor(dir / "out"));
  const KvCacheOptions own = KvCacheOptionsFor("fp8_e4m3", (dir / "out").string(), "", 6);
  EXPECT_EQ(own.k_scales, kv.k);
  EXPECT_EQ(own.v_scales, kv.v);
  ExpectError([&] { (void)KvCacheOptionsFor("fp8_e5m2", (dir / "out").string(), "", 6); },
              {"config.json", "fp8_e4m3 cache, not fp8_e5m2"});
  nlohmann::json per_head = config;
  per_head["quantization_config"]["kv_cache_scheme"]["strategy"] = "attn_head";
  WriteFileAtomic(dir / "out" / "config.json", per_head.dump());
  ExpectError([&] { (void)KvCacheOptionsFor("fp8_e4m3", (dir / "out").string(), "", 6); },
              {"config.json", "kv_cache_scheme.strategy", "attn_head"});
}

}  // namespace
}  // namespace lowbit
