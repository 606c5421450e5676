// The calibration activation store: batches past the memory budget go to the spill file and come
// back unchanged, changes made while a batch is in memory survive a spill, and the resident set
// stays within the budget plus the batch in hand.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/activation_store.h"

namespace lowbit {
namespace {

std::vector<float> Pattern(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

TEST(ActivationStore, SpilledBatchesComeBackWithTheirChanges) {
  constexpr size_t kBatches = 6, kHidden = 1000, kInput = 3000;  // 16 KB per batch
  const uint64_t budget = 40000;                                   // two batches fit
  ActivationStore store(kBatches, budget, std::filesystem::temp_directory_path());
  store.ForEach(true, [&](size_t i, BatchActivations& b) {
    b.hidden = Pattern(kHidden, 1000.0f * static_cast<float>(i));
    b.input = Pattern(kInput / 3, -1.0f);  // the input grows later, as dim -> ffn does
  });
  store.ForEach(true, [&](size_t i, BatchActivations& b) {
    ASSERT_EQ(b.hidden, Pattern(kHidden, 1000.0f * static_cast<float>(i))) << "batch " << i;
    b.input = Pattern(kInput, static_cast<float>(i));  // a change to a batch that was on disk
  });
  store.ForEach(false, [&](size_t i, BatchActivations& b) {
    ASSERT_EQ(b.input, Pattern(kInput, static_cast<float>(i))) << "batch " << i;
    ASSERT_EQ(b.hidden, Pattern(kHidden, 1000.0f * static_cast<float>(i))) << "batch " << i;
  });
  EXPECT_GT(store.bytes_written(), 0u);
  EXPECT_LE(store.peak_resident_bytes(), budget + (kHidden + kInput) * sizeof(float));
}

TEST(ActivationStore, WithoutABudgetNothingIsWritten) {
  ActivationStore store(3, 0, "");
  store.ForEach(true, [&](size_t i, BatchActivations& b) { b.hidden = Pattern(100000, static_cast<float>(i)); });
  store.ForEach(false, [&](size_t i, BatchActivations& b) { EXPECT_EQ(b.hidden[7], 7.0f + static_cast<float>(i)); });
  EXPECT_EQ(store.bytes_written(), 0u);
  EXPECT_EQ(store.peak_resident_bytes(), 3u * 100000 * sizeof(float));
}

TEST(ActivationStore, UnwritableSpillFolderIsAnError) {
  ActivationStore store(2, 1, "/nonexistent/folder");
  EXPECT_THROW(store.ForEach(true, [&](size_t, BatchActivations& b) { b.hidden.assign(10, 1.0f); }), std::exception);
}

}  // namespace
}  // namespace lowbit
