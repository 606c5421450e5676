#include "io/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/minifloat.h"

namespace lowbit {
namespace {

using nlohmann::json;

// The format is little-endian and we memcpy elements straight out of the mapping.
static_assert(std::endian::native == std::endian::little, "lowbit assumes a little-endian host");

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
constexpr std::string_view kSingleFileName = "model.safetensors";
// A valid header nests three deep (object > tensor object > shape array); allow some slack but
// bound it so a hostile header cannot build arbitrarily deep values.
constexpr int kMaxJsonDepth = 8;

template <class T>
T LoadLE(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Elements may be unaligned in the mapping, hence memcpy loads.
template <class T, class F>
void ConvertAll(const std::byte* src, std::span<float> out, F to_float) {
  for (uint64_t i = 0; i < out.size(); ++i) out[i] = to_float(LoadLE<T>(src + i * sizeof(T)));
}

std::string ShapeString(std::span<const uint64_t> shape) {
  return shape.empty() ? std::string("scalar") : fmt::format("{}", fmt::join(shape, "x"));
}

// Strict JSON parse. nlohmann keeps one value of a duplicated key silently, but the spec
// forbids duplicates (and a duplicated tensor name would hide data), so the parser callback
// tracks the keys of every open object. `top_noun` names top-level keys in messages.
json ParseJsonStrict(std::string_view text, const std::string& where, std::string_view top_noun) {
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> stack;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) Fail("{}: JSON nests deeper than {} levels", where, kMaxJsonDepth);
    if (event == json::parse_event_t::object_start) {
      stack.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      stack.pop_back();
    } else if (event == json::parse_event_t::key) {
      std::string key = parsed.get<std::string>();
      if (!stack.back().keys.insert(key).second) {
        if (stack.size() == 1) Fail("{}: duplicate {} '{}'", where, top_noun, key);
        Fail("{}: {} '{}': duplicate key '{}'", where, stack.size() == 2 ? top_noun : "object",
             stack[stack.size() - 2].last_key, key);
      }
      stack.back().last_key = std::move(key);
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    Fail("{}: invalid JSON: {}", where, e.what());
  }
}

struct RawEntry {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  uint64_t begin;
  uint64_t end;
};

bool IsUnsignedPair(const json& j) {
  return j.is_array() && j.size() == 2 && j[0].is_number_unsigned() && j[1].is_number_unsigned();
}

// Validates one header entry against formats.md 9.2 rules 4 and 6, plus the buffer bound.
RawEntry ParseEntry(const std::string& file, const std::string& name, const json& entry,
                    uint64_t data_bytes) {
  if (!entry.is_object()) Fail("{}: tensor '{}': entry is not a JSON object", file, name);
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      Fail("{}: tensor '{}': unexpected field '{}'", file, name, key);
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) Fail("{}: tensor '{}': missing field '{}'", file, name, field);

  const json& dtype_json = entry["dtype"];
  if (!dtype_json.is_string()) Fail("{}: tensor '{}': 'dtype' must be a string", file, name);
  const std::string& dtype_name = dtype_json.get_ref<const std::string&>();
  const std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) {
    if (IsUnsupportedSafetensorsDType(dtype_name))
      Fail("{}: tensor '{}': dtype '{}' is not supported by lowbit", file, name, dtype_name);
    Fail("{}: tensor '{}': unknown dtype '{}'", file, name, dtype_name);
  }

  const json& shape_json = entry["shape"];
  if (!shape_json.is_array())
    Fail("{}: tensor '{}': 'shape' must be an array of non-negative integers", file, name);
  RawEntry e{name, *dtype, {}, 0, 0};
  e.shape.reserve(shape_json.size());
  for (const json& d : shape_json) {
    if (!d.is_number_unsigned())
      Fail("{}: tensor '{}': 'shape' must be an array of non-negative integers, got {}", file, name,
           shape_json.dump());
    e.shape.push_back(d.get<uint64_t>());
  }

  const json& offsets = entry["data_offsets"];
  if (!IsUnsignedPair(offsets))
    Fail("{}: tensor '{}': 'data_offsets' must be [begin, end] of non-negative integers, got {}",
         file, name, offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end)
    Fail("{}: tensor '{}': data_offsets [{}, {}) has begin after end", file, name, e.begin, e.end);

  const std::string what = fmt::format("{}: tensor '{}': shape {}", file, name, shape_json.dump());
  uint64_t bytes = DTypeSize(e.dtype);
  for (uint64_t d : e.shape) bytes = CheckedMul(bytes, d, what);
  if (e.end - e.begin != bytes)
    Fail("{}: tensor '{}': data_offsets [{}, {}) do not match {} {} ({} bytes)", file, name,
         e.begin, e.end, ShapeString(e.shape), dtype_name, bytes);
  if (e.end > data_bytes)
    Fail("{}: tensor '{}': data_offsets [{}, {}) extend past the {}-byte data buffer", file, name,
         e.begin, e.end, data_bytes);
  return e;
}

