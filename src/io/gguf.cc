#include "io/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/minifloat.h"
#include "io/gguf_blocks.h"

namespace lowbit {
namespace {

// GGUF is little-endian and we memcpy values straight out of the mapping.
static_assert(std::endian::native == std::endian::little, "lowbit assumes a little-endian host");

constexpr uint32_t kGgufMagic = 0x46554747;  // bytes "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
// ggml's caps (gguf.cpp): strings up to 1 GiB, arrays up to 2^30 elements, GGML_MAX_NAME = 64
// (so names are at most 63 bytes), GGML_MAX_DIMS = 4. The spec caps keys at 65535 bytes.
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 30;
constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint64_t kMaxTensorNameBytes = 63;
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, so counts are checked against the bytes left before anything is allocated:
// a KV is key length (8) + >= 1 key byte + type (4) + >= 1 value byte; a tensor info is name
// length (8) + n_dims (4) + ggml_type (4) + offset (8), with an empty name and no dims.
constexpr uint64_t kMinKvBytes = 14;
constexpr uint64_t kMinTensorInfoBytes = 24;

// formats.md 2.4. Removed ids (4, 5, 31-33, 36-38) are absent, so they read as unknown.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
    {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, true},
    {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},
    {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, true},    {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, true},
    {24, "I8", 1, 1, true},          {25, "I16", 1, 2, true},
    {26, "I32", 1, 4, true},         {27, "I64", 1, 8, true},
    {28, "F64", 1, 8, true},         {29, "IQ1_M", 256, 56, false},
    {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, true},
    {35, "TQ2_0", 256, 66, true},    {39, "MXFP4", 32, 17, true},
    {40, "NVFP4", 64, 36, false},    {41, "Q1_0", 128, 18, false},
    {42, "Q2_0", 64, 18, false},
};

constexpr bool TableIsSortedAndSane() {
  for (size_t i = 0; i < std::size(kGgmlTypes); ++i) {
    if (kGgmlTypes[i].block_elems == 0 || kGgmlTypes[i].block_bytes == 0) return false;
    if (i > 0 && kGgmlTypes[i - 1].id >= kGgmlTypes[i].id) return false;
  }
  return true;
}
static_assert(TableIsSortedAndSane(), "ggml type table: ids must be unique and ascending");

// Bounds-checked reads over the mapping. `where` names the key or tensor for messages and is
// only formatted on failure.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& file) : bytes_(bytes), file_(file) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  const std::byte* Take(uint64_t n, std::string_view where) {
    if (n > remaining())
      Fail("{}: {}: file truncated (needs {} bytes at offset {}, {} left)", file_, where, n, pos_,
           remaining());
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T Read(std::string_view where) {
    T v;
    std::memcpy(&v, Take(sizeof(T), where), sizeof(T));
    return v;
  }
  std::string ReadString(uint64_t max_len, std::string_view where) {
    const uint64_t len = Read<uint64_t>(where);
    if (len > max_len) Fail("{}: {}: string length {} exceeds the limit of {}", file_, where, len, max_len);
    if (len > remaining())
      Fail("{}: {}: string length {} exceeds the {} bytes left in the file", file_, where, len,
           remaining());
    return std::string(reinterpret_cast<const char*>(Take(len, where)), len);
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

template <class T>
std::vector<T> ReadPodArray(Cursor& c, uint64_t count, std::string_view where) {
  std::vector<T> v(count);
  if (count > 0) std::memcpy(v.data(), c.Take(count * sizeof(T), where), count * sizeof(T));
  return v;
}

bool ReadBool(Cursor& c, const std::string& file, std::string_view where) {
  const uint8_t b = c.Read<uint8_t>(where);
  if (b > 1) Fail("{}: {}: BOOL value {} is neither 0 nor 1", file, where, b);
  return b == 1;
}

uint64_t ScalarSize(uint32_t type) {  // bytes of a fixed-size value type; 0 for STRING/ARRAY
  constexpr uint8_t kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return kSizes[type];
}

GgufArray ReadArray(Cursor& c, const std::string& file, std::string_view where) {
  const uint32_t elem = c.Read<uint32_t>(where);
  if (elem == static_cast<uint32_t>(GgufType::kArray))
    Fail("{}: {}: nested arrays are not allowed", file, where);
  if (elem > static_cast<uint32_t>(GgufType::kFloat64))
    Fail("{}: {}: unknown array element type {}", file, where, elem);
  const uint64_t count = c.Read<uint64_t>(where);
  if (count > kMaxArrayElems)
    Fail("{}: {}: array of {} elements exceeds the limit of 2^30", file, where, count);
  const uint64_t min_size = elem == static_cast<uint32_t>(GgufType::kString) ? 8 : ScalarSize(elem);
  if (count > c.remaining() / min_size)
    Fail("{}: {}: array of {} elements does not fit in the {} bytes left in the file", file, where,
         count, c.remaining());
  switch (static_cast<GgufType>(elem)) {
    case GgufType::kUint8: return {GgufArrayValues(std::in_place_index<0>, ReadPodArray<uint8_t>(c, count, where))};
    case GgufType::kInt8: return {GgufArrayValues(std::in_place_index<1>, ReadPodArray<int8_t>(c, count, where))};
    case GgufType::kUint16: return {GgufArrayValues(std::in_place_index<2>, ReadPodArray<uint16_t>(c, count, where))};
    case GgufType::kInt16: return {GgufArrayValues(std::in_place_index<3>, ReadPodArray<int16_t>(c, count, where))};
    case GgufType::kUint32: return {GgufArrayValues(std::in_place_index<4>, ReadPodArray<uint32_t>(c, count, where))};
    case GgufType::kInt32: return {GgufArrayValues(std::in_place_index<5>, ReadPodArray<int32_t>(c, count, where))};
    case GgufType::kFloat32: return {GgufArrayValues(std::in_place_index<6>, ReadPodArray<float>(c, count, where))};
    case GgufType::kUint64: return {GgufArrayValues(std::in_place_index<10>, ReadPodArray<uint64_t>(c, count, where))};
    case GgufType::kInt64: return {GgufArrayValues(std::in_place_index<11>, ReadPodArray<int64_t>(c, count, where))};
    case GgufType::kFloat64: return {GgufArrayValues(std::in_place_index<12>, ReadPodArray<double>(c, count, where))};
    case GgufType::kBool: {
      std::vector<bool> v(count);
      for (uint64_t i = 0; i < count; ++i) v[i] = ReadBool(c, file, where);
      return {GgufArrayValues(std::in_place_index<7>, std::move(v))};
    }
    case GgufType::kString: {
      std::vector<std::string> v;
      v.reserve(count);  // bounded: count * 8 <= bytes left
      for (uint64_t i = 0; i < count; ++i) v.push_back(c.ReadString(kMaxStringBytes, where));
      return {GgufArrayValues(std::in_place_index<8>, std::move(v))};
    }
    case GgufType::kArray: break;
  }
  LOWBIT_CHECK(false);  // element types were checked above
}

// in_place_index pins the alternative to the on-disk type id (no converting-constructor guesses).
GgufValue ReadValue(Cursor& c, uint32_t type, const std::string& file, std::string_view where) {
  switch (type) {
    case 0: return GgufValue(std::in_place_index<0>, c.Read<uint8_t>(where));
    case 1: return GgufValue(std::in_place_index<1>, c.Read<int8_t>(where));
    case 2: return GgufValue(std::in_place_index<2>, c.Read<uint16_t>(where));
    case 3: return GgufValue(std::in_place_index<3>, c.Read<int16_t>(where));
    case 4: return GgufValue(std::in_place_index<4>, c.Read<uint32_t>(where));
    case 5: return GgufValue(std::in_place_index<5>, c.Read<int32_t>(where));
    case 6: return GgufValue(std::in_place_index<6>, c.Read<float>(where));
    case 7: return GgufValue(std::in_place_index<7>, ReadBool(c, file, where));
    case 8: return GgufValue(std::in_place_index<8>, c.ReadString(kMaxStringBytes, where));
    case 9: return GgufValue(std::in_place_index<9>, ReadArray(c, file, where));
    case 10: return GgufValue(std::in_place_index<10>, c.Read<uint64_t>(where));
    case 11: return GgufValue(std::in_place_index<11>, c.Read<int64_t>(where));
    case 12: return GgufValue(std::in_place_index<12>, c.Read<double>(where));
    default: Fail("{}: {}: unknown value type {} (valid: 0..12)", file, where, type);
  }
}

std::string TypeDescription(const GgufValue& v) {
  if (const auto* array = std::get_if<GgufArray>(&v))
    return fmt::format("ARRAY of {}", GgufTypeName(array->element_type()));
  return std::string(GgufTypeName(TypeOf(v)));
}

// Loads use memcpy: the data in the file is unaligned.
template <class T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T, class F>
void DecodeElements(const std::byte* src, uint64_t n, float* dst, F to_float) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = to_float(Load<T>(src + i * sizeof(T)));
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  constexpr std::string_view kNames[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32",
                                         "INT32", "FLOAT32", "BOOL",  "STRING", "ARRAY",
                                         "UINT64", "INT64", "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : std::string_view("INVALID");
}

size_t GgufArray::size() const {
  return std::visit(
      [](const auto& v) -> size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) {
          return 0;
        } else {
          return v.size();
        }
      },
      values);
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::span<const GgmlTypeInfo> AllGgmlTypes() { return kGgmlTypes; }

std::string GgmlTypeName(uint32_t id) {
  const GgmlTypeInfo* t = FindGgmlType(id);
  return t ? std::string(t->name) : fmt::format("unknown({})", id);
}

GgufFile GgufFile::Open(const std::filesystem::path& path) {
  GgufFile f(MappedFile{path});
  f.Parse();
  return f;
}

void GgufFile::Parse() {
  const std::span<const std::byte> bytes = file_.bytes();
  const std::string file = path().string();
  Cursor c(bytes, file);

  // Rule 1: magic, version, counts.
  const uint32_t magic = c.Read<uint32_t>("header");
  if (magic != kGgufMagic) Fail("{}: bad magic 0x{:08x}: not a GGUF file (expected 'GGUF')", file, magic);
  version_ = c.Read<uint32_t>("header");
  // ggml's heuristic: a byte-swapped (big-endian) file has its version in the high half.
  if (version_ != 0 && (version_ & 0xFFFF) == 0)
    Fail("{}: big-endian (byte-swapped) GGUF files are not supported", file);
  if (version_ == 1) Fail("{}: GGUF version 1 is not supported (32-bit counts); re-convert the model", file);
  if (version_ < 2 || version_ > 3) Fail("{}: unsupported GGUF version {} (supported: 2, 3)", file, version_);
  const uint64_t tensor_count = c.Read<uint64_t>("header");
  const uint64_t kv_count = c.Read<uint64_t>("header");
  if (kv_count > c.remaining() / kMinKvBytes)
    Fail("{}: kv_count {} cannot fit in the {} bytes after the header", file, kv_count, c.remaining());
  if (tensor_count > c.remaining() / kMinTensorInfoBytes)
    Fail("{}: tensor_count {} cannot fit in the {} bytes after the header", file, tensor_count,
         c.remaining());

  // Rules 2-3: key-value pairs.
  kvs_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = c.ReadString(kMaxKeyBytes, fmt::format("key #{}", i));
    if (key.empty()) Fail("{}: key #{} is empty", file, i);
    if (kv_index_.count(key)) Fail("{}: duplicate key '{}'", file, key);
    const std::string where = fmt::format("key '{}'", key);
    const uint32_t type = c.Read<uint32_t>(where);
    GgufValue value = ReadValue(c, type, file, where);
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back({std::move(key), std::move(value)});
  }

