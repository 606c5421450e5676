// GGUF reader and llama loader: the real vocabulary files in ../shared, ggml's block test
// vectors (formats.md 2.9), a tiny llama written by the test writer, one test per reader rule
// (formats.md 2.3) checking that the error names the file and the key or tensor, and a
// truncation/mutation sweep in which nothing may escape but lowbit::Error.
#include "io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/minifloat.h"
#include "gguf_writer_for_tests.h"
#include "io/gguf_model.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using namespace gguf_testing;  // GgufTestWriter, MakeTinyLlama and the tiny shapes

template <class F>
void ExpectError(F&& f, std::initializer_list<std::string_view> needles) {
  try {
    f();
    ADD_FAILURE() << "expected lowbit::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (std::string_view needle : needles)
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
}

std::vector<std::byte> Hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i < hex.size();) {
    if (hex[i] == ' ') { ++i; continue; }
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    i += 2;
  }
  return out;
}

std::vector<float> Decode(uint32_t type, const std::vector<std::byte>& block, uint64_t n) {
  std::vector<float> y(n);
  DequantizeGgufRow(type, block.data(), n, y.data());
  return y;
}

// ---------------------------------------------------------------- real files in ../shared --

const fs::path kVocabDir = fs::path(LOWBIT_SOURCE_DIR) / ".." / "shared" / "tokenizers" / "ggml-vocab";

