// Hostile checkpoints (issue 18): every tensor of a checkpoint is used or reported, shapes agree
// with config.json, an lm_head beside tie_word_embeddings is never silently dropped (nor silently
// missing), NaN / Inf weights are errors unless --allow-nonfinite -- each an exact message naming the file, the
// tensor and the config field, from the library and from the CLI (exit 1, no output left).
// Also the sweep of stale `OUT.tmp-<pid>` temporaries left by killed runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "io/hf_model.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/quantize_weights.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::RunLowbit;

const fs::path kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

// The tensors of a fixture: views into the bundled model plus buffers made by the test.
class Tensors {
 public:
  explicit Tensors(const SafetensorsFile& source) {
    for (const TensorView& t : source.tensors()) list.push_back({t.name, t.dtype, t.shape, t.data});
  }
  TensorToWrite& operator[](const std::string& name) {
    for (TensorToWrite& t : list)
      if (t.name == name) return t;
    throw std::logic_error("no tensor " + name);
  }
  // Replaces (or adds) `name` with fp32 `values`.
  void SetF32(const std::string& name, std::vector<uint64_t> shape, const std::vector<float>& values) {
    const auto bytes = std::as_bytes(std::span(values));
    owned_.emplace_back(bytes.begin(), bytes.end());
    Put({name, DType::kF32, std::move(shape), owned_.back()});
  }
  // The fp32 values of `name` (the bundled model is F32).
  std::vector<float> F32(const std::string& name) {
    const TensorToWrite& t = (*this)[name];
    std::vector<float> v(t.data.size() / 4);
    std::memcpy(v.data(), t.data.data(), t.data.size());
    return v;
  }
  // Stores `name` as BF16 (fp32 values truncated).
  void ToBf16(const std::string& name, const std::vector<float>& values) {
    std::vector<std::byte> b(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(values[i]) >> 16);
      std::memcpy(&b[2 * i], &h, 2);
    }
    owned_.push_back(std::move(b));
    TensorToWrite& t = (*this)[name];
    t.dtype = DType::kBF16;
    t.data = owned_.back();
  }
  void Remove(const std::string& name) { std::erase_if(list, [&](const TensorToWrite& t) { return t.name == name; }); }

  std::vector<TensorToWrite> list;

 private:
  void Put(TensorToWrite t) {
    Remove(t.name);
    list.push_back(std::move(t));
  }
  std::deque<std::vector<std::byte>> owned_;
};

class ModelConsistencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lowbit_consistency_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of the bundled model with its tensors and config.json edited.
  fs::path Fixture(const std::string& name, const std::function<void(Tensors&)>& edit,
                   const std::function<void(json&)>& edit_config = nullptr) {
    const fs::path out = dir_ / name;
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(kModelDir))
      if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), out / e.path().filename());
    const SafetensorsFile st = SafetensorsFile::Open(kModelDir / "model.safetensors");
    Tensors tensors(st);
    edit(tensors);
    WriteSafetensors(out / "model.safetensors", tensors.list, st.metadata());
    if (edit_config) {
      json config = json::parse(ReadTextFile(kModelDir / "config.json"));
      edit_config(config);
      WriteFileAtomic(out / "config.json", config.dump(2));
    }
    return out;
  }

  // The library's error and the CLI's: exit 1, the same message, and no output folder or
  // temporary left by a quantize of the model.
  void ExpectRefused(const fs::path& model, const std::string& message) {
    try {
      (void)LoadHfModel(model);
      ADD_FAILURE() << "no error loading " << model;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
    const fs::path out = dir_ / "out";
    const auto r = RunLowbit("quantize " + model.string() + " -o " + out.string() + " --format int4:g32");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find("out"), std::string::npos) << e.path();
  }

  fs::path dir_;
};

