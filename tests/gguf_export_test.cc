// GGUF writing: the writer against our (independently tested) reader, llama-quantize's per-tensor
// type choices worked out by hand from its rules, and whole-model exports of the bundled model read
// back by lowbit's own GGUF loader and tokenizer. llama.cpp itself checks the same files in
// `make test-interop` (tests/interop/gguf_llamacpp.py).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_export.h"
#include "io/gguf_mix.h"
#include "io/gguf_pack.h"
#include "io/gguf_repack.h"
#include "io/gguf_writer.h"
#include "io/imatrix.h"
#include "io/model_loader.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/rotation.h"
#include "pipeline/export_job.h"
#include "quant/rtn.h"
#include "tokenizer/gguf_vocab_export.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
const std::string kModel = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

// A scratch folder per test, removed with everything in it.
using TempDir = testing_util::ScratchDir;

TEST(GgufWriter, RoundTripsEveryValueTypeAndAlignsTensors) {
  TempDir dir("writer");
  const fs::path file = dir / "t.gguf";
  GgufWriter w(file, 64);
  w.Set("general.architecture", std::string("llama"));
  w.Set("u8", uint8_t{7});
  w.Set("i16", int16_t{-3});
  w.Set("u32", uint32_t{123456});
  w.Set("i64", int64_t{-5});
  w.Set("f32", 1.5f);
  w.Set("f64", 2.25);
  w.Set("flag", true);
  w.Set("names", GgufArray{std::vector<std::string>{"a", "", "ccc"}});
  w.Set("scores", GgufArray{std::vector<float>{0.5f, -1}});
  w.Set("types", GgufArray{std::vector<int32_t>{1, 6}});
  const std::vector<float> a = {1, 2, 3}, b(64, 0.25f);
  w.DeclareTensor("a", {3});
  w.DeclareTensor("b", {32, 2});
  w.WriteTensor("a", kGgmlF32, std::as_bytes(std::span(a)));
  w.WriteTensor("b", kGgmlF32, std::as_bytes(std::span(b)));
  const uint64_t committed = w.Commit();
  EXPECT_EQ(committed, fs::file_size(file));
  const GgufFile f = GgufFile::Open(file);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.GetU32("general.alignment"), 64u);
  EXPECT_EQ(std::get<uint8_t>(f.Get("u8")), 7);
  EXPECT_EQ(std::get<int16_t>(f.Get("i16")), -3);
  EXPECT_EQ(f.GetU32("u32"), 123456u);
  EXPECT_EQ(std::get<int64_t>(f.Get("i64")), -5);
  EXPECT_EQ(f.GetF32("f32"), 1.5f);
  EXPECT_EQ(std::get<double>(f.Get("f64")), 2.25);
  EXPECT_TRUE(f.GetBool("flag"));
  EXPECT_EQ(f.GetArrayOf<std::string>("names"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.GetArrayOf<float>("scores"), (std::vector<float>{0.5f, -1}));
  EXPECT_EQ(f.GetArrayOf<int32_t>("types"), (std::vector<int32_t>{1, 6}));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[1].offset % 64, 0u);
  EXPECT_EQ(DequantizeGgufTensor(f.tensors()[0]), a);
  EXPECT_EQ(DequantizeGgufTensor(f.tensors()[1]), b);
  for (const auto& entry : fs::directory_iterator(dir.path())) EXPECT_EQ(entry.path(), file);  // no temp left
}

TEST(GgufWriter, UnwrittenFileLeavesNothingBehind) {
  TempDir dir("abandoned");
  {
    GgufWriter w(dir / "t.gguf");
    w.DeclareTensor("a", {4});
    const std::vector<float> a(4);
    w.WriteTensor("a", kGgmlF32, std::as_bytes(std::span(a)));
  }  // destroyed without Commit, as when an exception unwinds an export
  EXPECT_TRUE(dir.Entries().empty());
}

