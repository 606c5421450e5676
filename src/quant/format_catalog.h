// Every number format lowbit writes, with its exact numeric facts and its storage cost at its typical
// granularity (for a nominal 4096 x 4096 weight): what `lowbit formats` and `lowbit.formats()` list.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit {

struct FormatFacts {
  std::string name;
  int bits = 0, exp_bits = -1, man_bits = -1;  // -1: not a float format
  double max_normal = NAN, min_normal = NAN, min_subnormal = NAN;  // NaN where the format has none
  double bits_per_weight = NAN;                                    // NaN for the scale-only formats
  std::string typical_scheme, description;
};

inline constexpr uint64_t kCatalogRows = 4096, kCatalogCols = 4096;

// The scheme presets in display order, then the scale-only formats (E8M0, UE4M3).
std::vector<FormatFacts> FormatCatalog();

// The list as `lowbit formats --json` prints it (null where a fact does not apply).
nlohmann::json FormatCatalogJson(const std::vector<FormatFacts>& formats);

}  // namespace lowbit
