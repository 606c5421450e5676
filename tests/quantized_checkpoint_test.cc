// Quantized checkpoints: save a quantized kjv-llama-7m, load it back through LoadHfModel, and
// demand that nothing changed -- the same bytes in every quantized tensor and bitwise-equal
// logits -- plus the error paths: refused outputs, corrupted files, foreign checkpoints.
#include "io/quantized_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "io/hf_model.h"
#include "test_util.h"
#include "io/checkpoint_folder.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/quantize_weights.h"
#include "quant/registry.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModelDir = LOWBIT_SOURCE_DIR "/models/kjv-llama-7m";

const Model& BaseModel() {
  static const Model model = LoadHfModel(kModelDir);
  return model;
}

Model Quantized(const std::string& scheme) {
  Model m = BaseModel();
  QuantizeLinears(m.weights, ParseScheme(scheme));
  return m;
}

json Recipe(const std::string& scheme) {
  return {{"method", "rtn"}, {"format", scheme}, {"seed", 0}, {"per_tensor_error", {{"layers.0.q_proj", 1.5e-5}}}};
}

// A fresh scratch folder per test, removed afterwards.
class Scratch : public testing_util::ScratchDir {
 public:
  Scratch() : ScratchDir("lowbit-qckpt-test") {}
};

std::vector<float> Logits(const Model& m) {
  Engine engine(m, 1);
  KvCache cache = engine.NewCache(16);
  const std::vector<int32_t> ids = {1, 1040, 261, 2108, 391, 3554, 261, 736};
  return engine.Forward(cache, ids, /*all_logits=*/true);
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

template <class T>
std::vector<uint8_t> Bytes(std::span<const T> s) {
  return {s.begin(), s.end()};
}

void ExpectSameLinear(const Linear& a, const Linear& b, const std::string& name) {
  ASSERT_EQ(a.quantized(), b.quantized()) << name;
  EXPECT_TRUE(BitwiseEqual(a.bias, b.bias)) << name;
  if (!a.quantized()) {
    EXPECT_TRUE(BitwiseEqual(std::get<DenseMatrix>(a.weight).values, std::get<DenseMatrix>(b.weight).values)) << name;
    return;
  }
  const auto& qa = std::get<QuantizedTensor>(a.weight);
  const auto& qb = std::get<QuantizedTensor>(b.weight);
  EXPECT_EQ(qa.scheme().ToString(), qb.scheme().ToString()) << name;
  ASSERT_EQ(qa.rows(), qb.rows()) << name;
  ASSERT_EQ(qa.cols(), qb.cols()) << name;
  EXPECT_EQ(Bytes(qa.codes()), Bytes(qb.codes())) << name;
  EXPECT_EQ(Bytes(qa.scale_bytes()), Bytes(qb.scale_bytes())) << name;
  EXPECT_EQ(Bytes(qa.zero_bytes()), Bytes(qb.zero_bytes())) << name;
  const float ta = qa.tensor_scale(), tb = qb.tensor_scale();
  EXPECT_EQ(std::memcmp(&ta, &tb, 4), 0) << name;
  EXPECT_TRUE(BitwiseEqual(qa.Dequantize(), qb.Dequantize())) << name;
}

void ExpectSameModel(const Model& a, const Model& b) {
  EXPECT_TRUE(BitwiseEqual(a.weights.embed.Widened(), b.weights.embed.Widened()));
  EXPECT_TRUE(BitwiseEqual(a.weights.final_norm, b.weights.final_norm));
  ASSERT_EQ(a.weights.layers.size(), b.weights.layers.size());
  for (size_t i = 0; i < a.weights.layers.size(); ++i) {
    const LayerWeights &x = a.weights.layers[i], &y = b.weights.layers[i];
    EXPECT_TRUE(BitwiseEqual(x.attn_norm, y.attn_norm));
    EXPECT_TRUE(BitwiseEqual(x.ffn_norm, y.ffn_norm));
    const std::string p = "layer " + std::to_string(i) + " ";
    ExpectSameLinear(x.wq, y.wq, p + "q");
    ExpectSameLinear(x.wk, y.wk, p + "k");
    ExpectSameLinear(x.wv, y.wv, p + "v");
    ExpectSameLinear(x.wo, y.wo, p + "o");
    ExpectSameLinear(x.w_gate, y.w_gate, p + "gate");
    ExpectSameLinear(x.w_up, y.w_up, p + "up");
    ExpectSameLinear(x.w_down, y.w_down, p + "down");
  }
  ExpectSameLinear(a.weights.lm_head, b.weights.lm_head, "lm_head");
  EXPECT_TRUE(BitwiseEqual(Logits(a), Logits(b)));
}

json ReadJson(const fs::path& p) { return json::parse(ReadTextFile(p)); }

// What config_groups.group_0.weights must say for each scheme; null = no compressed-tensors
// counterpart (only the "lowbit" sub-object describes it).
struct Case {
  std::string scheme;
  json weights;  // the compressed-tensors fields checked, or null
};

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, SavedCheckpointLoadsBackBitExact) {
  const Case& c = GetParam();
  const Model model = Quantized(c.scheme);
  const std::string scheme = std::get<QuantizedTensor>(model.weights.layers[0].wq.weight).scheme().ToString();
  Scratch scratch;
  const fs::path out = scratch / "out";
  SaveQuantizedModel(model, out, kModelDir, Recipe(c.scheme));
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"out"});  // no temp folder left
  EXPECT_TRUE(IsQuantizedCheckpoint(out));
  EXPECT_FALSE(IsQuantizedCheckpoint(kModelDir));

  const Model loaded = LoadHfModel(out);
  ExpectSameModel(model, loaded);

  // config.json: the source's fields plus a compressed-tensors-shaped quantization_config.
  const json config = ReadJson(out / "config.json");
  EXPECT_EQ(config["hidden_size"], 256);
  const json& qc = config["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "lowbit-packed");
  EXPECT_EQ(qc["quantization_status"], "compressed");
  EXPECT_EQ(qc["ignore"], json({"model.embed_tokens", "lm_head"}));
  EXPECT_EQ(qc["lowbit"]["format_version"], 1);
  ASSERT_EQ(qc["lowbit"]["tensors"].size(), 42u);
  EXPECT_EQ(qc["lowbit"]["tensors"]["model.layers.5.mlp.down_proj"], scheme);
  if (c.weights.is_null()) {
    EXPECT_TRUE(qc["config_groups"].empty()) << qc.dump();
  } else {
    ASSERT_EQ(qc["config_groups"].size(), 1u) << qc.dump();
    const json& g = qc["config_groups"]["group_0"];
    EXPECT_EQ(g["targets"].size(), 42u);
    EXPECT_EQ(g["weights"]["dynamic"], false);
    for (const auto& [key, value] : c.weights.items()) EXPECT_EQ(g["weights"][key], value) << key;
  }

  EXPECT_EQ(ReadJson(out / "recipe.json"), Recipe(c.scheme));
  EXPECT_EQ(ReadTextFile(out / "tokenizer.model"), ReadTextFile(kModelDir / "tokenizer.model"));
  EXPECT_TRUE(fs::exists(out / "tokenizer_config.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));

  // The safetensors file describes itself too.
  const SafetensorsFile st = SafetensorsFile::Open(out / "model.safetensors");
  EXPECT_EQ(st.metadata().at("lowbit.format_version"), "1");
  EXPECT_EQ(st.metadata().at("lowbit.scheme.model.layers.0.self_attn.q_proj"), scheme);
  const QuantScheme s = ParseScheme(scheme);
  const TensorView& packed = st.Get("model.layers.0.mlp.down_proj.weight_packed");
  EXPECT_EQ(packed.dtype, DType::kU8);
  EXPECT_EQ(packed.shape, (std::vector<uint64_t>{256, (768u * s.element->bits + 7) / 8}));
  EXPECT_EQ(st.Find("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(st.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(st.Find("model.layers.0.mlp.down_proj.weight_g_idx") != nullptr,
            s.granularity.kind == GranularityKind::kGroup);
  EXPECT_EQ(st.Find("model.layers.0.mlp.down_proj.weight_zero_point") != nullptr, s.asymmetric());
  EXPECT_EQ(st.Find("model.layers.0.mlp.down_proj.weight_global_scale") != nullptr, s.tensor_scale);
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, RoundTrip,
    ::testing::Values(
        Case{"int4:g128", {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 128}}},
        Case{"int4:g128:asym", {{"num_bits", 4}, {"type", "int"}, {"symmetric", false}, {"strategy", "group"}, {"zp_dtype", "torch.int8"}}},
        Case{"int3:g128", {{"num_bits", 3}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}}},
        Case{"int2:g64:asym", {{"num_bits", 2}, {"symmetric", false}, {"group_size", 64}}},
        Case{"int8", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}, {"scale_dtype", "torch.float16"}}},
        Case{"fp8_e4m3", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"group_size", nullptr}}},
        Case{"fp8_e4m3:block128x128", {{"strategy", "block"}, {"block_structure", {128, 128}}}},
        Case{"nvfp4", {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16},
                       {"scale_dtype", "torch.float8_e4m3fn"}}},
        Case{"mxfp4", {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32},
                       {"scale_dtype", "torch.uint8"}}},
        Case{"int4:g128:asym:zero=f16", nullptr},  // float zero-points: lowbit only
        Case{"nf4:g64", nullptr},
        Case{"bf16", nullptr}),  // a plain cast: codes only, no scale tensor
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.scheme;
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