TEST_F(ModelConsistencyTest, BlocksPastNumHiddenLayersAreAnError) {
  const fs::path m = Fixture("deep", [](Tensors&) {}, [](json& c) { c["num_hidden_layers"] = 4; });
  ExpectRefused(m, (m / "model.safetensors").string() +
                       ": tensor 'model.layers.4.input_layernorm.weight' belongs to block 4, but " +
                       (m / "config.json").string() +
                       ": num_hidden_layers is 4; the checkpoint and its config.json disagree on the model's depth");
}

TEST_F(ModelConsistencyTest, AWeightTheConfigHasNoPlaceForIsAnError) {
  // A q_proj bias under attention_bias false (transformers would use it with attention_bias true).
  const fs::path m = Fixture("bias", [](Tensors& t) {
    t.SetF32("model.layers.0.self_attn.q_proj.bias", {256}, std::vector<float>(256, 0.5f));
  });
  ExpectRefused(m, (m / "model.safetensors").string() +
                       ": tensor 'model.layers.0.self_attn.q_proj.bias' is not part of a LlamaForCausalLM model as " +
                       (m / "config.json").string() + " describes it, and would be ignored");
}

TEST_F(ModelConsistencyTest, OtherUnusedTensorsAreAWarningListingThem) {
  const fs::path m = Fixture("extra", [](Tensors& t) {
    for (int i = 0; i < 6; ++i)
      t.SetF32("model.layers." + std::to_string(i) + ".self_attn.rotary_emb.inv_freq", {16}, std::vector<float>(16, 1));
    t.SetF32("mtp_head.weight", {4}, std::vector<float>(4, 1));
  });
  ::testing::internal::CaptureStderr();
  const Model loaded = LoadHfModel(m);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "lowbit: warning: " + m.string() +
                     ": 7 tensors are not used by a LlamaForCausalLM model, ignored: "
                     "model.layers.0.self_attn.rotary_emb.inv_freq, model.layers.1.self_attn.rotary_emb.inv_freq, "
                     "model.layers.2.self_attn.rotary_emb.inv_freq, model.layers.3.self_attn.rotary_emb.inv_freq, "
                     "model.layers.4.self_attn.rotary_emb.inv_freq and 2 more\n");
  EXPECT_EQ(loaded.config.n_layers, 6u);
}

TEST_F(ModelConsistencyTest, ShapesAreCheckedAgainstTheConfigBeforeLoading) {
  const fs::path m = Fixture("narrow", [](Tensors&) {}, [](json& c) { c["intermediate_size"] = 512; });
  ExpectRefused(m, (m / "model.safetensors").string() +
                       ": tensor 'model.layers.0.mlp.down_proj.weight' has shape [256, 768], expected [256, 512] from " +
                       (m / "config.json").string());
  // A flattened norm: the right number of values, the wrong shape.
  const fs::path flat = Fixture("flat", [](Tensors& t) { t["model.norm.weight"].shape = {1, 256}; });
  ExpectRefused(flat, (flat / "model.safetensors").string() + ": tensor 'model.norm.weight' has shape [1, 256], "
                      "expected [256] from " + (flat / "config.json").string());
}