// Rules 5 and 7: sorted by begin, the ranges must tile [0, data_bytes) exactly. Overlaps were a
// demonstrated DoS; holes and trailing bytes could smuggle a second file format (polyglots).
void CheckTiling(const std::string& file, std::vector<RawEntry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const RawEntry& e = entries[i];
    if (e.begin < covered) {
      const RawEntry& p = entries[i - 1];
      Fail("{}: tensor '{}': data_offsets [{}, {}) overlap tensor '{}' [{}, {})", file, e.name,
           e.begin, e.end, p.name, p.begin, p.end);
    }
    if (e.begin > covered) {
      if (i == 0)
        Fail("{}: tensor '{}': data starts at {}, leaving a hole before it", file, e.name, e.begin);
      Fail("{}: tensor '{}': data starts at {} but tensor '{}' ends at {} (holes are not allowed)",
           file, e.name, e.begin, entries[i - 1].name, covered);
    }
    covered = e.end;
  }
  if (covered != data_bytes)
    Fail("{}: data buffer has {} bytes but tensors cover only {} (trailing bytes are not allowed)",
         file, data_bytes, covered);
}

}  // namespace

uint64_t TensorView::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n = CheckedMul(n, d, fmt::format("tensor '{}'", name));
  return n;
}

SafetensorsFile SafetensorsFile::Open(const std::filesystem::path& path) {
  SafetensorsFile st(MappedFile{path});
  const std::string file = path.string();
  const std::span<const std::byte> bytes = st.file_.bytes();

  // Rule 1. Compare against size - 8 rather than computing 8 + N, which could wrap.
  if (bytes.size() < 8)
    Fail("{}: file is {} bytes, shorter than the 8-byte header length", file, bytes.size());
  const uint64_t header_len = LoadLE<uint64_t>(bytes.data());
  if (header_len > kMaxSafetensorsHeaderBytes)
    Fail("{}: header length {} exceeds the {}-byte limit", file, header_len,
         kMaxSafetensorsHeaderBytes);
  if (header_len > bytes.size() - 8)
    Fail("{}: header length {} exceeds the {} bytes that follow it", file, header_len,
         bytes.size() - 8);
  const uint64_t data_bytes = bytes.size() - 8 - header_len;
  const std::span<const std::byte> data = bytes.subspan(8 + header_len);

  // Rules 2 and 3.
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  if (header.empty() || header.front() != '{')
    Fail("{}: header does not start with '{{' (not a safetensors file?)", file);
  const json root = ParseJsonStrict(header, file + ": header", "tensor");
  if (!root.is_object()) Fail("{}: header is not a JSON object", file);

  std::vector<RawEntry> entries;
  entries.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) Fail("{}: '__metadata__' must be an object", file);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          Fail("{}: '__metadata__' key '{}' must map to a string, got {}", file, mk, mv.dump());
        st.metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    entries.push_back(ParseEntry(file, key, value, data_bytes));
  }
  CheckTiling(file, entries, data_bytes);

  st.tensors_.reserve(entries.size());
  for (RawEntry& e : entries) {
    st.by_name_.emplace(e.name, st.tensors_.size());
    st.tensors_.push_back(TensorView{std::move(e.name), e.dtype, std::move(e.shape),
                                     data.subspan(e.begin, e.end - e.begin)});
  }
  return st;
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::Get(std::string_view name) const {
  const TensorView* t = Find(name);
  if (t == nullptr) Fail("{}: no tensor '{}'", path().string(), name);
  return *t;
}

namespace {

// The element count of a tensor ToFloat32 can convert: a numeric dtype and data of its size.
uint64_t ConvertibleCount(const TensorView& t) {
  if (t.dtype == DType::kBool) Fail("tensor '{}': BOOL data cannot be converted to float", t.name);
  const uint64_t n = t.numel();
  const uint64_t size = DTypeSize(t.dtype);
  if (t.data.size() / size != n || t.data.size() % size != 0)
    Fail("tensor '{}': {} bytes of data do not match {} {}", t.name, t.data.size(),
         ShapeString(t.shape), DTypeName(t.dtype));
  return n;
}

}  // namespace