// Dense tensors are stored in the narrowest float type that holds them exactly: a bf16 source's
// embeddings stay 2 bytes a value, anything else keeps every bit.
TEST(QuantizedCheckpoint, DenseTensorsTakeTheNarrowestExactDType) {
  const std::vector<float> bf16_exact = {1.0f, -0.5f, 1.5f, 0.0f},
                           f16_only = {1.0f + 0x1p-10f, -65504.0f, 0x1p-24f},  // 10 mantissa bits, subnormal
                           neither = {1.0f + 0x1p-20f, 0.1f};
  TensorList list;
  list.AddFloats("a", {4}, bf16_exact);
  list.AddFloats("b", {3}, f16_only);
  list.AddFloats("c", {2}, neither);
  const std::vector<TensorToWrite> tensors = std::move(list).Sorted();  // widest first, then by name
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "c");
  EXPECT_EQ(tensors[0].dtype, DType::kF32);
  EXPECT_EQ(tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(tensors[2].dtype, DType::kF16);
  const auto read = [](const TensorToWrite& t, size_t n) {
    std::vector<float> out(n);
    ToFloat32(TensorView{t.name, t.dtype, {n}, t.data}, out);
    return out;
  };
  EXPECT_EQ(read(tensors[0], 2), neither);
  EXPECT_EQ(read(tensors[1], 4), bf16_exact);
  EXPECT_EQ(read(tensors[2], 3), f16_only);
}

