// Whole-file helpers. Outputs are written to a temporary sibling and renamed into place, so a
// crash or an error never leaves a partial file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

namespace lowbit {

std::string ReadTextFile(const std::filesystem::path& path);

// Temporaries are named `OUT.tmp-<pid>` (a file or a folder) after the process writing them.
// Removes those beside `path` whose process is gone (kill(pid, 0) fails with ESRCH): the litter
// of a run killed while writing `path`. Live writers' temporaries (and this process's own) are
// left alone; failures to remove are ignored (the next run tries again).
void RemoveStaleTemporaries(const std::filesystem::path& path);
// The same for every `*.tmp-<pid>` entry directly inside `dir` (a folder of temporaries of
// several names, e.g. a run checkpoint's).
void RemoveStaleTemporariesIn(const std::filesystem::path& dir);

// Writes a file in pieces to a temp sibling (`path.tmp-<pid>`, after removing stale ones of dead
// processes); Commit renames it into place, and destruction without Commit removes the temp file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void Write(std::span<const std::byte> bytes);
  // Overwrites bytes already written (a header reserved up front, filled in once known).
  void WriteAt(uint64_t offset, std::span<const std::byte> bytes);
  void Commit();

 private:
  std::filesystem::path path_, tmp_;
  std::ofstream out_;
  bool committed_ = false;
};

// Writes `bytes` to `path` atomically (temp file in the same directory + rename).
void WriteFileAtomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void WriteFileAtomic(const std::filesystem::path& path, std::string_view text);

// A read-only memory mapping of a whole file; empty files map to an empty span.
// Drops the whole pages of a read-only file mapping inside `bytes` from this process's resident
// set once their contents have been copied out (loaders call it per tensor, so peak memory is the
// loaded model, not the model plus the mapped file). Later reads fault the pages back in.
void ReleasePages(std::span<const std::byte> bytes);
// What a converter calls on each piece of its mapped input once copied out (ReleasePages, from a
// loader), so a load's peak holds the model and a few MiB of the file, not also its largest tensor.
using ConsumedBytes = void (*)(std::span<const std::byte>);

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void Release();
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lowbit