TEST_F(ModelConsistencyTest, TiedEmbeddingsBesideADifferentLmHeadAreAnError) {
  const auto tie = [](json& c) { c["tie_word_embeddings"] = true; };
  const fs::path m = Fixture("tied", [](Tensors&) {}, tie);
  ExpectRefused(m, (m / "model.safetensors").string() +
                       ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but " +
                       (m / "config.json").string() +
                       ": tie_word_embeddings is true, so the lm_head would be ignored; set tie_word_embeddings to "
                       "false to use it, or drop the tensor");
  // A copy of the embeddings (as some exports store it, even in another dtype) is what tying means.
  const fs::path same = Fixture("tied_same", [](Tensors& t) {
    std::vector<float> embed = t.F32("model.embed_tokens.weight");
    for (float& x : embed) x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);  // bf16-exact
    t.SetF32("model.embed_tokens.weight", {4096, 256}, embed);
    t.SetF32("lm_head.weight", {4096, 256}, embed);
    t.ToBf16("lm_head.weight", embed);
  }, tie);
  const Model loaded = LoadHfModel(same);
  EXPECT_EQ(std::get<DenseMatrix>(loaded.weights.lm_head.weight).values, loaded.weights.embed.Widened());
  // Without the tensor, tying uses the embeddings as before.
  const fs::path none = Fixture("tied_none", [](Tensors& t) { t.Remove("lm_head.weight"); }, tie);
  EXPECT_EQ(std::get<DenseMatrix>(LoadHfModel(none).weights.lm_head.weight).values, LoadHfModel(none).weights.embed.Widened());
  // Untied without an lm_head: the embeddings too (llama.cpp's fallback), but said, naming the config key.
  const fs::path untied = Fixture("untied_none", [](Tensors& t) { t.Remove("lm_head.weight"); });
  ::testing::internal::CaptureStderr();
  const Model fallback = LoadHfModel(untied);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find((untied / "config.json").string() + ": tie_word_embeddings is false but the checkpoint has no "
                         "lm_head.weight"), std::string::npos) << warning;
  EXPECT_EQ(std::get<DenseMatrix>(fallback.weights.lm_head.weight).values, fallback.weights.embed.Widened());
}

// Tied to a 16-bit table, the runtime's output matrix is that table in 16 bits (keep_16bit), not a
// widened fp32 copy beside it: the same numbers, half the bytes read per decode step.
TEST_F(ModelConsistencyTest, ATiedSixteenBitTableIsTheRuntimesOutputMatrixAsStored) {
  std::vector<float> exact;
  const fs::path m = Fixture("tied_bf16", [&](Tensors& t) {
    exact = t.F32("model.embed_tokens.weight");
    for (float& x : exact) x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);  // bf16-exact
    t.ToBf16("model.embed_tokens.weight", exact);
    t.Remove("lm_head.weight");
  }, [](json& c) { c["tie_word_embeddings"] = true; });
  const Model runtime = LoadHfModel(m, LoadOptions{.keep_16bit = true}), widened = LoadHfModel(m);
  const auto* head = std::get_if<QuantizedTensor>(&runtime.weights.lm_head.weight);
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(IsPlainFloat(*head));
  EXPECT_EQ(head->storage_bytes(), exact.size() * 2);
  EXPECT_EQ(head->Dequantize(), exact);
  EXPECT_EQ(std::get<DenseMatrix>(widened.weights.lm_head.weight).values, exact);  // quantize and export widen
  const std::vector<int32_t> ids = {1, 4095, 17, 1000};
  Engine a(runtime, 1), b(widened, 1);
  KvCache ca = a.NewCache(ids.size()), cb = b.NewCache(ids.size());
  const std::vector<float> got = a.Forward(ca, ids, true), want = b.Forward(cb, ids, true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
}