TEST(QuantizedCheckpoint, QuantizedLmHeadAndEmptyOutputFolder) {
  Model model = Quantized("int4:g32");
  const QuantScheme s = ParseScheme("int8:g64:asym");
  const auto& dense = std::get<DenseMatrix>(model.weights.lm_head.weight);
  model.weights.lm_head.weight =
      BuiltinMethods().Create("rtn", nullptr, s)->Quantize({"lm_head", dense.values, dense.rows(), dense.cols()}, s);
  Scratch scratch;
  fs::create_directory(scratch / "out");  // an empty folder is replaced, as mkdir-then-run expects
  SaveQuantizedModel(model, scratch.path().string() + "/out/", kModelDir, json::object());
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"out"});
  const Model loaded = LoadHfModel(scratch / "out");
  ASSERT_TRUE(loaded.weights.lm_head.quantized());
  ExpectSameModel(model, loaded);
  const json qc = ReadJson(scratch / "out" / "config.json")["quantization_config"];
  EXPECT_EQ(qc["ignore"], json({"model.embed_tokens"}));
  EXPECT_EQ(qc["config_groups"].size(), 2u);  // int4:g32 decoder linears, int8 asym lm_head
  EXPECT_EQ(qc["config_groups"]["group_1"]["targets"], json({"lm_head"}));
}

TEST(QuantizedCheckpoint, ExistingOutputIsRefusedAndUntouched) {
  const Model model = Quantized("int4:g128");
  Scratch scratch;
  fs::create_directory(scratch / "out");
  WriteFileAtomic(scratch / "out" / "keep.txt", "precious");
  try {
    SaveQuantizedModel(model, scratch / "out", kModelDir, json::object());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((scratch / "out").string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"out"});
  EXPECT_EQ(ReadTextFile(scratch / "out" / "keep.txt"), "precious");
  EXPECT_EQ(std::distance(fs::directory_iterator(scratch / "out"), fs::directory_iterator()), 1);

  WriteFileAtomic(scratch / "file", "x");
  EXPECT_THROW(SaveQuantizedModel(model, scratch / "file", kModelDir, json::object()), Error);
  EXPECT_EQ(ReadTextFile(scratch / "file"), "x");
}

