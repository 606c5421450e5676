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

}  // namespace lowbit