// A 16-bit embedding table stays 16-bit in memory (half the bytes of fp32), and the model computes
// exactly what the same values stored as F32 compute; a quantized checkpoint keeps it 16-bit on disk.
TEST_F(ModelConsistencyTest, SixteenBitEmbeddingsStayPackedAndComputeTheSame) {
  std::vector<float> exact;
  const fs::path wide = Fixture("embed_f32", [&](Tensors& t) {
    exact = t.F32("model.embed_tokens.weight");
    for (float& x : exact) x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);  // bf16-exact
    t.SetF32("model.embed_tokens.weight", {4096, 256}, exact);
  });
  const fs::path narrow = Fixture("embed_bf16", [&](Tensors& t) { t.ToBf16("model.embed_tokens.weight", exact); });
  const Model a = LoadHfModel(wide), b = LoadHfModel(narrow);
  EXPECT_FALSE(a.weights.embed.packed);
  ASSERT_TRUE(b.weights.embed.packed);
  EXPECT_EQ(b.weights.embed.storage_bytes(), 4096u * 256 * 2);
  EXPECT_EQ(b.weights.embed.Widened(), exact);
  const std::vector<int32_t> ids = {1, 4095, 17, 1000};
  Engine ea(a, 1), eb(b, 1);
  KvCache ca = ea.NewCache(ids.size()), cb = eb.NewCache(ids.size());
  EXPECT_EQ(ea.Forward(ca, ids, true), eb.Forward(cb, ids, true));

  const fs::path out = dir_ / "quantized";
  const auto r = RunLowbit("quantize " + narrow.string() + " --format int4:g64 -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(SafetensorsFile::Open(out / "model.safetensors").Get("model.embed_tokens.weight").dtype, DType::kBF16);
  const Model q = LoadHfModel(out);
  ASSERT_TRUE(q.weights.embed.packed);
  EXPECT_EQ(q.weights.embed.Widened(), exact);

  // The 16-bit table is checked for NaN / Inf as the widened one is.
  std::vector<float> bad = exact;
  bad[70001] = std::numeric_limits<float>::infinity();
  const fs::path inf = Fixture("embed_inf", [&](Tensors& t) { t.ToBf16("model.embed_tokens.weight", bad); });
  try {
    (void)LoadHfModel(inf);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (inf / "model.safetensors").string() +
                                         ": tensor 'model.embed_tokens.weight' has a non-finite value (inf) at element "
                                         "70001; the model would compute NaN (pass --allow-nonfinite to load it anyway)");
  }
}

// keep_16bit (the runtime commands' loads): a BF16 linear stays a plain bf16 tensor, bit for bit the
// file's; quantizing it in memory widens it first, so RTN gives the codes it gives on the fp32 load.
TEST_F(ModelConsistencyTest, SixteenBitLinearsStayPackedForTheRuntime) {
  const std::string down = "model.layers.2.mlp.down_proj.weight";
  std::vector<float> exact;
  const fs::path m = Fixture("down_bf16", [&](Tensors& t) {
    exact = t.F32(down);
    for (float& x : exact) x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);
    t.ToBf16(down, exact);
  });
  Model packed = LoadHfModel(m, LoadOptions{.keep_16bit = true});
  Model widened = LoadHfModel(m);
  const auto* q = std::get_if<QuantizedTensor>(&packed.weights.layers[2].w_down.weight);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(IsPlainFloat(*q));
  EXPECT_EQ(q->storage_bytes(), exact.size() * 2);
  EXPECT_EQ(q->Dequantize(), exact);
  EXPECT_EQ(std::get<DenseMatrix>(widened.weights.layers[2].w_down.weight).values, exact);
  EXPECT_FALSE(packed.weights.layers[1].w_down.quantized());  // F32 tensors are as before
  QuantizeLinears(packed.weights, ParseScheme("int4:g64"));
  QuantizeLinears(widened.weights, ParseScheme("int4:g64"));
  const auto& a = std::get<QuantizedTensor>(packed.weights.layers[2].w_down.weight);
  const auto& b = std::get<QuantizedTensor>(widened.weights.layers[2].w_down.weight);
  EXPECT_TRUE(std::ranges::equal(a.codes(), b.codes()));
  EXPECT_TRUE(std::ranges::equal(a.scale_bytes(), b.scale_bytes()));
}

