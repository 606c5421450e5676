// The calibration activations of whole-model PTQ, per batch of calibration windows: the hidden
// states entering the current layer and the input of the linear group being calibrated. They
// stay in memory up to a byte budget (`quantize --max-ram`); past it, batches live in an
// unlinked temp file and are read back when a pass over the batches reaches them. For a 7B
// model, 128 x 256 calibration tokens are 0.5 GB of hidden states plus up to 1.4 GB of MLP input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace lowbit {

struct BatchActivations {
  std::vector<float> hidden;  // [tokens x dim]
  std::vector<float> input;   // [tokens x cols of the current group]
};

class ActivationStore {
 public:
  // budget_bytes 0: everything stays in memory. The spill file is created in spill_dir (the
  // system temp folder when empty) on first need and unlinked at once, so nothing is left behind.
  ActivationStore(size_t batches, uint64_t budget_bytes, std::filesystem::path spill_dir);
  ~ActivationStore();
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;

  size_t size() const { return slots_.size(); }
  // fn(i, batch) for every batch in order, each in memory while fn runs; `modifies` says fn may
  // change it (a copy in the spill file is then rewritten when the batch is spilled again).
  void ForEach(bool modifies, const std::function<void(size_t, BatchActivations&)>& fn);

  uint64_t bytes_written() const { return bytes_written_; }  // to the spill file, so far
  uint64_t peak_resident_bytes() const { return peak_resident_; }

 private:
  struct Slot {
    BatchActivations data;
    bool resident = true;
    bool saved = false;  // the spill file holds the current contents
    uint64_t offset = 0, capacity = 0, hidden_size = 0, input_size = 0;  // region in floats
  };
  uint64_t ResidentBytes() const;
  void Spill(Slot& slot);
  void Load(Slot& slot);

  std::vector<Slot> slots_;
  uint64_t budget_;
  std::filesystem::path spill_dir_, spill_path_;
  int fd_ = -1;
  uint64_t file_floats_ = 0, bytes_written_ = 0, peak_resident_ = 0;
};

}  // namespace lowbit
