#include "io/dtype.h"

#include <array>

#include "core/error.h"

namespace lowbit {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  uint64_t size;
};

// One row per DType, in enum order (checked below so DTypeName can index directly).
constexpr std::array kDTypes = {
    DTypeInfo{DType::kBool, "BOOL", 1},      DTypeInfo{DType::kU8, "U8", 1},
    DTypeInfo{DType::kI8, "I8", 1},          DTypeInfo{DType::kF8E4M3, "F8_E4M3", 1},
    DTypeInfo{DType::kF8E5M2, "F8_E5M2", 1}, DTypeInfo{DType::kF8E8M0, "F8_E8M0", 1},
    DTypeInfo{DType::kI16, "I16", 2},        DTypeInfo{DType::kU16, "U16", 2},
    DTypeInfo{DType::kF16, "F16", 2},        DTypeInfo{DType::kBF16, "BF16", 2},
    DTypeInfo{DType::kI32, "I32", 4},        DTypeInfo{DType::kU32, "U32", 4},
    DTypeInfo{DType::kF32, "F32", 4},        DTypeInfo{DType::kI64, "I64", 8},
    DTypeInfo{DType::kU64, "U64", 8},        DTypeInfo{DType::kF64, "F64", 8},
};

consteval bool TableInEnumOrder() {
  for (size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  return static_cast<size_t>(DType::kF64) + 1 == kDTypes.size();
}
static_assert(TableInEnumOrder(), "kDTypes must list every DType in enum order");

// Defined by the safetensors spec (formats.md 9.1) but deliberately not supported here.
constexpr std::array<std::string_view, 6> kUnsupported = {"C64", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                                                          "F4",  "F6_E2M3",     "F6_E3M2"};

const DTypeInfo& Info(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  LOWBIT_CHECK(i < kDTypes.size());
  return kDTypes[i];
}

}  // namespace

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

uint64_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

bool IsUnsupportedSafetensorsDType(std::string_view name) {
  for (std::string_view u : kUnsupported)
    if (u == name) return true;
  return false;
}

}  // namespace lowbit