// llama-quantize's choices for a 6-layer GQA-2 llama, worked out from llama_tensor_get_type_impl:
// use_more_bits(i, 6) holds for i = 2 and 5 (i - 0) % 3 == 2 or i >= 7 * 6 / 8 = 5).
std::map<std::string, uint32_t> Choices(std::string_view type, bool tied = false, bool imatrix = false) {
  GgufTypeChooser chooser(FindGgufFileType(type), GgufMixModel{6, 2, !tied}, false, imatrix);
  std::map<std::string, uint32_t> out;
  auto choose = [&](const std::string& name, std::vector<uint64_t> ne) { out[name] = chooser.Choose(name, ne); };
  choose("token_embd.weight", {256, 4096});
  for (int i = 0; i < 6; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    choose(p + "attn_norm.weight", {256});
    choose(p + "attn_q.weight", {256, 256});
    choose(p + "attn_v.weight", {256, 128});
    choose(p + "attn_output.weight", {256, 256});
    choose(p + "ffn_down.weight", {768, 256});
  }
  if (!tied) choose("output.weight", {256, 4096});
  return out;
}

TEST(GgufMix, FollowsLlamaQuantizeRules) {
  auto q4km = Choices("q4_k_m");  // names are case-insensitive
  EXPECT_EQ(q4km["token_embd.weight"], kGgmlQ4_K);
  EXPECT_EQ(q4km["output.weight"], kGgmlQ6_K);
  EXPECT_EQ(q4km["blk.0.attn_norm.weight"], kGgmlF32);
  for (int i = 0; i < 6; ++i) {
    const uint32_t more = (i == 2 || i == 5) ? kGgmlQ6_K : kGgmlQ4_K;
    EXPECT_EQ(q4km["blk." + std::to_string(i) + ".attn_v.weight"], more) << i;
    EXPECT_EQ(q4km["blk." + std::to_string(i) + ".ffn_down.weight"], more) << i;
    EXPECT_EQ(q4km["blk." + std::to_string(i) + ".attn_q.weight"], kGgmlQ4_K) << i;
  }
  auto q3km = Choices("Q3_K_M");
  EXPECT_EQ(q3km["blk.0.attn_v.weight"], kGgmlQ5_K);
  EXPECT_EQ(q3km["blk.1.attn_v.weight"], kGgmlQ5_K);
  EXPECT_EQ(q3km["blk.2.attn_v.weight"], kGgmlQ4_K);
  EXPECT_EQ(q3km["blk.3.attn_output.weight"], kGgmlQ4_K);
  EXPECT_EQ(q3km["blk.3.ffn_down.weight"], kGgmlQ4_K);
  EXPECT_EQ(q3km["blk.3.attn_q.weight"], kGgmlQ3_K);
  auto q2k = Choices("Q2_K");
  EXPECT_EQ(q2k["blk.0.attn_v.weight"], kGgmlQ3_K);  // n_gqa 2 < 4
  EXPECT_EQ(q2k["blk.0.ffn_down.weight"], kGgmlQ3_K);
  EXPECT_EQ(Choices("Q4_0")["output.weight"], kGgmlQ6_K);
  EXPECT_EQ(Choices("Q8_0")["output.weight"], kGgmlQ8_0);
  EXPECT_EQ(Choices("Q4_0", true)["token_embd.weight"], kGgmlQ6_K);  // tied: the embedding is the output
  EXPECT_EQ(Choices("TQ1_0")["token_embd.weight"], kGgmlQ4_K);
  EXPECT_EQ(Choices("IQ4_XS")["blk.0.ffn_down.weight"], kGgmlIQ4_XS);  // 0 < 6 / 8 is false
  EXPECT_EQ(Choices("BF16")["output.weight"], kGgmlBF16);
  for (const auto& [name, type] : Choices("Q4_K")) EXPECT_EQ(type, name.find("norm") != std::string::npos ? kGgmlF32 : kGgmlQ4_K) << name;
}

