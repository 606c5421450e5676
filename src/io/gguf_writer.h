// GGUF v3 writing (formats.md 2.1), the inverse of GgufFile: metadata, then tensor infos with
// their offsets, then the data section. Tensors are declared up front (name and shape) and their
// bytes then arrive one tensor at a time, in declaration order, each with its ggml type, so an
// exporter never holds more than one tensor and may decide a tensor's type when it has read it.
// The header's size does not depend on the types or offsets, so it is reserved first and filled in
// by Commit. The file is written to a temporary sibling and renamed by Commit: an error or a crash
// never leaves a partial .gguf.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "io/gguf.h"

namespace lowbit {

class GgufWriter {
 public:
  // `alignment` must be a power of two; a value other than ggml's default 32 is recorded as
  // general.alignment.
  explicit GgufWriter(std::filesystem::path path, uint32_t alignment = 32);

  // Metadata, kept in call order; a repeated key is a programming error.
  void Set(std::string key, GgufValue value);
  // Declares the next tensor (at most 4 dims, ne[0] the row length); all before the first write.
  void DeclareTensor(std::string name, std::vector<uint64_t> ne);

  // The next declared tensor's bytes in `ggml_type`: exactly TensorBytes(ggml_type, ne) of them.
  void WriteTensor(std::string_view name, uint32_t ggml_type, std::span<const std::byte> bytes);
  // All declared tensors must have been written. Returns the file's size.
  uint64_t Commit();

  // Bytes of a tensor of this type and shape (whole blocks), as ggml_nbytes computes them.
  static uint64_t TensorBytes(uint32_t ggml_type, std::span<const uint64_t> ne);
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Declared {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;
  };
  std::vector<std::byte> Header() const;
  void Begin();

  std::filesystem::path path_;
  uint32_t alignment_;
  std::vector<GgufKeyValue> kvs_;
  std::vector<Declared> tensors_;
  uint64_t data_bytes_ = 0;
  std::unique_ptr<AtomicFileWriter> out_;
  size_t next_ = 0;
};

}  // namespace lowbit
