// Size arithmetic on values read from files: overflow is an input error, never a wrap-around.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "core/error.h"

namespace lowbit {

inline uint64_t CheckedMul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) Fail("{}: size overflows 64 bits ({} x {})", what, a, b);
  return r;
}

inline uint64_t CheckedProduct(std::initializer_list<uint64_t> dims, std::string_view what) {
  uint64_t r = 1;
  for (uint64_t d : dims) r = CheckedMul(r, d, what);
  return r;
}

inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace lowbit