// Mixtral-8x7B-shaped (32 layers, GQA 4, 8 experts) under Q4_K_M, from llama_tensor_get_type_impl: the
// router is never quantized, attn_v and attn_k become Q8_0 ("for the 8-expert model, bumping this to Q8_0
// trades just ~128MB"), attn_output Q5_K; ffn_down_exps takes its layer from the name (use_more_bits(i, 32)
// holds for i < 4, i >= 28 and (i - 4) % 3 == 2). A 4-expert model keeps the dense rules.
TEST(GgufMix, EightExpertModelsGetMoreBitsInAttention) {
  GgufTypeChooser mixtral(FindGgufFileType("Q4_K_M"), GgufMixModel{32, 4, true, 8}, false, false);
  EXPECT_EQ(mixtral.Choose("blk.0.ffn_gate_inp.weight", {4096, 8}), kGgmlF32);
  EXPECT_EQ(mixtral.Choose("blk.0.attn_v.weight", {4096, 1024}), kGgmlQ8_0);
  EXPECT_EQ(mixtral.Choose("blk.0.attn_k.weight", {4096, 1024}), kGgmlQ8_0);
  EXPECT_EQ(mixtral.Choose("blk.0.attn_q.weight", {4096, 4096}), kGgmlQ4_K);
  EXPECT_EQ(mixtral.Choose("blk.0.attn_output.weight", {4096, 4096}), kGgmlQ5_K);
  EXPECT_EQ(mixtral.Choose("blk.0.ffn_gate_exps.weight", {4096, 14336, 8}), kGgmlQ4_K);
  EXPECT_EQ(mixtral.Choose("blk.0.ffn_down_exps.weight", {14336, 4096, 8}), kGgmlQ6_K);
  EXPECT_EQ(mixtral.Choose("blk.5.ffn_down_exps.weight", {14336, 4096, 8}), kGgmlQ4_K);
  EXPECT_EQ(mixtral.Choose("blk.6.ffn_down_exps.weight", {14336, 4096, 8}), kGgmlQ6_K);
  GgufTypeChooser four(FindGgufFileType("Q4_K_M"), GgufMixModel{32, 4, true, 4}, false, false);
  EXPECT_EQ(four.Choose("blk.0.attn_k.weight", {4096, 1024}), kGgmlQ4_K);
  EXPECT_EQ(four.Choose("blk.0.attn_output.weight", {4096, 4096}), kGgmlQ4_K);
  EXPECT_EQ(four.Choose("blk.1.attn_v.weight", {4096, 1024}), kGgmlQ6_K);  // the first attn_v: use_more_bits(0, 32)
}

// MXFP4_MOE (gpt-oss's mix, llama_tensor_get_type_impl): the experts' 3-D tensors in MXFP4, every other
// matrix, the output (tied or not) and a 2-D "expert" of a one-expert stack too, in Q8_0; routers and norms F32.
TEST(GgufMix, Mxfp4MoePutsTheExpertsInMxfp4AndTheRestInQ8_0) {
  GgufTypeChooser moe(FindGgufFileType("mxfp4_moe"), GgufMixModel{24, 8, true, 32}, false, false);
  EXPECT_EQ(moe.Choose("blk.0.ffn_gate_exps.weight", {2880, 2880, 32}), kGgmlMXFP4);
  EXPECT_EQ(moe.Choose("blk.0.ffn_down_exps.weight", {2880, 2880, 32}), kGgmlMXFP4);
  EXPECT_EQ(moe.Choose("blk.0.ffn_gate_inp.weight", {2880, 32}), kGgmlF32);
  EXPECT_EQ(moe.Choose("blk.0.attn_v.weight", {2880, 512}), kGgmlQ8_0);
  EXPECT_EQ(moe.Choose("blk.0.ffn_up_shexp.weight", {2880, 2880}), kGgmlQ8_0);
  EXPECT_EQ(moe.Choose("token_embd.weight", {2880, 201088}), kGgmlQ8_0);
  EXPECT_EQ(moe.Choose("output.weight", {2880, 201088}), kGgmlQ8_0);
  EXPECT_EQ(moe.Choose("blk.0.ffn_gate_exps.weight", {2880, 2880, 1}), kGgmlQ8_0);
  EXPECT_EQ(moe.Choose("blk.0.ffn_down_exps.weight", {2900, 2880, 32}), kGgmlF16);  // rows not whole blocks
  EXPECT_EQ(FindGgufFileType("MXFP4_MOE").ftype, 38u);
}

TEST(GgufMix, FallsBackWhereRowsAreNotWholeBlocks) {
  GgufTypeChooser chooser(FindGgufFileType("Q4_K_S"), GgufMixModel{1, 1, true}, false, false);
  EXPECT_EQ(chooser.Choose("blk.0.attn_q.weight", {96, 8}), kGgmlQ5_0);  // 96 = 3 x 32
  EXPECT_EQ(chooser.Choose("blk.0.attn_q.weight", {100, 8}), kGgmlF16);
  GgufTypeChooser q6(FindGgufFileType("Q6_K"), GgufMixModel{1, 1, true}, true, false);
  EXPECT_EQ(q6.Choose("output.weight", {96, 8}), kGgmlQ8_0);
}

