// GGUF (v2/v3, little-endian) reading and ggml block dequantization (layout, value types, reader
// rules and block layouts: docs formats.md section 2).
//
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x (string key, u32 type, value) | tensor_count x (string name, u32 n_dims,
//   u64 ne[n_dims], u32 ggml_type, u64 offset) | zero pad to ALIGNMENT | data section
//
// Files are treated as hostile: Open() enforces every rule of formats.md 2.3 (bounds-checked
// reads, count/length caps that cannot overflow allocations, non-empty unique keys, known value
// types, no nested arrays, a UINT32 power-of-two general.alignment, tensor names < 64 bytes and
// unique, <= 4 dims, element counts that fit int64, known ggml types with whole blocks per row,
// overflow-checked byte sizes, aligned offsets whose data lies inside the file without overlaps)
// before anything is handed out. Errors are lowbit::Error naming the file and the key or tensor.
//
// Tensor data is never copied: GgufTensorInfo::data points into a read-only mmap owned by the
// GgufFile, so it lives exactly as long as that object (moves keep it valid). The data may be
// unaligned for its element type; decode with DequantizeGgufRow/Tensor, never by casting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/file_util.h"

namespace lowbit {

// GGUF metadata value types; the ids are on-disk values (never renumber).
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType type);  // "UINT32", "STRING", ...

// Array elements. The alternative index equals the element's GgufType id; index 9 (ARRAY) is a
// placeholder because ggml rejects nested arrays, so a parsed file never holds it.
using GgufArrayValues =
    std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                 std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                 std::vector<float>, std::vector<bool>, std::vector<std::string>, std::monostate,
                 std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>;

struct GgufArray {
  GgufArrayValues values;
  GgufType element_type() const { return static_cast<GgufType>(values.index()); }
  size_t size() const;
};

// One metadata value; the alternative index equals its GgufType id, so TypeOf is index().
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
inline GgufType TypeOf(const GgufValue& v) { return static_cast<GgufType>(v.index()); }
static_assert(std::is_same_v<std::variant_alternative_t<9, GgufValue>, GgufArray> &&
              std::is_same_v<std::variant_alternative_t<12, GgufValue>, double>);

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

// ggml tensor type ids (enum ggml_type, formats.md 2.4). On-disk values: append, never renumber.
enum GgmlType : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8, kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13,
  kGgmlQ6_K = 14, kGgmlQ8_K = 15, kGgmlIQ2_XXS = 16, kGgmlIQ2_XS = 17, kGgmlIQ3_XXS = 18,
  kGgmlIQ1_S = 19, kGgmlIQ4_NL = 20, kGgmlIQ3_S = 21, kGgmlIQ2_S = 22, kGgmlIQ4_XS = 23,
  kGgmlI8 = 24, kGgmlI16 = 25, kGgmlI32 = 26, kGgmlI64 = 27, kGgmlF64 = 28, kGgmlIQ1_M = 29,
  kGgmlBF16 = 30, kGgmlTQ1_0 = 34, kGgmlTQ2_0 = 35, kGgmlMXFP4 = 39, kGgmlNVFP4 = 40,
  kGgmlQ1_0 = 41, kGgmlQ2_0 = 42,
};

// Stable facts of one ggml type. Types that parse but cannot be dequantized yet have
// dequantize == false (their sizes are still exact, so files holding them open fine).
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;
  uint32_t block_elems;
  uint32_t block_bytes;
  bool dequantize;
};
// nullptr for ids ggml never had, removed ids (4, 5, 31-33, 36-38) and ids past the table.
const GgmlTypeInfo* FindGgmlType(uint32_t id);
std::span<const GgmlTypeInfo> AllGgmlTypes();  // ascending ids
std::string GgmlTypeName(uint32_t id);  // "Q4_0", or "unknown(99)"

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<uint64_t> dims;  // ne order: dims[0] is the row length (fastest varying)
  uint64_t offset = 0;         // inside the data section
  uint64_t n_elements = 0;     // product of dims (1 for 0 dims)
  std::span<const std::byte> data;  // exactly the tensor's bytes, inside the mapping

  uint64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  uint64_t n_rows() const { return row_length() == 0 ? 0 : n_elements / row_length(); }
};

class GgufFile {
 public:
  static GgufFile Open(const std::filesystem::path& path);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::filesystem::path& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section

  // Metadata in file order.
  std::span<const GgufKeyValue> metadata() const { return kvs_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr if absent
  // Typed getters: throw Error naming the file and key when the key is missing or its type does
  // not fit. GetU32/GetU64 accept any integer type whose value fits (the spec recommends
  // leniency for counts); GetF32 accepts FLOAT32 and FLOAT64.
  const GgufValue& Get(std::string_view key) const;
  const std::string& GetString(std::string_view key) const;
  uint32_t GetU32(std::string_view key) const;
  uint64_t GetU64(std::string_view key) const;
  float GetF32(std::string_view key) const;
  bool GetBool(std::string_view key) const;
  const GgufArray& GetArray(std::string_view key) const;
  // The array's elements, which must be of type T (e.g. std::string, float, int32_t).
  template <class T>
  const std::vector<T>& GetArrayOf(std::string_view key) const;
  // As above, but an absent key gives `fallback` (a present key of the wrong type still throws).
  uint32_t GetU32Or(std::string_view key, uint32_t fallback) const;
  float GetF32Or(std::string_view key, float fallback) const;
  bool GetBoolOr(std::string_view key, bool fallback) const;

  // Tensor infos in file (info-record) order.
  std::span<const GgufTensorInfo> tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent

 private:
  explicit GgufFile(MappedFile file) : file_(std::move(file)) {}
  void Parse();
  [[noreturn]] void FailType(std::string_view key, const GgufValue& v,
                             std::string_view expected) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_, tensor_index_;
};

template <class T>
const std::vector<T>& GgufFile::GetArrayOf(std::string_view key) const {
  const GgufArray& array = GetArray(key);
  if (const auto* values = std::get_if<std::vector<T>>(&array.values)) return *values;
  const GgufArrayValues want{std::in_place_type<std::vector<T>>};  // its index is T's type id
  FailType(key, GgufValue(array),
           "ARRAY of " + std::string(GgufTypeName(static_cast<GgufType>(want.index()))));
}

// Decodes `n` consecutive elements of a ggml type (n a multiple of its block size) to fp32.
// `src` may be unaligned. Throws Error for types without a decoder ("not supported yet").
void DequantizeGgufRow(uint32_t ggml_type, const std::byte* src, uint64_t n, float* dst);
// The whole tensor in ne order (row after row); errors name the tensor. `consumed` gets each slice of
// the tensor's bytes once decoded (a loader releases their mapped pages).
std::vector<float> DequantizeGgufTensor(const GgufTensorInfo& tensor, ConsumedBytes consumed = nullptr);

}  // namespace lowbit