TEST(GgufRealFiles, LlamaSpmVocab) {
  const fs::path path = kVocabDir / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  const GgufFile f = GgufFile::Open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata().size(), 22u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.GetString("tokenizer.ggml.pre"), "default");
  EXPECT_EQ(f.GetU32("llama.context_length"), 4096u);
  EXPECT_EQ(f.GetU32("llama.vocab_size"), 32000u);
  EXPECT_EQ(f.GetU32("llama.rope.dimension_count"), 128u);
  EXPECT_EQ(f.GetF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f.GetU32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.GetU32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_TRUE(f.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f.GetBool("tokenizer.ggml.add_eos_token"));
  const auto& tokens = f.GetArrayOf<std::string>("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[31999], "给");
  const auto& scores = f.GetArrayOf<float>("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 32000u);
  EXPECT_EQ(scores[31999], -31740.0f);
  const auto& types = f.GetArrayOf<int32_t>("tokenizer.ggml.token_type");
  EXPECT_EQ(types[0], 2);  // unknown
  EXPECT_EQ(types[1], 3);  // control
  EXPECT_EQ(types[3], 6);  // byte
  // Vocabulary-only: the loader must say what is missing.
  ExpectError([&] { LoadGgufModel(path); }, {path.string(), "missing tensor 'token_embd.weight'"});
}

TEST(GgufRealFiles, Gpt2Vocab) {
  const fs::path path = kVocabDir / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  const GgufFile f = GgufFile::Open(path);
  EXPECT_EQ(f.GetString("general.architecture"), "gpt2");
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.GetString("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.GetU32("gpt2.block_count"), 12u);
  EXPECT_EQ(f.GetU32("gpt2.embedding_length"), 768u);
  const auto& tokens = f.GetArrayOf<std::string>("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[50256], "<|endoftext|>");
  const auto& merges = f.GetArrayOf<std::string>("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 50000u);
  EXPECT_EQ(merges[0], "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(f.GetArrayOf<int32_t>("tokenizer.ggml.token_type")[50256], 3);
  EXPECT_EQ(f.GetU32("tokenizer.ggml.bos_token_id"), 50256u);
  EXPECT_EQ(f.GetU32("tokenizer.ggml.eos_token_id"), 50256u);
  ExpectError([&] { LoadGgufModel(path); },
              {path.string(), "unsupported general.architecture 'gpt2'", "supported: llama"});
}

// ---------------------------------------------- block test vectors (formats.md 2.8 / 2.9) --
// Input of every vector: x_i = (i - 16) * 0.25, i = 0..31.

TEST(GgufBlocks, Q4_0Vector) {
  const auto y = Decode(kGgmlQ4_0, Hex("00 38 80 91 91 a2 a2 b3 b3 c4 c4 d5 d5 e6 e6 f7 f7 f8"), 32);
  for (int i = 0; i < 32; ++i) {  // ref quantizer: d = 0.5, q = min(15, trunc(i/2 + 0.5))
    const int q = std::min(15, static_cast<int>(i / 2.0 + 0.5));
    EXPECT_EQ(y[i], (q - 8) * 0.5f) << i;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[1], -3.5f);
  EXPECT_EQ(y[31], 3.5f);
}

TEST(GgufBlocks, Q4_1Vector) {
  const auto y = Decode(kGgmlQ4_1, Hex("22 38 00 c4 80 80 91 91 a2 a2 b3 b3 c4 c4 d5 d5 e6 e6 f7 f7"), 32);
  const float d = Fp16ToFp32(0x3822), m = -4.0f;  // m = fp16 0xc400
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], static_cast<float>(i / 2) * d + m) << i;
}

TEST(GgufBlocks, Q8_0Vector) {
  const auto y = Decode(kGgmlQ8_0,
                        Hex("08 28 81 89 91 99 a1 a9 b1 b9 c0 c8 d0 d8 e0 e8 f0 f8 00 08 10 18 20 28"
                            "30 38 40 47 4f 57 5f 67 6f 77"),
                        32);
  const int codes[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48,
                         -40,  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,
                         48,   56,   64,   71,   79,  87,  95,  103, 111, 119};
  const float d = Fp16ToFp32(0x2808);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y[i], static_cast<float>(codes[i]) * d) << i;
    EXPECT_NEAR(y[i], (i - 16) * 0.25f, d / 2 + 1e-3f) << i;
  }
}

// A tensor decodes in slices of about 4 MiB of its bytes, whole blocks each, handed in order to the
// loader's callback (which releases their mapped pages), with the values of one pass.
std::vector<std::span<const std::byte>> consumed_slices;
TEST(GgufBlocks, TensorsDecodeSliceBySlice) {
  const uint64_t n = 2'500'000;  // F32: 1 Mi elements a slice, so three slices
  std::vector<float> values(n);
  for (uint64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 977) - 488.0f;
  GgufTensorInfo t{"big", kGgmlF32, {1000, 2500}, 0, n, std::as_bytes(std::span(values))};
  consumed_slices.clear();
  EXPECT_EQ(DequantizeGgufTensor(t, [](std::span<const std::byte> b) { consumed_slices.push_back(b); }), values);
  ASSERT_EQ(consumed_slices.size(), 3u);
  const std::byte* at = t.data.data();
  for (const std::span<const std::byte>& b : consumed_slices) {
    EXPECT_EQ(b.data(), at);
    at += b.size();
  }
  EXPECT_EQ(at, t.data.data() + t.data.size());
}

// Q5_0/Q5_1 have no vector in 2.9; these bytes are what the 2.8 reference quantizers give for
// the same input (d = 0.25 = fp16 0x3400, q5_i = i, so qh has bits 16..31 set and the decode is
// exact).
TEST(GgufBlocks, Q5_0AndQ5_1) {
  const std::string qs = "00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff";
  const auto y0 = Decode(kGgmlQ5_0, Hex("00 34 00 00 ff ff " + qs), 32);
  const auto y1 = Decode(kGgmlQ5_1, Hex("00 34 00 c4 00 00 ff ff " + qs), 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y0[i], (i - 16) * 0.25f) << i;
    EXPECT_EQ(y1[i], (i - 16) * 0.25f) << i;
  }
}

TEST(GgufBlocks, Mxfp4AndIq4nlVectors) {
  const auto mx = Decode(kGgmlMXFP4, Hex("7f 0e 0e 1d 1d 2d 2d 3c 3c 4c 4b 4b 5a 5a 59 59 60"), 32);
  const float want[32] = {-4, -4,   -3,   -3,   -3, -3, -2, -2, -2,  -1.5, -1.5, -1, -1, -0.5, -0.5, 0,
                          0,  0,    0.5,  0.5,  1,  1,  1.5, 1.5, 2, 2,    2,    3,  3,  3,    3,    4};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(mx[i], want[i]) << i;

  const auto nl = Decode(kGgmlIQ4_NL, Hex("fa 27 80 90 91 a1 b1 b2 c2 c3 d3 d4 e4 e5 e5 f6 f7 f7"), 32);
  const float d = Fp16ToFp32(0x27fa);
  EXPECT_EQ(nl[0], -127 * d);  // low nibble 0 -> table[0]
  EXPECT_EQ(nl[16], 1 * d);    // high nibble 8 -> table[8]
  const std::set<float> table = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int i = 0; i < 32; ++i) {  // on the grid, monotone like the input, within half a gap
    EXPECT_TRUE(table.count(nl[i] / d)) << i;
    if (i > 0) {
      EXPECT_GE(nl[i], nl[i - 1]) << i;
    }
    EXPECT_NEAR(nl[i], (i - 16) * 0.25f, 12 * d) << i;
  }
}

