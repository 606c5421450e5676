// safetensors reader/writer: round trips, conversions, the real checkpoint, sharded indexes, and
// one test per parser security rule (formats.md 9.2) checking that the error names the file and
// the tensor at fault.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_folder.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

template <class T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// Runs `f`, expects a lowbit::Error, and checks the message contains every needle.
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

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("lowbit_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path WriteBytes(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // A raw file: explicit length prefix, header text, and `data_bytes` zero bytes.
  fs::path WriteRaw(const std::string& name, const std::string& header, uint64_t data_bytes,
                    uint64_t header_len) {
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &header_len, 8);
    return WriteBytes(name, bytes + header + std::string(data_bytes, '\0'));
  }
  fs::path WriteRaw(const std::string& name, const std::string& header, uint64_t data_bytes) {
    return WriteRaw(name, header, data_bytes, header.size());
  }
  // Expects opening a file with this header (and data size) to fail mentioning the needles.
  void ExpectBadHeader(const std::string& header, uint64_t data_bytes,
                       std::initializer_list<std::string_view> needles) {
    const fs::path p = WriteRaw("bad.safetensors", header, data_bytes);
    ExpectError([&] { SafetensorsFile::Open(p); }, needles);
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsDtypesShapesAndMetadata) {
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000};  // 1.0, -2.0
  const std::vector<int8_t> i8 = {-128, -1, 0, 1, 127};
  const std::vector<double> f64 = {3.5};
  const std::vector<int64_t> i64 = {-5, 1LL << 40};
  const std::vector<std::byte> none;
  const std::vector<TensorToWrite> tensors = {
      {"w.f32", DType::kF32, {3, 2}, Bytes(f32)},
      {"w.i8", DType::kI8, {5}, Bytes(i8)},  // odd size: later tensors start unaligned
      {"w.bf16", DType::kBF16, {1, 2}, Bytes(bf16)},
      {"scalar", DType::kF64, {}, Bytes(f64)},
      {"empty", DType::kF16, {4, 0}, Bytes(none)},
      {"w.i64", DType::kI64, {2}, Bytes(i64)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "h\u00e9llo"}};
  const fs::path p = dir_ / "rt.safetensors";
  WriteSafetensors(p, tensors, metadata);

  // Header length is a multiple of 8 so the data buffer starts aligned.
  std::ifstream in(p, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);

  const SafetensorsFile st = SafetensorsFile::Open(p);
  EXPECT_EQ(st.metadata(), metadata);
  ASSERT_EQ(st.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& v = st.tensors()[i];  // file order == write order
    EXPECT_EQ(v.name, tensors[i].name);
    EXPECT_EQ(v.dtype, tensors[i].dtype);
    EXPECT_EQ(v.shape, tensors[i].shape);
    ASSERT_EQ(v.data.size(), tensors[i].data.size());
    EXPECT_TRUE(std::equal(v.data.begin(), v.data.end(), tensors[i].data.begin())) << v.name;
  }
  EXPECT_EQ(st.Get("scalar").numel(), 1u);
  EXPECT_EQ(st.Get("empty").numel(), 0u);
  EXPECT_EQ(ToFloat32(st.Get("w.f32")), f32);
  EXPECT_EQ(ToFloat32(st.Get("w.bf16")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(ToFloat32(st.Get("w.i8")), (std::vector<float>{-128, -1, 0, 1, 127}));
  EXPECT_EQ(ToFloat32(st.Get("scalar")), std::vector<float>{3.5f});
  EXPECT_TRUE(ToFloat32(st.Get("empty")).empty());
  EXPECT_EQ(ToFloat32(st.Get("w.i64")), (std::vector<float>{-5.0f, 1099511627776.0f}));
  EXPECT_EQ(st.Find("missing"), nullptr);
  ExpectError([&] { st.Get("missing"); }, {"rt.safetensors", "'missing'"});
}

TEST_F(SafetensorsTest, EmptyFileRoundTrips) {
  const fs::path p = dir_ / "empty.safetensors";
  WriteSafetensors(p, {});
  const SafetensorsFile st = SafetensorsFile::Open(p);
  EXPECT_TRUE(st.tensors().empty());
  EXPECT_TRUE(st.metadata().empty());
}

TEST_F(SafetensorsTest, ToFloat32DecodesSmallFloats) {
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7C00};
  const std::vector<uint16_t> bf16 = {0x3F80, 0x4049, 0xBF00};
  const std::vector<uint8_t> e4m3 = {0x38, 0xB8, 0x7E, 0x01, 0x40};
  const std::vector<uint8_t> e5m2 = {0x3C, 0x40, 0x7B, 0x01};
  const std::vector<uint8_t> e8m0 = {127, 128, 0};
  auto view = [](DType d, uint64_t n, std::span<const std::byte> b) {
    return TensorView{"t", d, {n}, b};
  };
  EXPECT_EQ(ToFloat32(view(DType::kF16, 5, Bytes(f16))),
            (std::vector<float>{1.0f, -2.0f, 0.333251953125f, std::ldexp(1.0f, -24), INFINITY}));
  EXPECT_EQ(ToFloat32(view(DType::kBF16, 3, Bytes(bf16))),
            (std::vector<float>{1.0f, 3.140625f, -0.5f}));
  // E4M3: 0x38 = 2^0; 0x7E = 1.75 * 2^8 = 448 (max finite); 0x01 = 2^-9 (min subnormal).
  EXPECT_EQ(ToFloat32(view(DType::kF8E4M3, 5, Bytes(e4m3))),
            (std::vector<float>{1.0f, -1.0f, 448.0f, std::ldexp(1.0f, -9), 2.0f}));
  // E5M2: 0x3C = 2^0; 0x7B = 1.75 * 2^15 = 57344; 0x01 = 2^-16.
  EXPECT_EQ(ToFloat32(view(DType::kF8E5M2, 4, Bytes(e5m2))),
            (std::vector<float>{1.0f, 2.0f, 57344.0f, std::ldexp(1.0f, -16)}));
  EXPECT_EQ(ToFloat32(view(DType::kF8E8M0, 3, Bytes(e8m0))),
            (std::vector<float>{1.0f, 2.0f, std::ldexp(1.0f, -127)}));

  const std::vector<uint8_t> flags = {0, 1};
  ExpectError(
      [&] {
        ToFloat32(TensorView{"mask", DType::kBool, {2}, Bytes(flags)});
      },
      {"'mask'", "BOOL"});
  ExpectError([&] { ToFloat32(view(DType::kF32, 2, Bytes(flags))); }, {"'t'", "2 bytes"});
}

