// Vectors whose data starts on a 64-byte boundary. Large std::vector buffers come from mmap with
// glibc's 16-byte header, so every 64-byte load of a weight row straddled two cache lines: int4
// GEMV from L3 ran at half speed (measured 33 vs 60 GB/s on one core).
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

}  // namespace lowbit