TEST(GgufBlocks, PlainTypesAndErrors) {
  EXPECT_EQ(Decode(kGgmlF16, Hex("00 3c ff 7b"), 2), (std::vector<float>{1.0f, 65504.0f}));
  EXPECT_EQ(Decode(kGgmlBF16, Hex("80 3f 82 3f"), 2), (std::vector<float>{1.0f, 1.015625f}));
  EXPECT_EQ(Decode(kGgmlI8, Hex("ff 05"), 2), (std::vector<float>{-1.0f, 5.0f}));
  ExpectError([] { Decode(kGgmlQ8_0, std::vector<std::byte>(34), 16); }, {"not a whole number", "Q8_0"});
  ExpectError([] { Decode(kGgmlIQ2_XXS, std::vector<std::byte>(66), 256); }, {"IQ2_XXS", "not supported yet"});
  GgufTensorInfo t{"blk.0.ffn_down.weight", kGgmlIQ2_XS, {256}, 0, 256, {}};
  const std::vector<std::byte> bytes(210);
  t.data = bytes;
  ExpectError([&] { DequantizeGgufTensor(t); },
              {"blk.0.ffn_down.weight", "IQ2_XS", "not supported yet", "Q8_0", "Q4_K", "Q6_K"});
  EXPECT_EQ(FindGgmlType(4), nullptr);  // removed Q4_2
  EXPECT_EQ(GgmlTypeName(kGgmlQ5_K), "Q5_K");
  EXPECT_EQ(FindGgmlType(kGgmlQ6_K)->block_bytes, 210u);
}

// ---------------------------------------------------------------------- written files --

class GgufFileTest : public testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() / ("lowbit_gguf_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path Write(const GgufTestWriter& w, const std::string& name = "m.gguf") {
    const fs::path p = dir_ / name;
    w.Write(p);
    return p;
  }
  // Expects Open to fail with a message holding every needle and the file name.
  void ExpectOpenError(const GgufTestWriter& w, std::initializer_list<std::string_view> needles) {
    const fs::path p = Write(w, "bad.gguf");
    ExpectError([&] { GgufFile::Open(p); }, needles);
    ExpectError([&] { GgufFile::Open(p); }, {p.string()});
  }
  fs::path dir_;
};

void ExpectMatrix(const Linear& l, uint64_t rows, uint64_t cols, const std::vector<float>& want,
                  const std::string& what) {
  EXPECT_EQ(l.rows(), rows) << what;
  EXPECT_EQ(l.cols(), cols) << what;
  // Row r of the file = row r of the matrix, no permutation. Q8_0 stays in its codes.
  if (const auto* q = std::get_if<QuantizedTensor>(&l.weight)) {
    EXPECT_EQ(q->Dequantize(), want) << what;
  } else {
    EXPECT_EQ(std::get<DenseMatrix>(l.weight).values, want) << what;
  }
}

TEST_F(GgufFileTest, TinyLlamaLoads) {
  const TinyModel tm = MakeTinyLlama();
  const fs::path p = Write(tm.writer);
  const GgufFile f = GgufFile::Open(p);
  EXPECT_EQ(f.tensors().size(), 2u + 9u * kLayers + 1u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const GgufTensorInfo* down = f.FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ggml_type, kGgmlQ8_0);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{kFfn, kDim}));
  EXPECT_EQ(down->data.size(), kDim * 34u);

  const Model m = LoadGgufModel(p);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.architecture, "gguf:llama");
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacent);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.dim, kDim);
  EXPECT_EQ(c.n_layers, kLayers);
  EXPECT_EQ(c.n_heads, kHeads);
  EXPECT_EQ(c.n_kv_heads, kKvHeads);
  EXPECT_EQ(c.head_dim, kHeadDim);
  EXPECT_EQ(c.ffn_dim, kFfn);
  EXPECT_EQ(c.max_position, 64u);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.bos_id, 3);
  EXPECT_EQ(c.eos_id, 4);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_scaling.factor, 0.0f);
  EXPECT_EQ(m.source, p.string());

  const ModelWeights& w = m.weights;
  const auto& want = tm.want;
  EXPECT_EQ(w.embed.values, want.at("token_embd.weight"));
  ASSERT_EQ(w.layers.size(), kLayers);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& L = w.layers[l];
    EXPECT_EQ(L.attn_norm, want.at(p + "attn_norm.weight"));
    EXPECT_EQ(L.ffn_norm, want.at(p + "ffn_norm.weight"));
    ExpectMatrix(L.wq, kHeads * kHeadDim, kDim, want.at(p + "attn_q.weight"), p + "q");
    ExpectMatrix(L.wk, kKvHeads * kHeadDim, kDim, want.at(p + "attn_k.weight"), p + "k");
    ExpectMatrix(L.wv, kKvHeads * kHeadDim, kDim, want.at(p + "attn_v.weight"), p + "v");
    ExpectMatrix(L.wo, kDim, kHeads * kHeadDim, want.at(p + "attn_output.weight"), p + "o");
    ExpectMatrix(L.w_gate, kFfn, kDim, want.at(p + "ffn_gate.weight"), p + "gate");
    ExpectMatrix(L.w_up, kFfn, kDim, want.at(p + "ffn_up.weight"), p + "up");
    ExpectMatrix(L.w_down, kDim, kFfn, want.at(p + "ffn_down.weight"), p + "down");
  }
  EXPECT_TRUE(w.layers[0].w_down.quantized());  // Q8_0, repacked (gguf_repack_test.cc)
  EXPECT_FALSE(w.layers[1].w_down.quantized());
  EXPECT_EQ(w.final_norm, want.at("output_norm.weight"));
  ExpectMatrix(w.lm_head, kVocab, kDim, want.at("output.weight"), "output");
}

