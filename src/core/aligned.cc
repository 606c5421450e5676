#include "core/aligned.h"

#include <cstdint>

#include "core/checked_math.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Under AddressSanitizer every buffer stays on the heap, where overflows past its end are caught.
#if defined(__SANITIZE_ADDRESS__)
#define LOWBIT_MAP_HUGE_PAGES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOWBIT_MAP_HUGE_PAGES 0
#endif
#endif
#if !defined(LOWBIT_MAP_HUGE_PAGES) && defined(__linux__)
#define LOWBIT_MAP_HUGE_PAGES 1
#elif !defined(LOWBIT_MAP_HUGE_PAGES)
#define LOWBIT_MAP_HUGE_PAGES 0
#endif

namespace lowbit {
namespace {

constexpr std::size_t kSmallPage = 4096;

std::uintptr_t RoundUp(std::uintptr_t n, std::uintptr_t unit) { return CeilDiv(n, unit) * unit; }

}  // namespace

#if LOWBIT_MAP_HUGE_PAGES

void* AllocateHugePages(std::size_t bytes) {
  // Over-map by one huge page, then unmap the slack before the first huge-page boundary and past the
  // last small page used: the mapping starts on a huge page, and a tail shorter than a huge page stays
  // on small pages (no huge page is faulted in for a part of it).
  const std::size_t length = RoundUp(bytes, kSmallPage);
  void* raw = ::mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = RoundUp(start, kHugePageBytes), end = start + length + kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  if (end > aligned + length) ::munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
  ::madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);  // advice: without THP, small pages
  return reinterpret_cast<void*>(aligned);
}

void FreeHugePages(void* p, std::size_t bytes) { ::munmap(p, RoundUp(bytes, kSmallPage)); }

bool MapsHugePages() { return true; }

#else

void* AllocateHugePages(std::size_t bytes) { return ::operator new(bytes, std::align_val_t{kCacheLine}); }
void FreeHugePages(void* p, std::size_t) { ::operator delete(p, std::align_val_t{kCacheLine}); }

bool MapsHugePages() { return false; }

#endif

HugePageArena::~HugePageArena() {
  for (const Chunk& c : chunks_) FreeHugePages(c.base, c.bytes);
}

void* HugePageArena::Allocate(std::size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!MapsHugePages()) {  // each buffer alone, where AddressSanitizer sees past its end
    chunks_.push_back({AllocateHugePages(bytes), bytes});
    return chunks_.back().base;
  }
  bytes = RoundUp(bytes, kCacheLine);
  if (bytes > chunk_bytes_) {  // a chunk of its own; the one being filled stays so
    chunks_.push_back({AllocateHugePages(bytes), bytes});
    return chunks_.back().base;
  }
  if (bytes > left_) {
    chunks_.push_back({AllocateHugePages(chunk_bytes_), chunk_bytes_});
    next_ = static_cast<char*>(chunks_.back().base);
    left_ = chunk_bytes_;
  }
  void* p = next_;
  next_ += bytes;
  left_ -= bytes;
  return p;
}

}  // namespace lowbit
