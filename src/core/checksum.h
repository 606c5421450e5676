// FNV-1a, 64-bit: the checksum lowbit's own files carry (the top-K base file, the run checkpoint,
// the calibration text in a recipe card). Guards against edits and truncation, not against attackers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace lowbit {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

// Continues the hash `h` over `bytes`: Fnv1a64(b, Fnv1a64(a)) is the hash of a followed by b.
inline uint64_t Fnv1a64(std::span<const std::byte> bytes, uint64_t h = kFnv1aOffset) {
  for (const std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 1099511628211ull;
  return h;
}

inline uint64_t Fnv1a64(std::string_view text, uint64_t h = kFnv1aOffset) {
  return Fnv1a64(std::as_bytes(std::span(text.data(), text.size())), h);
}

}  // namespace lowbit