TEST_F(GgufFileTest, TiedOutputUsesEmbedding) {
  const TinyModel tm = MakeTinyLlama({.with_output = false});
  const Model m = LoadGgufModel(Write(tm.writer));
  EXPECT_TRUE(m.config.tie_embeddings);
  ExpectMatrix(m.weights.lm_head, kVocab, kDim, tm.want.at("token_embd.weight"), "tied");
}

// The embedding table keeps the file's type (a lookup decodes one row) and a tied output is that
// table; 16-bit linears stay 16-bit when the load asks (the runtime commands' keep_16bit).
TEST_F(GgufFileTest, SixteenBitTablesAndLinearsKeepTheFilesType) {
  const TinyModel tm = MakeTinyLlama({.with_output = false, .bf16_embeddings = true});
  const fs::path p = Write(tm.writer);
  const Model packed = LoadGgufModel(p, LoadOptions{.keep_16bit = true}), widened = LoadGgufModel(p);
  for (const Model* m : {&packed, &widened}) {
    ASSERT_TRUE(m->weights.embed.packed);
    EXPECT_EQ(m->weights.embed.Widened(), tm.want.at("token_embd.weight"));
    std::vector<float> row(kDim);
    m->weights.embed.Row(5, row);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), tm.want.at("token_embd.weight").begin() + 5 * kDim));
  }
  const auto* head = std::get_if<QuantizedTensor>(&packed.weights.lm_head.weight);
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(IsPlainFloat(*head));
  EXPECT_EQ(head->Dequantize(), tm.want.at("token_embd.weight"));
  ExpectMatrix(widened.weights.lm_head, kVocab, kDim, tm.want.at("token_embd.weight"), "tied");
  EXPECT_FALSE(widened.weights.lm_head.quantized());
  for (const auto& [linear, name] : {std::pair{&LayerWeights::wq, "blk.1.attn_q.weight"}, {&LayerWeights::w_up, "blk.1.ffn_up.weight"}}) {
    const auto* q = std::get_if<QuantizedTensor>(&(packed.weights.layers[1].*linear).weight);
    ASSERT_NE(q, nullptr) << name;
    EXPECT_TRUE(IsPlainFloat(*q));
    EXPECT_EQ(q->Dequantize(), tm.want.at(name)) << name;
    EXPECT_FALSE((widened.weights.layers[1].*linear).quantized()) << name;
  }
}

TEST_F(GgufFileTest, QkvBiasIsLoaded) {
  TinyModel tm = MakeTinyLlama();
  for (uint32_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tm.F32(p + "attn_q.bias", {kHeads * kHeadDim}, 50 + l);
    tm.F32(p + "attn_k.bias", {kKvHeads * kHeadDim}, 60 + l);
    tm.F32(p + "attn_v.bias", {kKvHeads * kHeadDim}, 70 + l);
  }
  const Model m = LoadGgufModel(Write(tm.writer));
  EXPECT_TRUE(m.config.qkv_bias);
  EXPECT_EQ(m.weights.layers[1].wq.bias, tm.want.at("blk.1.attn_q.bias"));
  EXPECT_EQ(m.weights.layers[0].wk.bias, tm.want.at("blk.0.attn_k.bias"));
  EXPECT_EQ(m.weights.layers[1].wv.bias, tm.want.at("blk.1.attn_v.bias"));
  EXPECT_TRUE(m.weights.layers[0].wo.bias.empty());
}

// Llama 3 divisors as llama.cpp's converter writes them (formats.md 2.5).
std::vector<float> Llama3Divisors(double base, double factor) {
  std::vector<float> f;
  for (uint32_t i = 0; i < kHeadDim / 2; ++i) {
    const double wavelen = 2 * M_PI * std::pow(base, 2.0 * i / kHeadDim);
    const double smooth = (8192 / wavelen - 1) / (4 - 1);
    f.push_back(static_cast<float>(wavelen < 2048 ? 1 : wavelen > 8192 ? factor
                                                                      : 1 / ((1 - smooth) / factor + smooth)));
  }
  return f;
}

