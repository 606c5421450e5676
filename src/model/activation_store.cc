#include "model/activation_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lowbit {

ActivationStore::ActivationStore(size_t batches, uint64_t budget_bytes, std::filesystem::path spill_dir)
    : slots_(batches), budget_(budget_bytes), spill_dir_(std::move(spill_dir)) {}

ActivationStore::~ActivationStore() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t ActivationStore::ResidentBytes() const {
  uint64_t total = 0;
  for (const Slot& s : slots_)
    if (s.resident) total += (s.data.hidden.size() + s.data.input.size()) * sizeof(float);
  return total;
}

void ActivationStore::ForEach(bool modifies, const std::function<void(size_t, BatchActivations&)>& fn) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (!slot.resident) Load(slot);
    fn(i, slot.data);
    if (modifies) slot.saved = false;
    const uint64_t resident = ResidentBytes();
    peak_resident_ = std::max(peak_resident_, resident);
    // The batches before this one stay in memory: each pass over the batches then reads and
    // writes only the ones past the budget.
    if (budget_ > 0 && resident > budget_) Spill(slot);
  }
}

namespace {

void WriteAt(int fd, const float* data, uint64_t floats, uint64_t offset_floats, const std::filesystem::path& path) {
  const auto* p = reinterpret_cast<const char*>(data);
  uint64_t left = floats * sizeof(float), at = offset_floats * sizeof(float);
  while (left > 0) {
    const ssize_t n = ::pwrite(fd, p, left, static_cast<off_t>(at));
    if (n <= 0) Fail("{}: writing calibration activations failed: {}", path.string(), std::strerror(errno));
    p += n, left -= static_cast<uint64_t>(n), at += static_cast<uint64_t>(n);
  }
}

void ReadAt(int fd, float* data, uint64_t floats, uint64_t offset_floats, const std::filesystem::path& path) {
  auto* p = reinterpret_cast<char*>(data);
  uint64_t left = floats * sizeof(float), at = offset_floats * sizeof(float);
  while (left > 0) {
    const ssize_t n = ::pread(fd, p, left, static_cast<off_t>(at));
    if (n < 0) Fail("{}: reading calibration activations back failed: {}", path.string(), std::strerror(errno));
    if (n == 0)
      Fail("{}: the activation spill file ends at byte {}, before the {} bytes spilled there (truncated by "
           "another process?)", path.string(), at, left);
    p += n, left -= static_cast<uint64_t>(n), at += static_cast<uint64_t>(n);
  }
}

}  // namespace

void ActivationStore::Spill(Slot& slot) {
  if (!slot.saved) {
    if (fd_ < 0) {
      const std::filesystem::path dir = spill_dir_.empty() ? std::filesystem::temp_directory_path() : spill_dir_;
      std::string name = (dir / "lowbit-activations-XXXXXX").string();
      fd_ = ::mkstemp(name.data());
      if (fd_ < 0) Fail("{}: cannot create the activation spill file: {}", name, std::strerror(errno));
      spill_path_ = name;
      ::unlink(name.c_str());  // the open descriptor keeps it until this store is gone
    }
    slot.hidden_size = slot.data.hidden.size();
    slot.input_size = slot.data.input.size();
    const uint64_t need = slot.hidden_size + slot.input_size;
    if (need > slot.capacity) {  // a new region at the end (inputs grow from dim to ffn once)
      slot.offset = file_floats_;
      slot.capacity = need;
      file_floats_ += need;
    }
    WriteAt(fd_, slot.data.hidden.data(), slot.hidden_size, slot.offset, spill_path_);
    WriteAt(fd_, slot.data.input.data(), slot.input_size, slot.offset + slot.hidden_size, spill_path_);
    bytes_written_ += need * sizeof(float);
    slot.saved = true;
  }
  std::vector<float>().swap(slot.data.hidden);
  std::vector<float>().swap(slot.data.input);
  slot.resident = false;
}

void ActivationStore::Load(Slot& slot) {
  // Plausibility before allocation: the spill file must still hold the region this slot wrote.
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    Fail("{}: cannot stat the activation spill file: {}", spill_path_.string(), std::strerror(errno));
  const uint64_t end = (slot.offset + slot.hidden_size + slot.input_size) * sizeof(float);
  if (static_cast<uint64_t>(st.st_size) < end)
    Fail("{}: the activation spill file has {} bytes, less than the {} spilled into it (truncated by another "
         "process?)", spill_path_.string(), st.st_size, end);
  slot.data.hidden.resize(slot.hidden_size);
  slot.data.input.resize(slot.input_size);
  ReadAt(fd_, slot.data.hidden.data(), slot.hidden_size, slot.offset, spill_path_);
  ReadAt(fd_, slot.data.input.data(), slot.input_size, slot.offset + slot.hidden_size, spill_path_);
  slot.resident = true;
}

}  // namespace lowbit
