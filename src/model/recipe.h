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
  // The output matrix's format, quantized by RTN after the blocks: "" = the default of the target
  // (ResolveLmHead), "none" = kept as it is.
  std::string lm_head;

  nlohmann::json ToJson() const;
};

// The method and config that quantize the tensors an override matches: the override's method, or the
// recipe's where it names none; the override's config, or, running the recipe's own method, the
// recipe's config (another method starts from its defaults).
struct MethodConfig {
  std::string method;
  nlohmann::json config;
};
MethodConfig OverrideMethod(const std::string& method, const nlohmann::json& config, const std::string& recipe_method,
                            const nlohmann::json& recipe_config);

// `j` read from `source`: unknown keys are errors; see the README for the fields.
Recipe ParseRecipe(const nlohmann::json& j, const std::string& source);
Recipe ReadRecipe(const std::filesystem::path& path);

// lm_head's default where the recipe names none: the body is 8 bits or fewer, the output is a lowbit
// folder and the model's lm_head is its own tensor: int8 on Q8_0's grid (llama.cpp's mixes keep the
// output matrix at 6-8 bits; read at every decode step, in full precision it would cost the quantized
// model a third of its speed). Otherwise "none".
inline constexpr const char* kDefaultLmHeadFormat = "int8:g32:scale=f16";
std::string ResolveLmHead(const Recipe& recipe, bool lowbit_folder, bool tied_embeddings);

}  // namespace lowbit
