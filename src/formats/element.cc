#include "formats/element.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.h"

namespace lowbit {

const ElementFormat* FindElementFormat(std::string_view name) {
  for (const ElementFormat& e : kElementFormats)
    if (e.name == name) return &e;
  return nullptr;
}

const ElementFormat& IntElement(int bits) {
  LOWBIT_CHECK(bits >= 2 && bits <= 8);
  for (const ElementFormat& e : kElementFormats)
    if (e.kind == ElementKind::kInt && e.bits == bits) return e;
  throw std::logic_error("int element table incomplete");
}

uint32_t SymmetricZero(const ElementFormat& e) {
  return e.kind == ElementKind::kInt ? 1u << (e.bits - 1) : 0u;
}

double ScaleDivisor(const ElementFormat& e) {
  switch (e.kind) {
    case ElementKind::kFloat:
      return e.minifloat ? MaxFinite(*e.minifloat) : 1.0;
    case ElementKind::kInt:
      return ((1u << e.bits) - 1) / 2.0;
    case ElementKind::kCodebook:
      return std::max(-e.levels.front(), e.levels.back());
    case ElementKind::kTernary:
      return 1.0;
    case ElementKind::kMxInt8:
      return 127.0 / 64.0;
  }
  return 1.0;
}

void BuildDecodeTable(const ElementFormat& e, bool symmetric, std::span<float, 256> table) {
  LOWBIT_CHECK(e.bits <= 8);
  std::fill(table.begin(), table.end(), 0.0f);
  const uint32_t count = 1u << e.bits;
  for (uint32_t code = 0; code < count; ++code) {
    float v = 0;
    switch (e.kind) {
      case ElementKind::kFloat:
        v = DecodeMiniFloat(*e.minifloat, code);
        break;
      case ElementKind::kInt:
        v = static_cast<float>(static_cast<int>(code) - (symmetric ? static_cast<int>(SymmetricZero(e)) : 0));
        break;
      case ElementKind::kCodebook:
        v = e.levels[code];
        break;
      case ElementKind::kTernary:
        v = code <= 2 ? static_cast<float>(static_cast<int>(code) - 1) : 0.0f;
        break;
      case ElementKind::kMxInt8:
        v = static_cast<float>(static_cast<int8_t>(code)) / 64.0f;
        break;
    }
    table[code] = v;
  }
}

uint32_t EncodeElement(const ElementFormat& e, float scaled, uint32_t zero) {
  switch (e.kind) {
    case ElementKind::kFloat:
      if (!e.minifloat) return std::bit_cast<uint32_t>(scaled);
      return EncodeMiniFloat(*e.minifloat, scaled, Overflow::kSaturate);
    case ElementKind::kInt: {
      const float qmax = static_cast<float>((1u << e.bits) - 1);
      const float q = std::nearbyint(scaled) + static_cast<float>(zero);
      return static_cast<uint32_t>(std::clamp(q, 0.0f, qmax));
    }
    case ElementKind::kCodebook: {
      const std::span<const float> l = e.levels;
      const float v = std::clamp(scaled, l.front(), l.back());
      uint32_t index = 0;  // count of midpoints strictly below v: ties go to the lower index
      for (size_t i = 0; i + 1 < l.size(); ++i)
        if (v > 0.5f * (l[i] + l[i + 1])) index = static_cast<uint32_t>(i + 1);
      return index;
    }
    case ElementKind::kTernary:
      return static_cast<uint32_t>(std::clamp(std::nearbyint(scaled), -1.0f, 1.0f) + 1.0f);
    case ElementKind::kMxInt8: {
      const float q = std::clamp(std::nearbyint(scaled * 64.0f), -127.0f, 127.0f);
      return static_cast<uint32_t>(static_cast<int>(q)) & 0xFFu;
    }
  }
  return 0;
}

}  // namespace lowbit