// llama-quantize's --token-embedding-type / --output-tensor-type (llama_tensor_get_type): past the mix
// and --pure, even for a float file type, with no fallback; with tied embeddings the embedding's type
// wins over the output's.
TEST(GgufMix, TableTypesOverrideTheMix) {
  const GgufTableTypes both{kGgmlQ5_K, kGgmlQ4_K};
  GgufTypeChooser untied(FindGgufFileType("Q4_K_M"), GgufMixModel{6, 2, true}, false, false, both);
  EXPECT_EQ(untied.Choose("token_embd.weight", {256, 4096}), kGgmlQ5_K);
  EXPECT_EQ(untied.Choose("output.weight", {256, 4096}), kGgmlQ4_K);
  EXPECT_EQ(untied.Choose("blk.0.attn_q.weight", {256, 256}), kGgmlQ4_K);
  EXPECT_EQ(untied.Choose("output_norm.weight", {256}), kGgmlF32);
  GgufTypeChooser pure_f16(FindGgufFileType("F16"), GgufMixModel{6, 2, true}, true, false, both);
  EXPECT_EQ(pure_f16.Choose("token_embd.weight", {256, 4096}), kGgmlQ5_K);
  EXPECT_EQ(pure_f16.Choose("blk.0.attn_q.weight", {256, 256}), kGgmlF16);
  GgufTypeChooser tied(FindGgufFileType("Q4_K_M"), GgufMixModel{6, 2, false}, false, false, both);
  EXPECT_EQ(tied.Choose("token_embd.weight", {256, 4096}), kGgmlQ5_K);
  GgufTypeChooser tied_output(FindGgufFileType("Q4_K_M"), GgufMixModel{6, 2, false}, false, false,
                              GgufTableTypes{std::nullopt, kGgmlQ8_0});
  EXPECT_EQ(tied_output.Choose("token_embd.weight", {256, 4096}), kGgmlQ8_0);
  try {
    untied.Choose("token_embd.weight", {288, 4096});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--token-embedding-type Q5_K: the rows of token_embd.weight hold 288"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(ParseGgufTensorType("q6_k", "--output-tensor-type"), kGgmlQ6_K);
  try {
    ParseGgufTensorType("IQ2_XXS", "--output-tensor-type");  // ggml has it; lowbit does not write it
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--output-tensor-type 'IQ2_XXS': not a ggml type lowbit writes"),
              std::string::npos) << e.what();
  }
}

TEST(GgufMix, UnknownTypeListsTheSupportedOnes) {
  try {
    FindGgufFileType("Q4_K_X");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K_M"), std::string::npos) << e.what();
  }
}

// Our grids that a ggml type holds exactly are written as its blocks bit for bit: reading the blocks
// back (gguf_repack, tested against llama.cpp's decoding) gives the same codes and scales.
TEST(GgufPack, ExactGridsRoundTripBitForBit) {
  std::vector<float> w(6 * 96);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (1 + static_cast<float>(i % 11));
  const std::pair<std::string, uint32_t> grids[] = {{"int4:g32:scale=f16", kGgmlQ4_0}, {"int5:g32:scale=f16", kGgmlQ5_0},
                                                    {"int8:g32:scale=f16", kGgmlQ8_0}, {"iq4_nl:g32:scale=f16", kGgmlIQ4_NL},
                                                    {"mxfp4", kGgmlMXFP4}};
  for (const auto& [scheme, type] : grids) {
    const QuantizedTensor q = QuantizeRtn(w, 6, 96, ParseScheme(scheme), "w");
    ASSERT_EQ(ExactGgufType(q), type) << scheme;
    const uint64_t row_bytes = 3 * FindGgmlType(type)->block_bytes;
    std::vector<std::byte> bytes(6 * row_bytes);
    for (uint64_t r = 0; r < 6; ++r) PackGgufRow(q, r, bytes.data() + r * row_bytes);
    GgufTensorInfo t;
    t.name = "w";
    t.ggml_type = type;
    t.dims = {96, 6};
    t.n_elements = 6 * 96;
    t.data = bytes;
    const QuantizedTensor back = *RepackGgufMatrix(t, 6, 96);
    EXPECT_TRUE(std::ranges::equal(back.codes(), q.codes())) << scheme;
    EXPECT_TRUE(std::ranges::equal(back.scale_bytes(), q.scale_bytes())) << scheme;
  }
  EXPECT_FALSE(ExactGgufType(QuantizeRtn(w, 6, 96, ParseScheme("int4:g32:scale=f32"), "w")).has_value());
  EXPECT_FALSE(ExactGgufType(QuantizeRtn(w, 6, 96, ParseScheme("int4:g32:asym:scale=f16"), "w")).has_value());
}

