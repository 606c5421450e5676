// Vectors whose data starts on a 64-byte boundary. glibc's malloc aligns to 16 bytes (its chunk
// header), so the rows of a std::vector of weight codes sat 16 bytes into a cache line and every
// 64-byte load straddled two: the int4 dot loop from L3 ran at 33 instead of 60 GB/s on one core.
#pragma once

#include <cstddef>
#include <mutex>
#include <new>
#include <type_traits>
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

// Buffers of at least this many bytes that live as long as a model (weights, KV cache chunks) are
// mapped on their own, aligned to a huge page and advised for transparent huge pages
// (madvise(MADV_HUGEPAGE): most distributions enable THP only where advised). Decode streams every
// weight once per token; on 4 KiB pages each page of that stream costs a page walk (a TLB of about
// 2000 entries covers 8 MiB), and on this project's reference Xeon a 4-layer Llama-2-7B-shaped Q4_0
// file decoded 1.15x faster with its weights on huge pages.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
void* AllocateHugePages(std::size_t bytes);  // cache-aligned; throws std::bad_alloc
void FreeHugePages(void* p, std::size_t bytes);
// False where AllocateHugePages is the aligned heap (not Linux, or under AddressSanitizer, which then
// sees overflows past a buffer's end).
bool MapsHugePages();

// Many small buffers that live as long as their owner (a KV cache's blocks: 16-64 KiB each, which
// the heap scatters over pages of their own), carved in order from huge-page chunks of
// AllocateHugePages and given back all together when the arena goes. A reader streaming over all of
// them then walks few pages: decode attention at ctx 16384 over an fp16 cache took 1.09x as long with
// its blocks on the heap. Chunks are mapped as needed; only the pages written become resident.
class HugePageArena {
 public:
  explicit HugePageArena(std::size_t chunk_bytes = 16 * kHugePageBytes) : chunk_bytes_(chunk_bytes) {}
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  void* Allocate(std::size_t bytes);  // cache-aligned; thread-safe

 private:
  struct Chunk {
    void* base;
    std::size_t bytes;
  };
  std::size_t chunk_bytes_;
  std::mutex mutex_;
  std::vector<Chunk> chunks_;
  char* next_ = nullptr;  // the chunk being filled: its next free byte, and the bytes left after it
  std::size_t left_ = 0;
};

// Like CacheAlignedAllocator, but buffers of kHugePageBytes and more come from AllocateHugePages,
// and with an arena every buffer comes from it (freed with the arena). For long-lived storage only:
// a mapping is created and zeroed per large buffer, which transient ones (activations, scratch)
// should not pay at every call. A copy of a container takes no arena.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  HugePageArena* arena = nullptr;

  HugePageAllocator() = default;
  explicit HugePageAllocator(HugePageArena* a) : arena(a) {}
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>& other) : arena(other.arena) {}  // NOLINT: rebinding converts
  HugePageAllocator select_on_container_copy_construction() const { return {}; }
  T* allocate(std::size_t n) {
    if (arena) return static_cast<T*>(arena->Allocate(n * sizeof(T)));
    if (n * sizeof(T) >= kHugePageBytes) return static_cast<T*>(AllocateHugePages(n * sizeof(T)));
    return CacheAlignedAllocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    if (arena) return;  // the arena's chunks go with it
    if (n * sizeof(T) >= kHugePageBytes) return FreeHugePages(p, n * sizeof(T));
    CacheAlignedAllocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>& other) const {
    return arena == other.arena;
  }
};

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace lowbit