  // Rule 4: alignment.
  if (const GgufValue* a = Find("general.alignment")) {
    const auto* a32 = std::get_if<uint32_t>(a);
    if (!a32) Fail("{}: key 'general.alignment' has type {}, expected UINT32", file, TypeDescription(*a));
    if (*a32 == 0 || !std::has_single_bit(*a32))
      Fail("{}: key 'general.alignment' must be a non-zero power of two, got {}", file, *a32);
    alignment_ = *a32;
  } else {
    alignment_ = kDefaultAlignment;
  }

  // Rule 5: tensor infos.
  if (tensor_count > c.remaining() / kMinTensorInfoBytes)
    Fail("{}: tensor_count {} cannot fit in the {} bytes after the metadata", file, tensor_count,
         c.remaining());
  tensors_.reserve(tensor_count);
  std::vector<uint64_t> byte_sizes;
  byte_sizes.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = c.ReadString(kMaxStringBytes, fmt::format("tensor #{}", i));
    if (t.name.size() > kMaxTensorNameBytes)
      Fail("{}: tensor '{}': name is {} bytes; ggml allows at most {}", file, t.name, t.name.size(),
           kMaxTensorNameBytes);
    if (tensor_index_.count(t.name)) Fail("{}: duplicate tensor '{}'", file, t.name);
    const std::string where = fmt::format("tensor '{}'", t.name);
    const uint32_t n_dims = c.Read<uint32_t>(where);
    if (n_dims > kMaxDims) Fail("{}: {}: {} dimensions; ggml allows at most {}", file, where, n_dims, kMaxDims);
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.Read<uint64_t>(where);
      // ggml stores ne as int64: larger values are negative there.
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        Fail("{}: {}: dimension {} is {}, negative as int64", file, where, d, ne);
      if (__builtin_mul_overflow(t.n_elements, ne, &t.n_elements) ||
          t.n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        Fail("{}: {}: element count overflows int64", file, where);
      t.dims.push_back(ne);
    }
    t.ggml_type = c.Read<uint32_t>(where);
    const GgmlTypeInfo* type = FindGgmlType(t.ggml_type);
    if (!type) Fail("{}: {}: unknown ggml type id {}", file, where, t.ggml_type);
    if (t.row_length() % type->block_elems != 0)
      Fail("{}: {}: row length {} is not a multiple of the {} block size {}", file, where,
           t.row_length(), type->name, type->block_elems);
    // n_elements / block = (ne[0] / block) * ne[1] * ne[2] * ne[3] exactly.
    byte_sizes.push_back(CheckedMul(t.n_elements / type->block_elems, type->block_bytes, file + ": " + where));
    t.offset = c.Read<uint64_t>(where);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Rule 6: the data section starts at the next multiple of the alignment (absolute offset).
  // pos <= file size and alignment < 2^32, so this cannot overflow.
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = bytes.size() > data_offset_ ? bytes.size() - data_offset_ : 0;