TEST_F(SafetensorsTest, DTypeNamesRoundTrip) {
  for (std::string_view name : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16",
                                "F16", "BF16", "I32", "U32", "F32", "I64", "U64", "F64"}) {
    const std::optional<DType> d = ParseDType(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(DTypeName(*d), name);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_FALSE(ParseDType("F4").has_value());
  EXPECT_FALSE(ParseDType("f32").has_value());
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::vector<float> two = {1, 2};
  const fs::path p = dir_ / "out.safetensors";
  const std::vector<TensorToWrite> mismatch = {{"a", DType::kF32, {3}, Bytes(two)}};
  ExpectError([&] { WriteSafetensors(p, mismatch); }, {"out.safetensors", "'a'", "12 bytes"});
  const std::vector<TensorToWrite> dup = {{"a", DType::kF32, {2}, Bytes(two)},
                                          {"a", DType::kF32, {2}, Bytes(two)}};
  ExpectError([&] { WriteSafetensors(p, dup); }, {"out.safetensors", "duplicate", "'a'"});
  const std::vector<TensorToWrite> overflow = {
      {"big", DType::kF32, {1ULL << 32, 1ULL << 32}, Bytes(two)}};
  ExpectError([&] { WriteSafetensors(p, overflow); }, {"out.safetensors", "'big'", "overflow"});
  EXPECT_FALSE(fs::exists(p));  // nothing written on error
}

// ---------------------------------------------------------------- malformed files (rule by rule)

TEST_F(SafetensorsTest, RejectsFileShorterThanLengthPrefix) {
  const fs::path p = WriteBytes("short.safetensors", "abcde");
  ExpectError([&] { SafetensorsFile::Open(p); }, {"short.safetensors", "8-byte"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFileOrLimit) {
  fs::path p = WriteRaw("len.safetensors", "{}", 0, 1000);
  ExpectError([&] { SafetensorsFile::Open(p); }, {"len.safetensors", "header length 1000"});
  p = WriteRaw("huge.safetensors", "{}", 0, ~uint64_t{0});  // 8 + N would wrap
  ExpectError([&] { SafetensorsFile::Open(p); }, {"huge.safetensors", "limit"});
}

TEST_F(SafetensorsTest, RejectsNonJsonHeaders) {
  ExpectBadHeader("{not json", 0, {"bad.safetensors", "invalid JSON"});
  ExpectBadHeader("[1, 2]", 0, {"bad.safetensors", "'{'"});
  ExpectBadHeader("", 0, {"bad.safetensors"});
  ExpectBadHeader("{} x", 0, {"bad.safetensors", "invalid JSON"});           // trailing junk
  ExpectBadHeader("{\"\xff\": 1}", 0, {"bad.safetensors", "invalid JSON"});  // not UTF-8
  ExpectBadHeader("{\"a\":" + std::string(50, '[') + std::string(50, ']') + "}", 0,
                  {"bad.safetensors", "deeper"});
}

TEST_F(SafetensorsTest, RejectsMissingOrMistypedFields) {
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [1]}})", 4,
                  {"bad.safetensors", "'x'", "data_offsets"});
  ExpectBadHeader(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4,
                  {"bad.safetensors", "'x'", "dtype"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", 4,
                  {"bad.safetensors", "'x'", "shape"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4,
                  {"bad.safetensors", "'x'", "shape"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 4,
                  {"bad.safetensors", "'x'", "shape"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4,
                  {"bad.safetensors", "'x'", "data_offsets"});
  ExpectBadHeader(R"({"x": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", 4,
                  {"bad.safetensors", "'x'", "dtype"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "y": 1}})", 4,
                  {"bad.safetensors", "'x'", "'y'"});
  ExpectBadHeader(R"({"x": [1]})", 0, {"bad.safetensors", "'x'", "object"});
  ExpectBadHeader(R"({"__metadata__": {"k": 1}})", 0, {"bad.safetensors", "__metadata__", "'k'"});
  ExpectBadHeader(R"({"__metadata__": "v"})", 0, {"bad.safetensors", "__metadata__"});
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4,
                  {"bad.safetensors", "'x'", "[0, 8)", "4-byte data buffer"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4,
                  {"bad.safetensors", "'x'", "begin after end"});
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 12]}})", 12,
                  {"bad.safetensors", "'x'", "[0, 12) do not match 3x2 F32 (24 bytes)"});
  ExpectBadHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                  12, {"bad.safetensors", "'a'", "'b'", "overlap"});
  ExpectBadHeader(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                  12, {"bad.safetensors", "'a'", "'b'", "holes"});
  ExpectBadHeader(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8,
                  {"bad.safetensors", "'a'", "hole"});
  ExpectBadHeader(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8,
                  {"bad.safetensors", "trailing"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  ExpectBadHeader(R"({"x": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}})", 1,
                  {"bad.safetensors", "'x'", "unknown dtype 'F7'"});
  ExpectBadHeader(R"({"x": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1,
                  {"bad.safetensors", "'x'", "'F4'", "not supported"});
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  ExpectBadHeader(R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                      "x": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                  2, {"bad.safetensors", "duplicate tensor 'x'"});
  ExpectBadHeader(R"({"x": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})",
                  1, {"bad.safetensors", "tensor 'x': duplicate key 'dtype'"});
}

TEST_F(SafetensorsTest, RejectsShapeOverflow) {
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 2],
                            "data_offsets": [0, 0]}})",
                  0, {"bad.safetensors", "'x'", "overflow"});
  // numel fits in 64 bits but numel x 4 bytes does not.
  ExpectBadHeader(R"({"x": {"dtype": "F32", "shape": [4611686018427387904],
                            "data_offsets": [0, 0]}})",
                  0, {"bad.safetensors", "'x'", "overflow"});
}