// Errors after the temp folder exists (a tokenizer file that cannot be copied) and before it
// (a recipe that is not valid UTF-8, a config from another model) both leave nothing behind.
TEST(QuantizedCheckpoint, FailedSaveLeavesNothingBehind) {
  const Model model = Quantized("int4:g128");
  Scratch scratch;
  const fs::path src = scratch / "src";
  fs::create_directory(src);
  fs::copy_file(kModelDir / "config.json", src / "config.json");
  fs::create_directory(src / "tokenizer.json");  // exists but is no file: the copy step fails
  try {
    SaveQuantizedModel(model, scratch / "out", src, json::object());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"src"});

  EXPECT_THROW(SaveQuantizedModel(model, scratch / "out", kModelDir, json{{"note", "\xff\xfe"}}), Error);
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"src"});

  fs::remove_all(src / "tokenizer.json");
  json other = ReadJson(src / "config.json");
  other["num_hidden_layers"] = 4;
  WriteFileAtomic(src / "config.json", other.dump());
  try {
    SaveQuantizedModel(model, scratch / "out", src, json::object());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scratch.Entries(), std::vector<std::string>{"src"});
}

TEST(QuantizedCheckpoint, SourcesThatAreNotHfFoldersAreRefusedUpFront) {
  Model model = Quantized("int4:g128");
  Scratch scratch;
  const fs::path out = scratch / "out";
  // cmd_quantize passes "" for GGUF / llama2.c files: must not pick up ./config.json.
  for (const fs::path& src : {fs::path(), scratch.path()}) {
    try {
      SaveQuantizedModel(model, out, src, json::object());
      ADD_FAILURE() << "no error for source '" << src << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported yet"), std::string::npos) << e.what();
    }
  }
  model.config.rope_style = RopeStyle::kAdjacent;  // as GGUF and llama2.c models load
  EXPECT_THROW(CheckQuantizedModelTarget(model.config, out, kModelDir), Error);
  EXPECT_THROW(SaveQuantizedModel(model, out, kModelDir, json::object()), Error);
  EXPECT_TRUE(scratch.Entries().empty());
}

// Copies checkpoint `from` to `to`, rewriting model.safetensors through `edit` (which may change
// or drop tensors) and config.json through `edit_config`; `keep_metadata` false drops the
// safetensors __metadata__ so only config.json describes the schemes.
void CopyCheckpoint(const fs::path& from, const fs::path& to, const std::function<void(std::vector<TensorToWrite>&)>& edit,
                    const std::function<void(json&)>& edit_config = nullptr, bool keep_metadata = true) {
  fs::create_directory(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), to / e.path().filename());
  const SafetensorsFile st = SafetensorsFile::Open(from / "model.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const TensorView& t : st.tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.data});
  edit(tensors);
  WriteSafetensors(to / "model.safetensors", tensors, keep_metadata ? st.metadata() : std::map<std::string, std::string>{});
  if (edit_config) {
    json config = ReadJson(from / "config.json");
    edit_config(config);
    WriteFileAtomic(to / "config.json", config.dump());
  }
}

TensorToWrite& Find(std::vector<TensorToWrite>& tensors, const std::string& name) {
  for (TensorToWrite& t : tensors)
    if (t.name == name) return t;
  throw std::logic_error("no tensor " + name);
}