  // Rules 7-8. Leniency (allowed by formats.md 2.3 rule 7): any aligned, in-bounds,
  // non-overlapping layout is accepted, not only ggml's contiguous one; and the final tensor's
  // trailing padding may be missing, because llama.cpp's mmap loader only bounds-checks each
  // tensor's own bytes, so such files load there too.
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    const uint64_t n = byte_sizes[i];
    if (t.offset % alignment_ != 0)
      Fail("{}: tensor '{}': offset {} is not a multiple of the alignment {}", file, t.name, t.offset,
           alignment_);
    if (n > data_size || t.offset > data_size - n)
      Fail("{}: tensor '{}': {} bytes at data offset {} extend beyond the end of the file (the "
           "data section holds {} bytes from byte {})",
           file, t.name, n, t.offset, data_size, data_offset_);
    if (n > 0) t.data = bytes.subspan(data_offset_ + t.offset, n);
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors_[a].offset != tensors_[b].offset ? tensors_[a].offset < tensors_[b].offset
                                                    : byte_sizes[a] < byte_sizes[b];
  });
  // Sorted by offset, a non-empty tensor can only overlap the previous non-empty one (an
  // earlier one reaching into it would already have overlapped that one). Ends cannot overflow:
  // every tensor was checked to lie inside the data section.
  const GgufTensorInfo* previous = nullptr;
  uint64_t previous_end = 0;
  for (const size_t i : order) {
    if (byte_sizes[i] == 0) continue;
    if (previous && previous_end > tensors_[i].offset)
      Fail("{}: tensors '{}' and '{}' overlap in the data section", file, previous->name,
           tensors_[i].name);
    previous = &tensors_[i];
    previous_end = tensors_[i].offset + byte_sizes[i];
  }
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufValue& GgufFile::Get(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) Fail("{}: missing key '{}'", path().string(), key);
  return *v;
}