// ---------------------------------------------------------------------------- real checkpoint

TEST(SafetensorsModelTest, OpensKjvLlamaWithConfigShapes) {
  const SafetensorsModel model = SafetensorsModel::Open(LOWBIT_SOURCE_DIR "/models/kjv-llama-7m");
  // hidden 256, vocab 4096, 8 heads x 32, 4 kv heads x 32, ffn 768, 6 layers, untied head.
  EXPECT_EQ(model.names().size(), 2u + 1u + 6u * 9u);
  const TensorView& embed = model.Get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype, DType::kF32);
  EXPECT_EQ(embed.shape, (std::vector<uint64_t>{4096, 256}));
  EXPECT_EQ(model.Get("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<uint64_t>{128, 256}));
  EXPECT_EQ(model.Get("model.layers.5.self_attn.q_proj.weight").shape,
            (std::vector<uint64_t>{256, 256}));
  EXPECT_EQ(model.Get("model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<uint64_t>{256, 768}));
  EXPECT_EQ(model.Get("lm_head.weight").shape, (std::vector<uint64_t>{4096, 256}));
  const std::vector<float> norm = ToFloat32(model.Get("model.norm.weight"));
  ASSERT_EQ(norm.size(), 256u);
  for (float v : norm) EXPECT_TRUE(std::isfinite(v));
  ExpectError([&] { model.Get("model.layers.6.mlp.up_proj.weight"); },
              {"kjv-llama-7m", "'model.layers.6.mlp.up_proj.weight'"});
}

// --------------------------------------------------------------------------------- sharded index

class ShardedTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    const std::vector<TensorToWrite> shard1 = {{"a", DType::kF32, {2}, Bytes(a_)},
                                               {"b", DType::kU8, {3}, Bytes(b_)}};
    const std::vector<TensorToWrite> shard2 = {{"c", DType::kF32, {1}, Bytes(c_)}};
    WriteSafetensors(dir_ / "model-00001-of-00002.safetensors", shard1);
    WriteSafetensors(dir_ / "model-00002-of-00002.safetensors", shard2);
  }
  void WriteIndex(const std::string& weight_map) {
    WriteBytes("model.safetensors.index.json",
               R"({"metadata": {"total_size": 15}, "weight_map": )" + weight_map + "}");
  }
  static constexpr const char* kGoodMap =
      R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
          "c": "model-00002-of-00002.safetensors"})";

  std::vector<float> a_ = {1, 2}, c_ = {3};
  std::vector<uint8_t> b_ = {4, 5, 6};
};