void ToFloat32(const TensorView& t, std::span<float> out) {
  LOWBIT_CHECK(out.size() == ConvertibleCount(t));
  const std::byte* p = t.data.data();
  auto cast = [](auto v) { return static_cast<float>(v); };
  switch (t.dtype) {
    case DType::kBool:
      break;
    case DType::kU8:
      return ConvertAll<uint8_t>(p, out, cast);
    case DType::kI8:
      return ConvertAll<int8_t>(p, out, cast);
    case DType::kF8E4M3:
      return ConvertAll<uint8_t>(p, out, [](uint8_t c) { return DecodeMiniFloat(kE4M3, c); });
    case DType::kF8E5M2:
      return ConvertAll<uint8_t>(p, out, [](uint8_t c) { return DecodeMiniFloat(kE5M2, c); });
    case DType::kF8E8M0:
      return ConvertAll<uint8_t>(p, out, [](uint8_t c) { return DecodeMiniFloat(kE8M0, c); });
    case DType::kI16:
      return ConvertAll<int16_t>(p, out, cast);
    case DType::kU16:
      return ConvertAll<uint16_t>(p, out, cast);
    case DType::kF16:
      return ConvertAll<uint16_t>(p, out, [](uint16_t h) { return Fp16ToFp32(h); });
    case DType::kBF16:
      return ConvertAll<uint16_t>(p, out, [](uint16_t b) { return Bf16ToFp32(b); });
    case DType::kI32:
      return ConvertAll<int32_t>(p, out, cast);
    case DType::kU32:
      return ConvertAll<uint32_t>(p, out, cast);
    case DType::kF32:
      return ConvertAll<float>(p, out, cast);
    case DType::kI64:
      return ConvertAll<int64_t>(p, out, cast);
    case DType::kU64:
      return ConvertAll<uint64_t>(p, out, cast);
    case DType::kF64:
      return ConvertAll<double>(p, out, cast);
  }
  throw std::logic_error("ToFloat32: unhandled DType");  // BOOL, rejected above
}

std::vector<float> ToFloat32(const TensorView& t) {
  std::vector<float> out(ConvertibleCount(t));
  ToFloat32(t, out);
  return out;
}

// ----------------------------------------------------------------------------- SafetensorsModel

namespace {

// Shard names come from a file we do not trust; they must name a sibling of the index, never a
// path elsewhere (formats.md 9.2 rule 9).
void CheckShardName(const std::string& index, const std::string& tensor, const std::string& shard) {
  if (shard.empty() || shard == "." || shard == ".." ||
      shard.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos)
    Fail("{}: tensor '{}': shard file name '{}' is not a plain file name", index, tensor, shard);
}

}  // namespace

SafetensorsModel SafetensorsModel::Open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  SafetensorsModel model;
  model.path_ = path;
  fs::path index_path;
  if (fs::is_directory(path)) {
    if (fs::exists(path / kIndexFileName)) {
      index_path = path / kIndexFileName;
    } else if (fs::exists(path / kSingleFileName)) {
      model.shards_.push_back(SafetensorsFile::Open(path / kSingleFileName));
    } else {
      Fail("{}: folder has neither {} nor {}", path.string(), kIndexFileName, kSingleFileName);
    }
  } else if (path.extension() == ".json") {
    index_path = path;
  } else {
    model.shards_.push_back(SafetensorsFile::Open(path));
  }
  if (index_path.empty()) {
    model.IndexTensors(path.string());
    return model;
  }

  const std::string index = index_path.string();
  // Real indexes are kilobytes; the cap keeps a hostile one from being read whole.
  std::error_code ec;
  const uintmax_t index_size = fs::file_size(index_path, ec);
  if (ec) Fail("{}: cannot read: {}", index, ec.message());
  if (index_size > kMaxSafetensorsHeaderBytes)
    Fail("{}: index file exceeds {} bytes", index, kMaxSafetensorsHeaderBytes);
  const json root = ParseJsonStrict(ReadTextFile(index_path), index, "key");
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    Fail("{}: expected a JSON object with a 'weight_map' object", index);
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::map<std::string, size_t> shard_index;      // shard file name -> index into shards_
  for (const auto& [tensor, shard] : root["weight_map"].items()) {
    if (!shard.is_string())
      Fail("{}: weight_map: tensor '{}' must map to a file name string", index, tensor);
    const std::string& shard_name = shard.get_ref<const std::string&>();
    CheckShardName(index, tensor, shard_name);
    weight_map.emplace(tensor, shard_name);
    if (shard_index.emplace(shard_name, model.shards_.size()).second)
      model.shards_.push_back(SafetensorsFile::Open(index_path.parent_path() / shard_name));
  }
  model.IndexTensors(index);  // rejects a tensor present in two shards

  for (const auto& [tensor, shard_name] : weight_map) {
    const SafetensorsFile& shard = model.shards_[shard_index.at(shard_name)];
    if (shard.Find(tensor) == nullptr)
      Fail("{}: weight_map maps tensor '{}' to shard '{}', which does not contain it", index,
           tensor, shard_name);
  }
  for (const SafetensorsFile& shard : model.shards_)
    for (const TensorView& t : shard.tensors())
      if (!weight_map.contains(t.name))
        Fail("{}: tensor '{}' in shard '{}' is missing from weight_map", index, t.name,
             shard.path().filename().string());
  return model;
}