void GgufFile::FailType(std::string_view key, const GgufValue& v, std::string_view expected) const {
  Fail("{}: key '{}' has type {}, expected {}", path().string(), key, TypeDescription(v), expected);
}

const std::string& GgufFile::GetString(std::string_view key) const {
  const GgufValue& v = Get(key);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  FailType(key, v, "STRING");
}

uint64_t GgufFile::GetU64(std::string_view key) const {
  const GgufValue& v = Get(key);
  return std::visit(
      [&](const auto& x) -> uint64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) Fail("{}: key '{}' is negative ({})", path().string(), key, x);
          }
          return static_cast<uint64_t>(x);
        } else {
          FailType(key, v, "an unsigned integer");
        }
      },
      v);
}

uint32_t GgufFile::GetU32(std::string_view key) const {
  const uint64_t x = GetU64(key);
  if (x > std::numeric_limits<uint32_t>::max())
    Fail("{}: key '{}' = {} does not fit in 32 bits", path().string(), key, x);
  return static_cast<uint32_t>(x);
}

float GgufFile::GetF32(std::string_view key) const {
  const GgufValue& v = Get(key);
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<float>(*d);
  FailType(key, v, "FLOAT32");
}

bool GgufFile::GetBool(std::string_view key) const {
  const GgufValue& v = Get(key);
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  FailType(key, v, "BOOL");
}

