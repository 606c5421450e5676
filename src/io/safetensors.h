// safetensors reading and writing (layout and parser rules: docs formats.md section 9).
//
//   u64 N (little-endian) | N bytes of JSON header, space-padded | data buffer
//
// Files are treated as hostile: Open() enforces every rule of formats.md 9.2 (length caps with
// overflow checks, strict JSON with duplicate keys rejected, known dtypes, overflow-checked
// shapes, offsets that tile the data buffer exactly: no overlaps, no holes, no trailing bytes)
// before any TensorView is handed out. Every error is a lowbit::Error naming the file and the
// tensor or field at fault.
//
// Tensor data is never copied: a TensorView points into a read-only mmap owned by its
// SafetensorsFile, so views live exactly as long as the file object (moves keep them valid).
// Data may be unaligned (readers must not assume alignment), so convert with ToFloat32 or
// memcpy rather than casting pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_util.h"
#include "io/dtype.h"

namespace lowbit {

// Reference cap on the JSON header size (safetensors' own limit), so a hostile length prefix
// cannot make us parse or allocate gigabytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // row-major; empty = scalar (numel 1)
  std::span<const std::byte> data;

  // Product of shape; throws lowbit::Error on overflow (only possible for hand-built views).
  uint64_t numel() const;
};

class SafetensorsFile {
 public:
  static SafetensorsFile Open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::filesystem::path& path() const { return file_.path(); }
  // Sorted by data offset, i.e. in the order the bytes appear in the file.
  std::span<const TensorView> tensors() const { return tensors_; }
  const TensorView* Find(std::string_view name) const;  // nullptr if absent
  const TensorView& Get(std::string_view name) const;   // throws Error if absent
  // The optional "__metadata__" object (string -> string).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  explicit SafetensorsFile(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // index into tensors_
  std::map<std::string, std::string> metadata_;
};

// Converts any numeric dtype to float (F64 and 64-bit integers round to nearest float).
// Throws Error for BOOL, and if data.size() does not match shape x dtype.
std::vector<float> ToFloat32(const TensorView& tensor);
// The same into `out`, which must hold numel() values.
void ToFloat32(const TensorView& tensor, std::span<float> out);

// A Hugging Face checkpoint: a folder with model.safetensors.index.json (sharded) or
// model.safetensors, or a path to a single .safetensors file or to an index .json file.
// For sharded checkpoints the index must agree exactly with the shards: every weight_map entry
// is in the shard it names, every tensor of every shard is in weight_map, and no tensor is in
// two shards (formats.md 9.2 rule 9).
class SafetensorsModel {
 public:
  static SafetensorsModel Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const TensorView* Find(std::string_view name) const;              // nullptr if absent
  const TensorView& Get(std::string_view name) const;               // throws Error if absent
  const std::vector<std::string>& names() const { return names_; }  // sorted
  std::span<const SafetensorsFile> shards() const { return shards_; }

 private:
  SafetensorsModel() = default;
  void IndexTensors(const std::string& where);  // `where` names the file for errors

  std::filesystem::path path_;
  // Moving a vector keeps its elements (and so the TensorViews they own) in place, which is
  // what makes the pointers in by_name_ stable; by_name_ is built after shards_ is complete.
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, const TensorView*, std::less<>> by_name_;
  std::vector<std::string> names_;
};

// The bytes of tensor `name` after checking that it exists with `dtype` and `shape`; Error naming
// the shard, the tensor and `what` it should hold otherwise.
std::span<const std::byte> ExpectTensor(const SafetensorsModel& st, const std::string& name, DType dtype,
                                        const std::vector<uint64_t>& shape, std::string_view what);
// A copy of an int32 tensor's bytes as words (safetensors data need not be 4-aligned).
std::vector<uint32_t> CopyWords(std::span<const std::byte> bytes);

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  // exactly numel x DTypeSize(dtype) bytes, little-endian
};

// Writes tensors contiguously in the given order after a space-padded header whose length is a
// multiple of 8 (so the data buffer starts 8-aligned). Validates sizes and rejects duplicate
// or reserved names before writing anything; the file appears atomically.
void WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A tensor's entry in a safetensors header: its data is `bytes` long, wherever it is held.
struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  uint64_t bytes;
};
// The file's first bytes for tensors laid out contiguously in this order: the 8-byte length and
// the padded header WriteSafetensors writes, after the same checks (`file` names it in errors).
std::string SafetensorsPrefix(const std::string& file, std::span<const TensorEntry> tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace lowbit
