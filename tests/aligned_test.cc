// Buffers for weights: cache-aligned always; from a huge page size up, their own mapping, starting on
// a huge page, advised for transparent huge pages, and gone when freed.
#include "core/aligned.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace lowbit {
namespace {

struct Mapping {
  bool found = false;
  std::uintptr_t begin = 0, end = 0;
  std::string flags;  // smaps' VmFlags ("hg": advised for huge pages)
};

// The mapping of this process that holds address p, from /proc/self/smaps.
Mapping MappingOf(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  Mapping m;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (line.find('-') < line.find(' ') && (range >> std::hex >> begin >> dash >> end) && dash == '-') {
      if (m.found) return m;  // the next mapping's header: ours had no VmFlags line
      if (begin <= at && at < end) m = {true, begin, end, ""};
    } else if (m.found && line.rfind("VmFlags:", 0) == 0) {
      m.flags = line;
      return m;
    }
  }
  return m;
}

TEST(HugePageVector, SmallBuffersAreCacheAlignedOnTheHeap) {
  HugePageVector<float> small(1000, 1.5f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % kCacheLine, 0u);
  EXPECT_EQ(small[999], 1.5f);
}

TEST(HugePageVector, LargeBuffersStartOnAHugePageAdvisedForTransparentHugePages) {
  if (!MapsHugePages()) GTEST_SKIP() << "huge pages are not mapped in this build";
  const std::size_t bytes = 5 * kHugePageBytes + 100;  // a tail shorter than a huge page
  std::uintptr_t begin = 0;
  {
    HugePageVector<uint8_t> large(bytes);
    begin = reinterpret_cast<std::uintptr_t>(large.data());
    EXPECT_EQ(begin % kHugePageBytes, 0u);
    for (std::size_t i = 0; i < bytes; i += 4096) EXPECT_EQ(large[i], 0) << i;  // value-initialized
    large.back() = 7;
    const HugePageVector<uint8_t> copy = large;  // a second mapping, same contents
    EXPECT_NE(copy.data(), large.data());
    EXPECT_EQ(copy.back(), 7);

    const Mapping m = MappingOf(large.data());
    ASSERT_TRUE(m.found);
    EXPECT_LE(m.begin, begin);
    EXPECT_GE(m.end, begin + (bytes + 4095) / 4096 * 4096);
    if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
      EXPECT_NE(m.flags.find(" hg"), std::string::npos) << m.flags;
    }
  }
  const Mapping after = MappingOf(reinterpret_cast<const void*>(begin));  // unmapped when freed
  EXPECT_FALSE(after.found && after.flags.find(" hg") != std::string::npos) << after.flags;
}

TEST(HugePageArena, BuffersAreAlignedDisjointAndInOrderWithinAChunk) {
  HugePageArena arena(kHugePageBytes);
  HugePageVector<uint8_t> first{HugePageAllocator<uint8_t>(&arena)}, second{HugePageAllocator<uint8_t>(&arena)};
  second.assign(3 * kHugePageBytes, 2);  // larger than a chunk: a chunk of its own, first
  first.assign(1000, 1);
  HugePageVector<uint8_t> third(100, 3, HugePageAllocator<uint8_t>(&arena));
  for (const HugePageVector<uint8_t>* v : {&first, &second, &third})
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v->data()) % kCacheLine, 0u);
  EXPECT_EQ(first.back(), 1);
  EXPECT_EQ(second.front(), 2);
  EXPECT_EQ(second.back(), 2);
  EXPECT_EQ(third.back(), 3);
  if (MapsHugePages()) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first.data()) % kHugePageBytes, 0u);  // a chunk's start
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second.data()) % kHugePageBytes, 0u);
    EXPECT_EQ(third.data(), first.data() + 1024);  // next in the first chunk, on the next cache line
    EXPECT_NE(MappingOf(first.data()).flags.find(" hg"), std::string::npos);
  }
  // A copy owns its buffer (no arena); a move keeps the arena's.
  const HugePageVector<uint8_t> copy = first;
  EXPECT_EQ(copy.get_allocator().arena, nullptr);
  EXPECT_EQ(copy, first);
  const uint8_t* at = first.data();
  const HugePageVector<uint8_t> moved = std::move(first);
  EXPECT_EQ(moved.data(), at);
  EXPECT_EQ(moved.get_allocator().arena, &arena);
}

}  // namespace
}  // namespace lowbit