TEST_F(GgufFileTest, RopeFreqsBecomeLlama3Scaling) {
  // base 5e5 puts dimension 1 in the blended band; 1e7 puts it past the low-frequency edge.
  for (const float base : {500000.0f, 1e7f}) {
    TinyModel tm = MakeTinyLlama({.rope_base = base});
    tm.writer.AddF32Tensor("rope_freqs.weight", {kHeadDim / 2}, Llama3Divisors(base, 32));
    const Model m = LoadGgufModel(Write(tm.writer));
    EXPECT_NEAR(m.config.rope_scaling.factor, 32.0f, 1e-3f) << base;
    EXPECT_EQ(m.config.rope_scaling.low_freq_factor, 1.0f);
    EXPECT_EQ(m.config.rope_scaling.high_freq_factor, 4.0f);
    EXPECT_EQ(m.config.rope_scaling.original_max_position, 8192u);
  }
  TinyModel tm = MakeTinyLlama();
  tm.writer.AddF32Tensor("rope_freqs.weight", {kHeadDim / 2}, {1.0f, 0.5f});  // not llama3
  const fs::path p = Write(tm.writer);
  ExpectError([&] { LoadGgufModel(p); }, {p.string(), "rope_freqs.weight", "does not match"});
}

// ----------------------------------------------------------------------- loader errors --

TEST_F(GgufFileTest, LoaderErrorsNameFileAndTensor) {
  {
    const fs::path p = Write(MakeTinyLlama({.arch = "falcon"}).writer);
    ExpectError([&] { LoadGgufModel(p); }, {p.string(), "unsupported general.architecture 'falcon'", "supported: llama, qwen2"});
  }
  auto expect = [&](auto&& mutate, std::initializer_list<std::string_view> needles,
                    const TinyOptions& options = {}) {
    TinyModel tm = MakeTinyLlama(options);
    mutate(tm.writer);
    const fs::path p = Write(tm.writer);
    ExpectError([&] { LoadGgufModel(p); }, needles);
    ExpectError([&] { LoadGgufModel(p); }, {p.string()});
  };
  auto find = [](GgufTestWriter& w, std::string_view name) -> GgufTestWriter::Tensor& {
    for (auto& t : w.tensors)
      if (t.name == name) return t;
    throw std::logic_error("no such tensor");
  };
  expect([&](GgufTestWriter& w) { std::erase_if(w.tensors, [](auto& t) { return t.name == "blk.1.ffn_up.weight"; }); },
         {"missing tensor 'blk.1.ffn_up.weight'"});
  expect([&](GgufTestWriter& w) { find(w, "blk.0.attn_k.weight").ne = {4, 8}; },
         {"tensor 'blk.0.attn_k.weight' has shape [4, 8] (ne order), expected [8, 4]"});
  expect([&](GgufTestWriter& w) { w.AddF32Tensor("blk.0.ffn_gate_inp.weight", {8}, std::vector<float>(8)); },
         {"unexpected tensor 'blk.0.ffn_gate_inp.weight'"});
  expect([&](GgufTestWriter& w) { w.AddU32("llama.vocab_size", 17); }, {"llama.vocab_size", "17"});
  expect([&](GgufTestWriter& w) {  // IQ2_XXS needs 256-wide rows, hence ffn = 256 here
    auto& t = find(w, "blk.0.ffn_down.weight");
    t.type = kGgmlIQ2_XXS;
    t.data.assign(kDim * 66, std::byte{0});
  }, {"tensor 'blk.0.ffn_down.weight'", "IQ2_XXS", "not supported yet"}, {.ffn = 256});
  expect([&](GgufTestWriter& w) {
    auto& t = find(w, "blk.0.ffn_down.weight");
    t.type = kGgmlQ2_K;
    t.ne = {256, kDim};
    t.data.assign(kDim * 84, std::byte{0});
  }, {"blk.0.ffn_down.weight", "[256, 8] (ne order), expected [32, 8]"});
}

TEST_F(GgufFileTest, UnsupportedTypeNamesTypeAndTensor) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddTensor("blk.0.ffn_down.weight", kGgmlIQ2_XXS, {256, 2}, std::vector<std::byte>(2 * 66));
  const GgufFile f = GgufFile::Open(Write(w));
  ExpectError([&] { DequantizeGgufTensor(f.tensors()[0]); },
              {"tensor 'blk.0.ffn_down.weight'", "ggml type IQ2_XXS", "not supported yet"});
}

// ------------------------------------------------------ reader rules (formats.md 2.3) --