// A quantized model on a GGUF grid keeps its codes where the mix picks that type (or wherever,
// with keep_source_grids); elsewhere its values are encoded again.
TEST(GgufExport, SourceGridsCarryOverWhereTheMixAgrees) {
  TempDir dir("carry");
  auto quantized = [] {
    StreamedModel s{LoadModel(kModel), nullptr};
    for (LayerWeights& l : s.model.weights.layers)
      for (Linear* lin : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        lin->weight = QuantizeRtn(std::get<DenseMatrix>(lin->weight).values, lin->rows(), lin->cols(),
                                  ParseScheme("int4:g32:scale=f16"), "w");
    return s;
  };
  auto repacked = [&](const std::string& type, bool keep) {
    StreamedModel s = quantized();
    GgufExportOptions o;
    o.type = type;
    o.keep_source_grids = keep;
    o.metadata = GgufVocabularyFor(kModel, s.model.config);
    size_t n = 0;
    for (const GgufExportedTensor& t : ExportGguf(s, dir / "m.gguf", o).tensors) n += t.repacked;
    return n;
  };
  EXPECT_EQ(repacked("Q4_0", false), 42u);
  EXPECT_EQ(repacked("Q8_0", false), 0u);
  EXPECT_EQ(repacked("Q8_0", true), 42u);
  EXPECT_EQ(GgufFile::Open(dir / "m.gguf").FindTensor("blk.0.attn_q.weight")->ggml_type, kGgmlQ4_0);
}

std::vector<float> Logits(const Model& m, const std::vector<int32_t>& ids) {
  Engine engine(m, 2);
  KvCache cache = engine.NewCache(ids.size());
  return engine.Forward(cache, ids, true);
}

// Export options of type `type` with the bundled model's vocabulary.
GgufExportOptions BundledOptions(const std::string& type) {
  GgufExportOptions o;
  o.type = type;
  o.metadata = GgufVocabularyFor(kModel, ReadHfConfig(kModel + "/config.json"));
  return o;
}

// A rotated model's down_proj expects its input through an online Hadamard that llama.cpp does not run: the
// export is refused by tensor name, and no file is left (it ran as a different model, PPL 10,089 against 76).
TEST(GgufExport, RotatedModelIsRefused) {
  TempDir dir("rotated");
  StreamedModel rotated{LoadModel(kModel), nullptr};
  RotateModel(rotated.model, 1);
  testing_util::ExpectError([&] { (void)ExportGguf(rotated, dir / "m.gguf", BundledOptions("Q8_0")); },
                            {"blk.0.ffn_down.weight", "online Hadamard rotation of its input", "llama.cpp does not run"});
  EXPECT_TRUE(dir.Entries().empty());
}

// The F32 export is the same model: llama.cpp's Q/K permutation and adjacent-pair RoPE give the
// Hugging Face model's logits, and the written vocabulary tokenizes as the tokenizer.model does.
TEST(GgufExport, F32FileIsTheSameModelAndVocabulary) {
  TempDir dir("f32");
  StreamedModel hf = OpenModel(kModel);
  GgufExportOptions o = BundledOptions("F32");
  const GgufExportResult r = ExportGguf(hf, dir / "m.gguf", o);
  EXPECT_EQ(r.architecture, "llama");
  EXPECT_EQ(r.file_bytes, fs::file_size(dir / "m.gguf"));

  const GgufFile f = GgufFile::Open(dir / "m.gguf");
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetU32("general.quantization_version"), 2u);
  EXPECT_EQ(f.GetU32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.GetBool("tokenizer.ggml.add_bos_token"));

  const Model original = LoadModel(kModel), exported = LoadModel(dir / "m.gguf");
  EXPECT_EQ(exported.config.rope_style, RopeStyle::kAdjacent);
  const std::unique_ptr<Tokenizer> sp = LoadTokenizer(kModel), gguf = LoadTokenizer(dir / "m.gguf");
  const std::string text = "And God said, Let there be light: and there was light. 1611 AD!";
  const std::vector<int32_t> ids = sp->Encode(text, true);
  EXPECT_EQ(gguf->Encode(text, true), ids);
  const std::vector<float> a = Logits(original, ids), b = Logits(exported, ids);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max<double>(max_diff, std::abs(a[i] - b[i]));
    max_abs = std::max<double>(max_abs, std::abs(a[i]));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs);

  // Re-exporting the GGUF (already in llama.cpp's row order) gives the same tensor bytes.
  StreamedModel again = OpenModel(dir / "m.gguf");
  o.metadata = GgufVocabularyFor(dir / "m.gguf", again.model.config);
  ExportGguf(again, dir / "again.gguf", o);
  const GgufFile g = GgufFile::Open(dir / "again.gguf");
  ASSERT_EQ(g.tensors().size(), f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& x = f.tensors()[i].data;
    const auto& y = g.tensors()[i].data;
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << f.tensors()[i].name;
  }
}