TEST_F(ModelConsistencyTest, NonFiniteWeightsAreAnErrorUnlessAllowed) {
  const std::string up = "model.layers.2.mlp.up_proj.weight";
  const fs::path m = Fixture("nan", [&](Tensors& t) {
    std::vector<float> v = t.F32(up);
    v[70001] = std::numeric_limits<float>::quiet_NaN();  // past the first converted piece
    t.SetF32(up, {768, 256}, v);
  });
  const std::string message = (m / "model.safetensors").string() + ": tensor '" + up +
                              "' has a non-finite value (nan) at element 70001; the model would compute NaN (pass "
                              "--allow-nonfinite to load it anyway)";
  ExpectRefused(m, message);
  for (const char* command : {"ppl --text data/kjv-test.txt", "generate --prompt x -n 1"}) {
    const auto r = RunLowbit(std::string(command) + " --model " + m.string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  }
  const Model allowed = LoadHfModel(m, LoadOptions{.allow_nonfinite = true});
  EXPECT_TRUE(std::isnan(std::get<DenseMatrix>(allowed.weights.layers[2].w_up.weight).values[70001]));
  // The flag gets the model past the loader; the quantizer then refuses the NaN on its own terms.
  const auto r = RunLowbit("quantize " + m.string() + " -o " + (dir_ / "allowed").string() +
                           " --format int8:channel --allow-nonfinite");
  EXPECT_EQ(r.out.find(message), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor 'model.layers.2.mlp.up_proj': non-finite value nan"), std::string::npos) << r.out;
  const auto g = RunLowbit("generate --prompt x -n 1 --allow-nonfinite --model " + m.string());
  EXPECT_EQ(g.out.find(message), std::string::npos) << g.out;

  // BF16 is checked while it is converted; an Inf in a norm too.
  const fs::path bf16 = Fixture("inf_bf16", [&](Tensors& t) {
    std::vector<float> v = t.F32("model.layers.1.self_attn.o_proj.weight");
    v[3] = -std::numeric_limits<float>::infinity();
    t.ToBf16("model.layers.1.self_attn.o_proj.weight", v);
  });
  ExpectRefused(bf16, (bf16 / "model.safetensors").string() +
                          ": tensor 'model.layers.1.self_attn.o_proj.weight' has a non-finite value (-inf) at element 3; "
                          "the model would compute NaN (pass --allow-nonfinite to load it anyway)");
}

// Overwrites bytes of tensor `name` in a single-file safetensors checkpoint, at `offset` into its
// data, after checking its dtype (so a renamed or retyped tensor fails here, not silently).
void PatchTensorBytes(const fs::path& file, const std::string& name, const std::string& dtype, uint64_t offset,
                      std::string_view bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;
  f.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const json h = json::parse(header);
  ASSERT_EQ(h[name]["dtype"], dtype);
  f.seekp(static_cast<std::streamoff>(8 + header_bytes + h[name]["data_offsets"][0].get<uint64_t>() + offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Loading `folder` fails with exactly `message`.
void ExpectLoadError(const fs::path& folder, const std::string& message) {
  try {
    (void)LoadHfModel(folder);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// A quantized checkpoint's scales are weights too: an Inf scale (here patched into a lowbit folder's
// F16 weight_scale) is refused naming the file, the tensor and the cell.
TEST_F(ModelConsistencyTest, NonFiniteQuantizedScalesAreAnErrorUnlessAllowed) {
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("int4:g64"));
  const fs::path out = dir_ / "quantized";
  SaveQuantizedModel(m, out, kModelDir, json::object());
  const std::string name = "model.layers.3.mlp.down_proj.weight_scale";
  PatchTensorBytes(out / "model.safetensors", name, "F16", 2 * 5, std::string("\x00\x7c", 2));  // cell 5: fp16 +inf
  const std::string message = (out / "model.safetensors").string() + ": tensor '" + name +
                              "' has a non-finite scale (inf) in scale cell 5; the model would compute NaN (pass "
                              "--allow-nonfinite to load it anyway)";
  ExpectLoadError(out, message);
  const auto r = RunLowbit("ppl --text data/kjv-test.txt --model " + out.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  const Model allowed = LoadHfModel(out, LoadOptions{.allow_nonfinite = true});
  EXPECT_TRUE(std::isinf(std::get<QuantizedTensor>(allowed.weights.layers[3].w_down.weight).Scale(5)));
}

// FP8 codes can be NaN themselves (E4M3's 0x7f): one patched into a saved FP8 weight is refused
// naming the file, the tensor, the code and the element.
TEST_F(ModelConsistencyTest, NanFp8CodesAreAnErrorUnlessAllowed) {
  Model m = LoadHfModel(kModelDir);
  QuantizeLinears(m.weights, ParseScheme("fp8_e4m3:channel"));
  const fs::path out = dir_ / "fp8";
  SaveQuantizedModel(m, out, kModelDir, json::object());
  const std::string name = "model.layers.2.self_attn.o_proj.weight_packed";  // one byte per code
  PatchTensorBytes(out / "model.safetensors", name, "U8", 77, "\x7f");
  ExpectLoadError(out, (out / "model.safetensors").string() + ": tensor '" + name +
                           "' has a non-finite code (nan, 0x7f) at element 77; the model would compute NaN (pass "
                           "--allow-nonfinite to load it anyway)");
  const Model allowed = LoadHfModel(out, LoadOptions{.allow_nonfinite = true});
  EXPECT_TRUE(std::isnan(std::get<QuantizedTensor>(allowed.weights.layers[2].wo.weight).Dequantize()[77]));
}

TEST_F(ModelConsistencyTest, NonFiniteWeightsInALlama2cFile) {
  const fs::path src = LOWBIT_SOURCE_DIR "/../shared/models/stories260K/stories260K.bin";
  if (!fs::exists(src)) GTEST_SKIP() << "../shared is not available";
  std::string bytes = ReadTextFile(src);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + 7 * 4 + 5 * 4, &inf, 4);  // after the 7-int header: embedding element 5
  const fs::path m = dir_ / "m.bin";
  WriteFileAtomic(m, bytes);
  try {
    (void)LoadModel(m);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), m.string() + ": tensor 'embedding' has a non-finite value (inf) at element 5; the "
                                                  "model would compute NaN (pass --allow-nonfinite to load it anyway)");
  }
  EXPECT_TRUE(std::isinf(LoadModel(m, LoadOptions{.allow_nonfinite = true}).weights.embed.values[5]));
}

// A pid that is gone: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST_F(ModelConsistencyTest, StaleTemporariesOfDeadProcessesAreSwept) {
  const std::string dead = std::to_string(DeadPid()), live = std::to_string(::getppid());
  const fs::path file = dir_ / "f.json";
  for (const std::string& pid : {dead, live}) WriteFileAtomic(dir_ / ("f.json.tmp-" + pid), "partial");
  WriteFileAtomic(dir_ / ("f.jsonx.tmp-" + dead), "another file's");
  WriteFileAtomic(file, "{}");
  EXPECT_FALSE(fs::exists(dir_ / ("f.json.tmp-" + dead)));
  EXPECT_TRUE(fs::exists(dir_ / ("f.json.tmp-" + live))) << "a live writer's temporary stays";
  EXPECT_TRUE(fs::exists(dir_ / ("f.jsonx.tmp-" + dead)));
  RemoveStaleTemporariesIn(dir_);
  EXPECT_FALSE(fs::exists(dir_ / ("f.jsonx.tmp-" + dead)));
  EXPECT_TRUE(fs::exists(dir_ / ("f.json.tmp-" + live)));

  // A quantized folder's: the run that targets the same OUT removes a dead run's half-written one.
  const fs::path out = dir_ / "q";
  fs::create_directories(out.string() + ".tmp-" + dead);
  WriteFileAtomic(fs::path(out.string() + ".tmp-" + dead) / "model.safetensors", "half");
  fs::create_directories(out.string() + ".tmp-" + live);
  const auto r = RunLowbit("quantize models/kjv-llama-7m -o " + out.string() + " --format int4:g32 --stop-after 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(out.string() + ".tmp-" + dead));
  EXPECT_TRUE(fs::exists(out.string() + ".tmp-" + live));
  EXPECT_TRUE(fs::exists(out.string() + ".partial/progress.json"));
}

}  // namespace
}  // namespace lowbit