void ExpectLoadError(const fs::path& dir, const std::vector<std::string>& needles) {
  try {
    (void)LoadHfModel(dir);
    ADD_FAILURE() << "no error loading " << dir;
  } catch (const Error& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(QuantizedCheckpoint, CorruptedCheckpointsAreErrorsNamingTheTensor) {
  Scratch scratch;
  const fs::path good = scratch / "good";
  SaveQuantizedModel(Quantized("int4:g128:asym"), good, kModelDir, json::object());
  const std::string q = "model.layers.0.self_attn.q_proj";

  // A truncated weight_packed: one row short.
  CopyCheckpoint(good, scratch / "short", [&](auto& ts) {
    TensorToWrite& t = Find(ts, q + ".weight_packed");
    t.shape[0] -= 1;
    t.data = t.data.first(t.shape[0] * t.shape[1]);
  });
  ExpectLoadError(scratch / "short", {"model.safetensors", q + ".weight_packed", "[255, 128]", "[256, 128]"});

  // Same bytes, wrong element type.
  CopyCheckpoint(good, scratch / "dtype", [&](auto& ts) { Find(ts, q + ".weight_scale").dtype = DType::kBF16; });
  ExpectLoadError(scratch / "dtype", {q + ".weight_scale", "BF16", "F16"});

  // Missing side tensor.
  CopyCheckpoint(good, scratch / "nozero",
                 [&](auto& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == q + ".weight_zero_point"; }); });
  ExpectLoadError(scratch / "nozero", {q + ".weight_zero_point", "missing"});

  // A packed tensor the config does not list.
  CopyCheckpoint(good, scratch / "unlisted", [](auto&) {},
                 [&](json& c) { c["quantization_config"]["lowbit"]["tensors"].erase(q); });
  ExpectLoadError(scratch / "unlisted", {q + ".weight_packed", "not listed"});

  // A scheme string that does not parse, and one that disagrees with the stored grid.
  CopyCheckpoint(good, scratch / "bogus", [](auto&) {},
                 [&](json& c) { c["quantization_config"]["lowbit"]["tensors"][q] = "int4:g128:wat"; });
  ExpectLoadError(scratch / "bogus", {q, "wat"});
  const auto regroup = [&](json& c) { c["quantization_config"]["lowbit"]["tensors"][q] = "int4:g64:asym:scale=f16"; };
  CopyCheckpoint(good, scratch / "regroup", [](auto&) {}, regroup);
  ExpectLoadError(scratch / "regroup", {q, "g64", "metadata"});  // metadata and config disagree
  CopyCheckpoint(good, scratch / "regroup2", [](auto&) {}, regroup, /*keep_metadata=*/false);
  ExpectLoadError(scratch / "regroup2", {q + ".weight_scale", "[256, 2]", "[256, 4]", "g64"});
}

// A folder `dir` of the bundled model's dense weights under a config.json whose quantization_config is `qc`.
fs::path DenseWeightsWithConfig(const fs::path& dir, const json& qc) {
  fs::create_directory(dir);
  fs::create_symlink(kModelDir / "model.safetensors", dir / "model.safetensors");
  json config = ReadJson(kModelDir / "config.json");
  config["quantization_config"] = qc;
  WriteFileAtomic(dir / "config.json", config.dump());
  return dir;
}

TEST(QuantizedCheckpoint, ForeignQuantizedCheckpointsAreNotSupportedYet) {
  Scratch scratch;
  const std::pair<std::string, json> configs[] = {
      {"bitsandbytes", {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}},
  };
  for (const auto& [name, qc] : configs)
    ExpectLoadError(DenseWeightsWithConfig(scratch / name, qc), {"not supported yet", qc["quant_method"].get<std::string>()});
  // compressed-tensors formats lowbit does not read yet name the format.
  const json marlin = json::parse(R"({"quant_method": "compressed-tensors", "format": "marlin-24",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int"}}}})");
  ExpectLoadError(DenseWeightsWithConfig(scratch / "ct-marlin-24", marlin),
                  {"is 'marlin-24'", "lowbit reads", "quantization_config.format"});
}

// A GPTQ / AWQ / compressed-tensors config over weights that hold no quantized linear is an error,
// not a dense model run under a quantized name.
TEST(QuantizedCheckpoint, EngineConfigOverDenseWeightsIsAnError) {
  Scratch scratch;
  const std::map<std::string, json> configs = {
      {"ct", {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"config_groups", json::object()}}},
      {"gptq", {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}}},
      {"awq", {{"quant_method", "awq"}, {"bits", 4}, {"version", "gemm"}}},
      {"fp8", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}},
  };
  for (const auto& [name, qc] : configs)
    ExpectLoadError(DenseWeightsWithConfig(scratch / name, qc),
                    {"config.json", "no linear", qc["quant_method"].get<std::string>()});
  const fs::path legacy = scratch / "autogptq";  // quantize_config.json beside a plain config
  fs::create_directory(legacy);
  fs::copy_file(kModelDir / "config.json", legacy / "config.json");
  fs::create_symlink(kModelDir / "model.safetensors", legacy / "model.safetensors");
  WriteFileAtomic(legacy / "quantize_config.json", R"({"bits": 4})");
  ExpectLoadError(legacy, {"quantize_config.json", "no linear"});
}

}  // namespace
}  // namespace lowbit