void SafetensorsModel::IndexTensors(const std::string& where) {
  for (const SafetensorsFile& shard : shards_) {
    for (const TensorView& t : shard.tensors()) {
      auto [it, inserted] = by_name_.emplace(t.name, &t);
      if (!inserted) {
        const SafetensorsFile* other = nullptr;
        for (const SafetensorsFile& s : shards_)
          if (s.Find(t.name) == it->second) other = &s;
        Fail("{}: tensor '{}' appears in two shards, '{}' and '{}'", where, t.name,
             other->path().filename().string(), shard.path().filename().string());
      }
    }
  }
  names_.clear();
  for (const auto& [name, view] : by_name_) names_.push_back(name);
}

const TensorView* SafetensorsModel::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& SafetensorsModel::Get(std::string_view name) const {
  const TensorView* t = Find(name);
  if (t == nullptr) Fail("{}: no tensor '{}'", path_.string(), name);
  return *t;
}

std::span<const std::byte> ExpectTensor(const SafetensorsModel& st, const std::string& name, DType dtype,
                                        const std::vector<uint64_t>& shape, std::string_view what) {
  const TensorView* t = st.Find(name);
  if (!t) Fail("{}: tensor '{}' is missing ({})", st.path().string(), name, what);
  if (t->dtype != dtype || t->shape != shape) {
    std::string file = st.path().string();
    for (const SafetensorsFile& f : st.shards())
      if (f.Find(name)) file = f.path().string();
    Fail("{}: tensor '{}' is {} [{}], expected {} [{}] ({})", file, name, DTypeName(t->dtype),
         fmt::join(t->shape, ", "), DTypeName(dtype), fmt::join(shape, ", "), what);
  }
  return t->data;
}

std::vector<uint32_t> CopyWords(std::span<const std::byte> bytes) {
  std::vector<uint32_t> words(bytes.size() / 4);
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * 4);
  return words;
}

// ------------------------------------------------------------------------------------- Writer

std::string SafetensorsPrefix(const std::string& file, std::span<const TensorEntry> tensors,
                              const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps __metadata__ first and tensors in data order, which makes files easy to
  // inspect; readers do not depend on key order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::unordered_set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors) {
    if (t.name == kMetadataKey) Fail("{}: '{}' is reserved, not a tensor name", file, t.name);
    if (!seen.insert(t.name).second) Fail("{}: duplicate tensor '{}'", file, t.name);
    uint64_t bytes = DTypeSize(t.dtype);
    for (uint64_t d : t.shape)
      bytes = CheckedMul(bytes, d, fmt::format("{}: tensor '{}': shape", file, t.name));
    if (t.bytes != bytes)
      Fail("{}: tensor '{}': {} bytes of data do not match {} {} ({} bytes)", file, t.name, t.bytes,
           ShapeString(t.shape), DTypeName(t.dtype), bytes);
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    if (__builtin_add_overflow(offset, bytes, &offset))  // same span passed many times
      Fail("{}: total tensor data overflows 64 bits", file);
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    Fail("{}: cannot encode header (names and metadata must be UTF-8): {}", file, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');   // so the data buffer starts 8-aligned
  if (text.size() > kMaxSafetensorsHeaderBytes)  // readers, ours included, would reject it
    Fail("{}: header of {} bytes exceeds the {}-byte limit", file, text.size(),
         kMaxSafetensorsHeaderBytes);
  const uint64_t header_len = text.size();
  std::string prefix(sizeof header_len, '\0');
  std::memcpy(prefix.data(), &header_len, sizeof header_len);
  return prefix + text;
}

void WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (const TensorToWrite& t : tensors) entries.push_back({t.name, t.dtype, t.shape, t.data.size()});
  const std::string prefix = SafetensorsPrefix(path.string(), entries, metadata);
  // Streamed tensor by tensor: a whole-file buffer would double the peak memory of a save.
  AtomicFileWriter out(path);
  out.Write(std::as_bytes(std::span(prefix)));
  for (const TensorToWrite& t : tensors) out.Write(t.data);
  out.Commit();
}

}  // namespace lowbit