// A Qwen2-shaped model (the bundled weights plus q/k/v biases) exports as llama.cpp's `qwen2`:
// no Q/K permutation, rotate-half RoPE, biases; lowbit reads it back to the same logits.
TEST(GgufExport, Qwen2KeepsRowOrderAndBiases) {
  TempDir dir("qwen2");
  StreamedModel s{LoadModel(kModel), nullptr};
  Model& m = s.model;
  m.config.architecture = "Qwen2ForCausalLM";
  m.config.qkv_bias = true;
  for (LayerWeights& l : m.weights.layers)
    for (Linear* lin : {&l.wq, &l.wk, &l.wv}) {
      lin->bias.resize(lin->rows());
      for (size_t i = 0; i < lin->bias.size(); ++i) lin->bias[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    }
  const std::vector<float> expected = Logits(m, {1, 1040, 261, 2108, 300});
  GgufExportOptions o;
  o.type = "F32";
  o.metadata = GgufVocabularyFor(kModel, m.config);
  EXPECT_EQ(ExportGguf(s, dir / "q.gguf", o).architecture, "qwen2");
  const GgufFile f = GgufFile::Open(dir / "q.gguf");
  EXPECT_EQ(f.GetU32("qwen2.block_count"), 6u);
  EXPECT_EQ(f.Find("llama.block_count"), nullptr);
  ASSERT_NE(f.FindTensor("blk.3.attn_k.bias"), nullptr);
  const Model back = LoadModel(dir / "q.gguf");
  EXPECT_EQ(back.config.rope_style, RopeStyle::kHalf);
  const std::vector<float> got = Logits(back, {1, 1040, 261, 2108, 300});
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << i;  // same weights, same order
}

TEST(GgufExport, QuantizedMixReadsBackWithItsTypes) {
  TempDir dir("q4km");
  StreamedModel hf = OpenModel(kModel);
  GgufExportOptions o = BundledOptions("Q4_K_M");
  const GgufExportResult r = ExportGguf(hf, dir / "m.gguf", o);
  const GgufFile f = GgufFile::Open(dir / "m.gguf");
  EXPECT_EQ(f.GetU32("general.file_type"), 15u);
  ASSERT_EQ(r.tensors.size(), f.tensors().size());
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    EXPECT_EQ(f.tensors()[i].name, r.tensors[i].name);
    EXPECT_EQ(f.tensors()[i].ggml_type, r.tensors[i].ggml_type) << r.tensors[i].name;
  }
  EXPECT_EQ(f.FindTensor("output.weight")->ggml_type, kGgmlQ6_K);
  EXPECT_NEAR(r.bits_per_weight(), 5.08, 0.01);  // Q4_K 4.5 bpw + Q6_K output and 4 more bits elsewhere
  const Model m = LoadModel(dir / "m.gguf");
  const std::vector<float> logits = Logits(m, {1, 1040, 261, 2108});
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// GPTQ onto the ggml grids (a calibrated GGUF): the file reads back with the mix's types, and its
// logits are closer to the full-precision model's than llama-quantize's encoding of the same types.
TEST(GgufExport, CalibratedFileBeatsDirectEncoding) {
  TempDir dir("calibrated");
  const Model original = LoadModel(kModel);
  const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer(kModel);
  const std::vector<int32_t> text = tokenizer->Encode(
      "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, When any man of "
      "you bring an offering unto the LORD, ye shall bring your offering of the cattle, even of the herd, and of the "
      "flock. If his offering be a burnt sacrifice of the herd, let him offer a male without blemish.", true);
  std::vector<std::vector<int32_t>> windows;
  for (size_t start = 0; start + 24 <= text.size(); start += 8) windows.emplace_back(text.begin() + start, text.begin() + start + 24);
  const std::vector<float> reference = Logits(original, text);
  auto error = [&](const Model& m) {
    const std::vector<float> got = Logits(m, text);
    double sq = 0;
    for (size_t i = 0; i < got.size(); ++i) sq += (got[i] - reference[i]) * (got[i] - reference[i]);
    return sq;
  };
  for (const char* type : {"Q4_K_M", "Q4_0"}) {
    GgufExportOptions o;
    o.type = type;
    o.metadata = GgufVocabularyFor(kModel, original.config);
    StreamedModel direct = OpenModel(kModel);
    ExportGguf(direct, dir / "direct.gguf", o);
    o.calibration = windows;
    StreamedModel calibrated = OpenModel(kModel);
    const GgufExportResult r = ExportGguf(calibrated, dir / "calibrated.gguf", o);
    size_t gptq = 0;
    for (const GgufExportedTensor& t : r.tensors) gptq += t.gptq;
    EXPECT_EQ(gptq, 6u * 7 + 1) << type;  // every decoder linear and the output matrix
    const GgufFile a = GgufFile::Open(dir / "direct.gguf"), b = GgufFile::Open(dir / "calibrated.gguf");
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (const GgufTensorInfo& t : a.tensors()) EXPECT_EQ(t.ggml_type, b.FindTensor(t.name)->ggml_type) << t.name;
    const double e_direct = error(LoadModel(dir / "direct.gguf")), e_calibrated = error(LoadModel(dir / "calibrated.gguf"));
    EXPECT_LT(e_calibrated, 0.8 * e_direct) << type << ": calibrated " << e_calibrated << ", direct " << e_direct;
  }
}

TEST(GgufExport, BadInputIsAClearError) {
  TempDir dir("bad");
  StreamedModel hf = OpenModel(kModel);
  GgufExportOptions o;
  o.type = "Q9_K";
  EXPECT_THROW(ExportGguf(hf, dir / "m.gguf", o), Error);
  std::map<std::string, std::vector<float>, std::less<>> im = {{"blk.0.attn_q.weight", std::vector<float>(3, 1.0f)}};
  o.type = "Q4_K_M";
  o.imatrix = &im;
  try {
    ExportGguf(hf, dir / "m.gguf", o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.Entries().empty());  // never a partial file
  EXPECT_THROW(GgufVocabularyFor(dir.path(), hf.model.config), Error);  // no tokenizer there
  // A missing tokenizer is found before the model is read: the error names it, not the (missing) model.
  ExportJob job;
  job.model = (dir / "no-model").string();
  job.out = (dir / "m.gguf").string();
  job.tokenizer = (dir / "no-tokenizer.model").string();
  try {
    (void)RunExportJob(job);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), job.tokenizer + ": no such file or folder");
  }
}

