#include "core/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace lowbit {

std::string ReadTextFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// The writer's pid when `name` is `<stem>.tmp-<pid>` (stem empty: any stem), else 0.
pid_t TemporaryOwner(std::string_view name, std::string_view stem) {
  constexpr std::string_view kTag = ".tmp-";
  size_t at;
  if (!stem.empty()) {
    if (!name.starts_with(stem) || name.substr(stem.size()).substr(0, kTag.size()) != kTag) return 0;
    at = stem.size();
  } else {
    at = name.rfind(kTag);
    if (at == std::string_view::npos || at == 0) return 0;
  }
  const std::string_view digits = name.substr(at + kTag.size());
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return 0;
  return pid;
}

bool ProcessIsGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

void RemoveStale(const std::filesystem::path& dir, std::string_view stem) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir.empty() ? std::filesystem::path(".") : dir, ec);
  if (ec) return;  // no folder yet: nothing to sweep
  for (const std::filesystem::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    const pid_t pid = TemporaryOwner(name, stem);
    if (pid == 0 || pid == ::getpid() || !ProcessIsGone(pid)) continue;
    std::error_code ignored;
    std::filesystem::remove_all(e.path(), ignored);
  }
}

}  // namespace

void RemoveStaleTemporaries(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  if (!p.has_filename()) p = p.parent_path();  // "out/" names the folder "out"
  if (p.filename().empty()) return;
  RemoveStale(p.parent_path(), p.filename().string());
}

void RemoveStaleTemporariesIn(const std::filesystem::path& dir) { RemoveStale(dir, ""); }

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), tmp_(path_.string() + ".tmp-" + std::to_string(::getpid())) {
  RemoveStaleTemporaries(path_);
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) Fail("{}: cannot create: {}", tmp_.string(), std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  out_.close();
  std::error_code ignored;
  std::filesystem::remove(tmp_, ignored);
}

void AtomicFileWriter::Write(std::span<const std::byte> bytes) {
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out_) Fail("{}: write failed", tmp_.string());
}

void AtomicFileWriter::WriteAt(uint64_t offset, std::span<const std::byte> bytes) {
  const std::streampos end = out_.tellp();
  out_.seekp(static_cast<std::streamoff>(offset));
  Write(bytes);
  out_.seekp(end);
  if (!out_) Fail("{}: write failed", tmp_.string());
}

void AtomicFileWriter::Commit() {
  out_.flush();
  if (!out_) Fail("{}: write failed", tmp_.string());
  out_.close();
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) Fail("{}: cannot rename into place: {}", path_.string(), ec.message());
  committed_ = true;
}

void WriteFileAtomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  AtomicFileWriter out(path);
  out.Write(bytes);
  out.Commit();
}

void WriteFileAtomic(const std::filesystem::path& path, std::string_view text) {
  WriteFileAtomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    Fail("{}: cannot stat: {}", path.string(), std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("{}: not a regular file", path.string());
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      Fail("{}: mmap failed: {}", path.string(), std::strerror(errno));
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { Release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::Release() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace lowbit

namespace lowbit {

void ReleasePages(std::span<const std::byte> bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace lowbit