const GgufArray& GgufFile::GetArray(std::string_view key) const {
  const GgufValue& v = Get(key);
  if (const auto* a = std::get_if<GgufArray>(&v)) return *a;
  FailType(key, v, "ARRAY");
}

uint32_t GgufFile::GetU32Or(std::string_view key, uint32_t fallback) const {
  return Find(key) ? GetU32(key) : fallback;
}
float GgufFile::GetF32Or(std::string_view key, float fallback) const {
  return Find(key) ? GetF32(key) : fallback;
}
bool GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) ? GetBool(key) : fallback;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void DequantizeGgufRow(uint32_t ggml_type, const std::byte* src, uint64_t n, float* dst) {
  const GgmlTypeInfo* info = FindGgmlType(ggml_type);
  if (!info) Fail("unknown ggml type id {}", ggml_type);
  if (!info->dequantize) Fail("dequantizing ggml type {} is not supported yet", info->name);
  if (n % info->block_elems != 0)
    Fail("{} elements is not a whole number of {} blocks of {}", n, info->name, info->block_elems);
  if (n == 0) return;
  switch (ggml_type) {
    case kGgmlF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case kGgmlF16: return DecodeElements<uint16_t>(src, n, dst, Fp16ToFp32);
    case kGgmlBF16: return DecodeElements<uint16_t>(src, n, dst, Bf16ToFp32);
    case kGgmlF64: return DecodeElements<double>(src, n, dst, [](double x) { return static_cast<float>(x); });
    case kGgmlI8: return DecodeElements<int8_t>(src, n, dst, [](int8_t x) { return static_cast<float>(x); });
    case kGgmlI16: return DecodeElements<int16_t>(src, n, dst, [](int16_t x) { return static_cast<float>(x); });
    case kGgmlI32: return DecodeElements<int32_t>(src, n, dst, [](int32_t x) { return static_cast<float>(x); });
    case kGgmlI64: return DecodeElements<int64_t>(src, n, dst, [](int64_t x) { return static_cast<float>(x); });
    default: break;
  }
  const GgmlBlockFormat* blocks = FindGgmlBlockFormat(ggml_type);
  LOWBIT_CHECK(blocks != nullptr);  // the table says `dequantize` but no block layout is wired up
  DecodeGgmlBlocks(*blocks, src, n / info->block_elems, dst);
}

std::vector<float> DequantizeGgufTensor(const GgufTensorInfo& tensor, ConsumedBytes consumed) {
  const GgmlTypeInfo* info = FindGgmlType(tensor.ggml_type);
  if (!info) Fail("tensor '{}': unknown ggml type id {}", tensor.name, tensor.ggml_type);
  if (!info->dequantize) {
    std::vector<std::string_view> supported;
    for (const GgmlTypeInfo& t : kGgmlTypes)
      if (t.dequantize) supported.push_back(t.name);
    Fail("tensor '{}': dequantizing ggml type {} is not supported yet (supported: {})", tensor.name,
         info->name, fmt::join(supported, ", "));
  }
  if (tensor.n_elements % info->block_elems != 0 ||
      tensor.data.size() != tensor.n_elements / info->block_elems * info->block_bytes)
    Fail("tensor '{}': {} bytes do not hold {} {} elements", tensor.name, tensor.data.size(),
         tensor.n_elements, info->name);
  std::vector<float> out(tensor.n_elements);
  // Slices of about 4 MiB of input, whole blocks each.
  const uint64_t blocks = tensor.n_elements / info->block_elems;
  const uint64_t slice = std::max<uint64_t>(1, (uint64_t{4} << 20) / info->block_bytes);
  try {
    for (uint64_t b = 0; b < blocks; b += slice) {
      const uint64_t count = std::min(slice, blocks - b);
      const std::span<const std::byte> bytes = tensor.data.subspan(b * info->block_bytes, count * info->block_bytes);
      DequantizeGgufRow(tensor.ggml_type, bytes.data(), count * info->block_elems, out.data() + b * info->block_elems);
      if (consumed) consumed(bytes);
    }
  } catch (const Error& e) {
    Fail("tensor '{}': {}", tensor.name, e.what());
  }
  return out;
}

}  // namespace lowbit