TEST(Imatrix, RoundTripsAsLlamaCppReadsIt) {
  TempDir dir("imatrix");
  std::map<std::string, ImatrixEntry, std::less<>> entries;
  entries["blk.0.ffn_down.weight"] = {{2, 4, 6, 8}, {2}};
  entries["blk.0.attn_q.weight"] = {{1, 0}, {0}};  // no tokens: llama.cpp reads ones
  WriteImatrix(dir / "im.gguf", entries, {"kjv-train.txt"}, 3, 256);
  const GgufFile f = GgufFile::Open(dir / "im.gguf");
  EXPECT_EQ(f.GetString("general.type"), "imatrix");
  ASSERT_NE(f.FindTensor("blk.0.ffn_down.weight.in_sum2"), nullptr);
  const ImportanceMatrix m = ReadImatrix(dir / "im.gguf");
  EXPECT_EQ(m.columns.at("blk.0.ffn_down.weight"), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(m.columns.at("blk.0.attn_q.weight"), (std::vector<float>{1, 1}));
  EXPECT_EQ(m.datasets, std::vector<std::string>{"kjv-train.txt"});
  EXPECT_EQ(m.chunk_count, 3u);
  EXPECT_EQ(m.chunk_size, 256u);
  EXPECT_THROW(ReadImatrix(dir / "missing.gguf"), Error);
}

}  // namespace
}  // namespace lowbit
