// The recipe of a whole-model quantization: what `lowbit quantize --recipe FILE` reads, what the
// flags build, and what the recipe card stores. Reading one validates everything it names (keys,
// formats, methods and their configs, regexes) before any work starts; errors name the file and
// the key path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit {

struct RecipeOverride {
  std::string match, format, method;  // method empty = the recipe's
  nlohmann::json config;              // null = not given
};

struct Recipe {
  std::string method = "rtn", format, act_format;
  nlohmann::json config = nlohmann::json::object();
  std::string calib_file;
  size_t calib_samples = 128, calib_len = 256;
  uint64_t seed = 0;
  bool rotate = false;
  uint64_t rotate_seed = 0;
  std::vector<RecipeOverride> overrides;  // first match wins
  std::vector<std::string> ignore;        // regexes of tensors left in full precision

  nlohmann::json ToJson() const;
};

// `j` read from `source`: unknown keys are errors; see the README for the fields.
Recipe ParseRecipe(const nlohmann::json& j, const std::string& source);
Recipe ReadRecipe(const std::filesystem::path& path);

}  // namespace lowbit
