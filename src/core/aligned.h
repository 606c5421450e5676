// Vectors whose data starts on a 64-byte boundary. glibc's malloc aligns to 16 bytes (its chunk
// header), so the rows of a std::vector of weight codes sat 16 bytes into a cache line and every
// 64-byte load straddled two: the int4 dot loop from L3 ran at 33 instead of 60 GB/s on one core.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace lowbit {

inline constexpr std::size_t kCacheLine = 64;

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}  // NOLINT: rebinding converts implicitly
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{kCacheLine}); }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

// Buffers of at least this many bytes that live as long as a model (weights, KV cache slabs) are
// mapped on their own, aligned to a huge page and advised for transparent huge pages
// (madvise(MADV_HUGEPAGE): most distributions enable THP only where advised). Decode streams every
// weight once per token; on 4 KiB pages each page of that stream costs a page walk (a TLB of about
// 2000 entries covers 8 MiB), and on this project's reference Xeon a 4-layer Llama-2-7B-shaped Q4_0
// file decoded 1.2x faster with its weights on huge pages.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
void* AllocateHugePages(std::size_t bytes);  // cache-aligned; throws std::bad_alloc
void FreeHugePages(void* p, std::size_t bytes);
// False where AllocateHugePages is the aligned heap (not Linux, or under AddressSanitizer, which then
// sees overflows past a buffer's end).
bool MapsHugePages();

// Like CacheAlignedAllocator, but buffers of kHugePageBytes and more come from AllocateHugePages.
// For long-lived storage only: a mapping is created and zeroed per allocation, which transient
// buffers (activations, scratch) should not pay at every call.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding converts implicitly
  T* allocate(std::size_t n) {
    if (n * sizeof(T) >= kHugePageBytes) return static_cast<T*>(AllocateHugePages(n * sizeof(T)));
    return CacheAlignedAllocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    if (n * sizeof(T) >= kHugePageBytes) return FreeHugePages(p, n * sizeof(T));
    CacheAlignedAllocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace lowbit