TEST_F(ShardedTest, OpensShardsThroughIndex) {
  WriteIndex(kGoodMap);
  for (const fs::path& p : {dir_, dir_ / "model.safetensors.index.json"}) {
    const SafetensorsModel model = SafetensorsModel::Open(p);
    EXPECT_EQ(model.shards().size(), 2u);
    EXPECT_EQ(model.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ToFloat32(model.Get("c")), std::vector<float>{3});
    EXPECT_EQ(ToFloat32(model.Get("b")), (std::vector<float>{4, 5, 6}));
    EXPECT_EQ(model.Find("d"), nullptr);
  }
  // A single shard can be opened directly too.
  const SafetensorsModel one = SafetensorsModel::Open(dir_ / "model-00002-of-00002.safetensors");
  EXPECT_EQ(one.names(), std::vector<std::string>{"c"});
}

TEST_F(ShardedTest, RejectsIndexPointingAtMissingTensor) {
  WriteIndex(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); },
              {"model.safetensors.index.json", "'d'", "model-00002-of-00002.safetensors"});
}

TEST_F(ShardedTest, RejectsWrongShardUnlistedTensorAndDuplicates) {
  WriteIndex(R"({"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"index.json", "'a'", "00002"});
  WriteIndex(
      R"({"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"index.json", "'b'", "missing"});
  WriteIndex(
      R"({"a": "model-00001-of-00002.safetensors", "a": "model-00001-of-00002.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"index.json", "duplicate", "'a'"});

  const std::vector<float> one = {9};
  WriteSafetensors(dir_ / "model-00002-of-00002.safetensors",
                   std::vector<TensorToWrite>{{"a", DType::kF32, {1}, Bytes(one)},
                                              {"c", DType::kF32, {1}, Bytes(c_)}});
  WriteIndex(kGoodMap);
  ExpectError([&] { SafetensorsModel::Open(dir_); },
              {"index.json", "'a'", "two shards", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors"});
}

TEST_F(ShardedTest, RejectsUnsafeOrMissingShardFiles) {
  WriteIndex(R"({"a": "../model-00001-of-00002.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"index.json", "'a'", "plain file name"});
  WriteIndex(R"({"a": "nope.safetensors"})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"nope.safetensors"});
  WriteBytes("model.safetensors.index.json", R"({"metadata": {}})");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"index.json", "weight_map"});
  ExpectError([&] { SafetensorsModel::Open(dir_ / "other.index.json"); }, {"other.index.json"});
  fs::remove(dir_ / "model.safetensors.index.json");
  ExpectError([&] { SafetensorsModel::Open(dir_); }, {"model.safetensors"});
}

}  // namespace
}  // namespace lowbit