// The example of formats.md 2.1: one F32 tensor "w" with ne = [3, 2] and two KVs.
GgufTestWriter Minimal() {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 2);
  w.AddF32Tensor("w", {3, 2}, {0, 1, 2, 3, 4, 5});
  return w;
}

TEST_F(GgufFileTest, FormatsExampleLayout) {
  const std::vector<std::byte> bytes = Minimal().Build();
  EXPECT_EQ(bytes[0x18], std::byte{0x14});  // length of "general.architecture"
  EXPECT_EQ(bytes[0x45], std::byte{0x11});  // length of "llama.block_count"
  EXPECT_EQ(bytes[0x66], std::byte{0x01});  // length of "w"
  const GgufFile f = GgufFile::Open(Write(Minimal()));
  EXPECT_EQ(f.data_offset(), 0xa0u);
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].dims, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(f.tensors()[0].n_rows(), 2u);
  EXPECT_EQ(DequantizeGgufTensor(f.tensors()[0]), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(f.GetU32("llama.block_count"), 2u);
}

TEST_F(GgufFileTest, MagicAndVersion) {
  GgufTestWriter w = Minimal();
  w.magic = 0x46554746;
  ExpectOpenError(w, {"bad magic", "not a GGUF file"});
  w = Minimal();
  for (const uint32_t v : {0u, 4u}) {
    w.version = v;
    ExpectOpenError(w, {"unsupported GGUF version " + std::to_string(v)});
  }
  w.version = 1;
  ExpectOpenError(w, {"version 1 is not supported"});
  w.version = 0x03000000;  // a v3 file written big-endian
  ExpectOpenError(w, {"big-endian"});
  w.version = 2;  // v2 = v3 for little-endian files
  EXPECT_EQ(GgufFile::Open(Write(w)).version(), 2u);
}

TEST_F(GgufFileTest, Truncation) {
  const std::vector<std::byte> bytes = Minimal().Build();
  const fs::path p = dir_ / "t.gguf";
  GgufTestWriter::WriteBytes(p, {bytes.begin(), bytes.begin() + 20});
  ExpectError([&] { GgufFile::Open(p); }, {p.string(), "header", "truncated"});
  GgufTestWriter::WriteBytes(p, {bytes.begin(), bytes.begin() + 0x3c});  // inside the first value
  ExpectError([&] { GgufFile::Open(p); }, {"key 'general.architecture'", "truncated"});
  GgufTestWriter::WriteBytes(p, {bytes.begin(), bytes.begin() + 0x80});  // inside the tensor info
  ExpectError([&] { GgufFile::Open(p); }, {"tensor 'w'", "truncated"});
  GgufTestWriter::WriteBytes(p, {bytes.begin(), bytes.begin() + 0xa0 + 20});  // inside the data
  ExpectError([&] { GgufFile::Open(p); }, {"tensor 'w'", "beyond the end of the file"});
  // Missing only the final tensor's padding: llama.cpp's mmap loader accepts it, so do we.
  GgufTestWriter::WriteBytes(p, {bytes.begin(), bytes.begin() + 0xa0 + 24});
  EXPECT_EQ(DequantizeGgufTensor(GgufFile::Open(p).tensors()[0])[5], 5.0f);
}

TEST_F(GgufFileTest, CountsAndLengthsAreBounded) {
  GgufTestWriter w = Minimal();
  w.kv_count_override = uint64_t{1} << 60;
  ExpectOpenError(w, {"kv_count 1152921504606846976 cannot fit"});
  w = Minimal();
  w.tensor_count_override = uint64_t{1} << 60;
  ExpectOpenError(w, {"tensor_count 1152921504606846976 cannot fit"});

  w = Minimal();  // a key whose length prefix claims 1 TiB
  std::vector<std::byte> record = GgufTestWriter::Pod<uint64_t>(uint64_t{1} << 40);
  GgufTestWriter::Append(record, GgufTestWriter::Str("abc"));
  w.AddRawKv(record);
  ExpectOpenError(w, {"key #2", "string length 1099511627776 exceeds the limit"});
  w = Minimal();
  w.AddKv("general.name", 8, GgufTestWriter::Pod<uint64_t>(1000));  // 1000 bytes promised, none there
  ExpectOpenError(w, {"key 'general.name'", "string length 1000 exceeds the", "left in the file"});
  w = Minimal();
  w.AddU32(std::string(70000, 'k'), 1);
  ExpectOpenError(w, {"string length 70000 exceeds the limit of 65535"});

  std::vector<std::byte> array = GgufTestWriter::Pod<uint32_t>(4);  // u32 elements
  GgufTestWriter::Append(array, GgufTestWriter::Pod<uint64_t>(uint64_t{1} << 31));
  w = Minimal();
  w.AddKv("general.huge", 9, array);
  ExpectOpenError(w, {"key 'general.huge'", "exceeds the limit of 2^30"});
  array = GgufTestWriter::Pod<uint32_t>(8);  // strings
  GgufTestWriter::Append(array, GgufTestWriter::Pod<uint64_t>(100000));
  w = Minimal();
  w.AddKv("tokenizer.ggml.tokens", 9, array);
  ExpectOpenError(w, {"key 'tokenizer.ggml.tokens'", "array of 100000 elements does not fit"});
}

