// Element types of safetensors tensors, spelled as the safetensors header spells them.
//
// Only byte-granular types are listed: the sub-byte safetensors dtypes (F4, F6_E2M3, F6_E3M2)
// pack several elements per byte with a torch-specific logical shape, and C64 / the FNUZ FP8
// variants have no use in lowbit, so a file using them is rejected by name instead of being
// half-understood. The enum is in-memory only (never written to disk), so its order is free.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lowbit {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,  // OCP E4M3 "fn" (torch float8_e4m3fn)
  kF8E5M2,
  kF8E8M0,  // MX shared scale (torch float8_e8m0fnu)
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

// The safetensors spelling, e.g. "F32", "BF16", "F8_E4M3".
std::string_view DTypeName(DType dtype);

// Inverse of DTypeName; nullopt for anything else (including valid safetensors dtypes that
// lowbit does not support, see IsUnsupportedSafetensorsDType).
std::optional<DType> ParseDType(std::string_view name);

// True for dtype strings the safetensors spec defines but lowbit rejects (F4, F6_*, C64, ...),
// so error messages can say "unsupported" rather than "unknown".
bool IsUnsupportedSafetensorsDType(std::string_view name);

// Bytes per element (every supported dtype is a whole number of bytes).
uint64_t DTypeSize(DType dtype);

}  // namespace lowbit