namespace lowbit {
namespace {

// The sharded writer streams each list to disk as it is added; the shards it assembles hold every
// tensor's bytes, each aligned to its element size, and nothing else is left in the folder.
TEST_F(SafetensorsTest, ShardedWriterStreamsListsIntoAlignedShards) {
  const std::vector<double> wide = {1.5, -2.25};
  const std::vector<float> floats = {1, 2, 3};
  const std::vector<uint16_t> halves = {0x3f80, 0x4000, 0x4040};
  const std::vector<uint8_t> bytes = {7, 8, 9, 10, 11};
  const std::vector<int64_t> longs = {-5, 1ll << 40};
  ShardedSafetensorsWriter writer(dir_, 40, {{"format", "pt"}});
  const auto list = [](auto add) {
    TensorList l;
    add(l);
    return l;
  };
  writer.Add(list([&](TensorList& l) {  // 5 + 12 + 16 bytes: one shard (33 of 40)
    l.Add("b.bytes", DType::kU8, {5}, std::span(bytes));
    l.Add("a.floats", DType::kF32, {3}, std::span(floats));
    l.Add("c.wide", DType::kF64, {2}, std::span(wide));
  }));
  writer.Add(list([&](TensorList& l) {  // 6 + 16 more would pass 40: a second shard
    l.Add("d.halves", DType::kBF16, {3}, std::span(halves));
    l.AddOwned("e.longs", DType::kI64, {2}, longs);
  }));
  EXPECT_EQ(writer.Finish(), 2u);
  EXPECT_EQ(writer.bytes(), 55u);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                             "model.safetensors.index.json"}));
  const SafetensorsModel model = SafetensorsModel::Open(dir_);
  const auto expect = [&](const std::string& name, auto values) {
    const TensorView& t = model.Get(name);
    const auto want = std::as_bytes(std::span(values));
    EXPECT_TRUE(std::ranges::equal(t.data, want)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data.data()) % DTypeSize(t.dtype), 0u) << name;
  };
  expect("a.floats", floats);
  expect("b.bytes", bytes);
  expect("c.wide", wide);
  expect("d.halves", halves);
  expect("e.longs", longs);
}

}  // namespace
}  // namespace lowbit