TEST_F(GgufFileTest, KeyAndValueRules) {
  GgufTestWriter w = Minimal();
  w.AddU32("", 1);
  ExpectOpenError(w, {"key #2 is empty"});
  w = Minimal();
  w.AddU32("llama.block_count", 3);
  ExpectOpenError(w, {"duplicate key 'llama.block_count'"});
  w = Minimal();
  w.AddKv("general.odd", 13, GgufTestWriter::Pod<uint32_t>(0));
  ExpectOpenError(w, {"key 'general.odd'", "unknown value type 13"});
  w = Minimal();
  std::vector<std::byte> nested = GgufTestWriter::Pod<uint32_t>(9);
  GgufTestWriter::Append(nested, GgufTestWriter::Pod<uint64_t>(0));
  w.AddKv("general.nested", 9, nested);
  ExpectOpenError(w, {"key 'general.nested'", "nested arrays"});
  w = Minimal();
  w.AddKv("tokenizer.ggml.add_bos_token", 7, GgufTestWriter::Pod<uint8_t>(2));
  ExpectOpenError(w, {"key 'tokenizer.ggml.add_bos_token'", "neither 0 nor 1"});
}

TEST_F(GgufFileTest, AlignmentRules) {
  for (const uint32_t a : {0u, 48u}) {
    GgufTestWriter w = Minimal();
    w.AddU32("general.alignment", a);
    ExpectOpenError(w, {"general.alignment", "power of two"});
  }
  GgufTestWriter w = Minimal();
  w.AddU64("general.alignment", 64);
  ExpectOpenError(w, {"general.alignment", "has type UINT64, expected UINT32"});
  w = Minimal();
  w.AddU32("general.alignment", 64);
  w.alignment = 64;
  w.AddF32Tensor("v", {2}, {7, 8});
  const GgufFile f = GgufFile::Open(Write(w));
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.FindTensor("v")->offset, 64u);
  EXPECT_EQ(DequantizeGgufTensor(*f.FindTensor("v")), (std::vector<float>{7, 8}));
}

TEST_F(GgufFileTest, TensorInfoRules) {
  auto with = [](auto&& mutate) {
    GgufTestWriter w = Minimal();
    mutate(w.tensors[0]);
    return w;
  };
  using T = GgufTestWriter::Tensor;
  ExpectOpenError(with([](T& t) { t.name = std::string(64, 'n'); }), {"is 64 bytes; ggml allows at most 63"});
  EXPECT_NO_THROW(GgufFile::Open(Write(with([](T& t) { t.name = std::string(63, 'n'); }))));
  GgufTestWriter w = Minimal();
  w.AddF32Tensor("w", {1}, {1});
  ExpectOpenError(w, {"duplicate tensor 'w'"});
  ExpectOpenError(with([](T& t) { t.ne = {1, 1, 1, 1, 6}; }), {"tensor 'w'", "5 dimensions"});
  ExpectOpenError(with([](T& t) { t.ne = {uint64_t{1} << 63}; }), {"tensor 'w'", "negative as int64"});
  ExpectOpenError(with([](T& t) { t.ne = {uint64_t{1} << 32, uint64_t{1} << 32}; }), {"tensor 'w'", "overflows int64"});
  ExpectOpenError(with([](T& t) { t.type = kGgmlF64; t.ne = {uint64_t{1} << 62}; }), {"tensor 'w'", "overflows 64 bits"});
  ExpectOpenError(with([](T& t) { t.type = 99; }), {"tensor 'w'", "unknown ggml type id 99"});
  ExpectOpenError(with([](T& t) { t.type = 4; }), {"tensor 'w'", "unknown ggml type id 4"});  // removed Q4_2
  ExpectOpenError(with([](T& t) { t.type = kGgmlQ8_0; t.ne = {16}; }),
                  {"tensor 'w'", "row length 16 is not a multiple of the Q8_0 block size 32"});
}

