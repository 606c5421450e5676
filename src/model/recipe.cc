#include "model/recipe.h"

#include <algorithm>
#include <regex>

#include "core/error.h"
#include "core/json_util.h"
#include "quant/registry.h"
#include "quant/scheme.h"

namespace lowbit {

nlohmann::json Recipe::ToJson() const {
  nlohmann::json j = {{"method", method}, {"format", format}, {"act_format", act_format}, {"config", config},
                      {"calibration", {{"file", calib_file}, {"samples", calib_samples}, {"length", calib_len},
                                       {"seed", seed}}}};
  if (rotate) j["rotate"] = {{"seed", rotate_seed}};
  if (!overrides.empty()) {
    j["overrides"] = nlohmann::json::array();
    for (const RecipeOverride& o : overrides) {
      nlohmann::json e = {{"match", o.match}, {"format", o.format}};
      if (!o.method.empty()) e["method"] = o.method;
      if (!o.config.is_null()) e["config"] = o.config;
      j["overrides"].push_back(e);
    }
  }
  if (!ignore.empty()) j["ignore"] = ignore;
  if (!lm_head.empty()) j["lm_head"] = lm_head;
  return j;
}

namespace {

// Unknown keys are errors: a misspelt key would otherwise be a silently different run.
void CheckKeys(const JsonView& object, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.ExpectObject().value().items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
    object.Fail(fmt::format("has unknown key '{}' (known: {})", key, list));
  }
}

std::string Pattern(const JsonView& v) {
  const std::string pattern = v.As<std::string>();
  try {
    (void)std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    v.Fail(fmt::format("'{}' is not a valid ECMAScript regex: {}", pattern, e.what()));
  }
  return pattern;
}

std::string Format(const JsonView& v) {
  const std::string format = v.As<std::string>();
  try {
    (void)ParseScheme(format);
  } catch (const Error& e) {
    v.Fail(e.what());
  }
  return format;
}

// The method exists, takes this config and produces this format.
void CheckMethod(const JsonView& where, const std::string& method, const JsonView& config, const std::string& format) {
  try {
    (void)BuiltinMethods().Create(method, config, ParseScheme(format));
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.starts_with(config.source())) throw;  // already names the file and key
    where.Fail(what);
  }
}

}  // namespace

Recipe ParseRecipe(const nlohmann::json& json, const std::string& source) {
  const JsonView j(json, source);
  CheckKeys(j, {"method", "format", "act_format", "config", "calibration", "rotate", "overrides", "ignore",
                "lm_head"});
  Recipe r;
  r.method = j.Get<std::string>("method", r.method);
  r.format = Format(j["format"]);
  r.act_format = j.Get<std::string>("act_format", "");  // "" = none, as ToJson writes it
  if (!r.act_format.empty()) Format(j["act_format"]);
  static const nlohmann::json kNoConfig = nlohmann::json::object();
  const JsonView config = j.Has("config") ? j["config"] : JsonView(kNoConfig, source, "config");
  r.config = config.ExpectObject().value();
  CheckMethod(j, r.method, config, r.format);
  if (j.Has("calibration")) {
    const JsonView c = j["calibration"];
    CheckKeys(c, {"file", "samples", "length", "seed"});
    r.calib_file = c.Get<std::string>("file", "");
    r.calib_samples = c.Get("samples", r.calib_samples);
    r.calib_len = c.Get("length", r.calib_len);
    r.seed = c.Get("seed", r.seed);
    if (r.calib_samples == 0) c["samples"].Fail("must be positive");
    if (r.calib_len < 2) c["length"].Fail("must be at least 2 tokens");
  }
  if (j.Has("rotate")) {  // true / false, or {"seed": N}
    const JsonView rot = j["rotate"];
    if (rot.value().is_object()) {
      CheckKeys(rot, {"seed"});
      r.rotate = true;
      r.rotate_seed = rot.Get<uint64_t>("seed");
    } else {
      r.rotate = rot.As<bool>();
    }
  }
  if (j.Has("overrides")) {
    for (const JsonView& e : j["overrides"].Items()) {
      CheckKeys(e, {"match", "format", "method", "config"});
      RecipeOverride o{Pattern(e["match"]), Format(e["format"]), e.Get<std::string>("method", ""), nullptr};
      if (e.Has("config")) o.config = e["config"].ExpectObject().value();
      // Checked with the config it will run with (OverrideMethod): its own, the recipe's, or none.
      const std::string method = OverrideMethod(o.method, o.config, r.method, r.config).method;
      CheckMethod(e, method,
                  e.Has("config")         ? e["config"]
                  : method == r.method ? config
                                       : JsonView(kNoConfig, source),
                  o.format);
      r.overrides.push_back(std::move(o));
    }
  }
  if (j.Has("ignore"))
    for (const JsonView& pattern : j["ignore"].Items()) r.ignore.push_back(Pattern(pattern));
  if (j.Has("lm_head")) {
    r.lm_head = j["lm_head"].As<std::string>();
    if (r.lm_head != "none") CheckMethod(j["lm_head"], "rtn", JsonView(kNoConfig, source), Format(j["lm_head"]));
  }
  return r;
}

std::string ResolveLmHead(const Recipe& recipe, bool lowbit_folder, bool tied_embeddings) {
  if (!recipe.lm_head.empty()) return recipe.lm_head;
  const bool low_bit_body = !recipe.format.empty() && ParseScheme(recipe.format).element->bits <= 8;
  return lowbit_folder && !tied_embeddings && low_bit_body ? kDefaultLmHeadFormat : "none";
}

MethodConfig OverrideMethod(const std::string& method, const nlohmann::json& config, const std::string& recipe_method,
                            const nlohmann::json& recipe_config) {
  MethodConfig m{method.empty() ? recipe_method : method, config};
  if (m.config.is_null()) m.config = m.method == recipe_method ? recipe_config : nlohmann::json::object();
  return m;
}

Recipe ReadRecipe(const std::filesystem::path& path) { return ParseRecipe(ReadJsonFile(path), path.string()); }

}  // namespace lowbit