TEST_F(GgufFileTest, OffsetRules) {
  GgufTestWriter w = Minimal();
  w.AddF32Tensor("b", {2}, {1, 2});
  w.tensors[1].offset = 40;
  ExpectOpenError(w, {"tensor 'b'", "offset 40 is not a multiple of the alignment 32"});
  w.tensors[1].offset = 1 << 20;
  ExpectOpenError(w, {"tensor 'b'", "beyond the end of the file"});
  w.tensors[1].offset = uint64_t{1} << 63;  // offset + size must not wrap around
  ExpectOpenError(w, {"tensor 'b'", "beyond the end of the file"});
  w.tensors[1].offset = 0;
  ExpectOpenError(w, {"tensors 'b' and 'w' overlap"});
  // Any aligned, in-bounds, disjoint layout is accepted (formats.md 2.3 rule 7 leniency).
  w.tensors[0].offset = 32;
  const GgufFile f = GgufFile::Open(Write(w));
  EXPECT_EQ(DequantizeGgufTensor(*f.FindTensor("b")), (std::vector<float>{0, 1}));  // bytes of 'w'
}

TEST_F(GgufFileTest, TypedGetters) {
  GgufTestWriter w = Minimal();
  w.AddU8("a.u8", 7);
  w.AddI32("a.i32", 9);
  w.AddI32("a.neg", -1);
  w.AddU64("a.big", uint64_t{1} << 40);
  w.AddF32("a.f32", 0.5f);
  w.AddBool("a.bool", true);
  w.AddF32Array("a.floats", {1.5f, 2.5f});
  const fs::path p = Write(w);
  const GgufFile f = GgufFile::Open(p);
  EXPECT_EQ(f.GetU32("a.u8"), 7u);
  EXPECT_EQ(f.GetU32("a.i32"), 9u);
  EXPECT_EQ(f.GetU64("a.big"), uint64_t{1} << 40);
  EXPECT_EQ(f.GetF32("a.f32"), 0.5f);
  EXPECT_TRUE(f.GetBool("a.bool"));
  EXPECT_EQ(f.GetArrayOf<float>("a.floats"), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(f.GetArray("a.floats").element_type(), GgufType::kFloat32);
  EXPECT_EQ(TypeOf(*f.Find("a.u8")), GgufType::kUint8);
  EXPECT_EQ(TypeOf(*f.Find("a.i32")), GgufType::kInt32);
  EXPECT_EQ(TypeOf(*f.Find("a.big")), GgufType::kUint64);
  EXPECT_EQ(TypeOf(*f.Find("a.f32")), GgufType::kFloat32);
  EXPECT_EQ(TypeOf(*f.Find("a.bool")), GgufType::kBool);
  EXPECT_EQ(f.GetU32Or("a.absent", 5), 5u);
  EXPECT_EQ(f.Find("a.absent"), nullptr);
  ExpectError([&] { f.GetU32("a.neg"); }, {p.string(), "key 'a.neg' is negative"});
  ExpectError([&] { f.GetU32("a.big"); }, {"key 'a.big'", "does not fit in 32 bits"});
  ExpectError([&] { f.GetU32("general.architecture"); },
              {"key 'general.architecture' has type STRING, expected an unsigned integer"});
  ExpectError([&] { f.GetString("a.absent"); }, {p.string(), "missing key 'a.absent'"});
  ExpectError([&] { f.GetU32Or("a.f32", 1); }, {"key 'a.f32' has type FLOAT32"});
  ExpectError([&] { f.GetArrayOf<std::string>("a.floats"); },
              {"key 'a.floats' has type ARRAY of FLOAT32, expected ARRAY of STRING"});
  ExpectError([&] { f.GetF32("a.bool"); }, {"key 'a.bool' has type BOOL, expected FLOAT32"});
}

// Every truncation and many single-byte mutations of a valid model: Open and LoadGgufModel may
// only succeed or throw lowbit::Error (run under ASan/UBSan by `make asan`).
TEST_F(GgufFileTest, TruncatedAndMutatedFilesOnlyThrowError) {
  const std::vector<std::byte> good = MakeTinyLlama().writer.Build();
  const uint64_t header = GgufFile::Open(Write(MakeTinyLlama().writer)).data_offset();
  const fs::path p = dir_ / "fuzz.gguf";
  int opened = 0;
  auto attempt = [&](const std::vector<std::byte>& bytes) {
    GgufTestWriter::WriteBytes(p, bytes);
    try {
      GgufFile::Open(p);
      ++opened;
      LoadGgufModel(p);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-Error exception: " << e.what();
    }
  };
  for (uint64_t n = 0; n < good.size(); n += n < header ? 3 : 97)
    attempt({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)});
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::vector<std::byte> bytes = good;
    const uint64_t pos = rng() % (i % 10 == 0 ? bytes.size() : header);
    bytes[pos] = static_cast<std::byte>(rng() % 4 == 0 ? 0xff : rng() & 0xff);
    attempt(bytes);
  }
  EXPECT_GT(opened, 0);
}


}  // namespace
}  // namespace lowbit
