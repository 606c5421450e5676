// Strict reading of JSON that comes from outside (config.json, recipes, quantization_config, KV
// scales, tokenizer configs). nlohmann converts numbers the way C++ does: -6 read as uint32_t is
// 4294967290, 5.9 read as an int is 5, `true` reads as 1, 1e308 read as float is +inf. JsonView's
// typed reads refuse every such conversion instead, and every error names the file and key path.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace lowbit {

struct JsonLimits {
  uint64_t max_bytes = uint64_t{256} << 20;  // tokenizer.json files run to tens of MB
  int max_depth = 64;                        // real configs nest 3-4 levels; deep nesting overflows copies
};

// Parses `text` read from `source` (named in errors). Duplicate keys, nesting deeper than
// limits.max_depth and text longer than limits.max_bytes are errors naming the key path.
nlohmann::json ParseJson(std::string_view text, const std::string& source, const JsonLimits& limits = {});
nlohmann::json ReadJsonFile(const std::filesystem::path& path, const JsonLimits& limits = {});

// A float as the shortest decimal that reads back to it (1e-05, not the double 9.999999747378752e-06
// it widens to), the number written for it into configs that transformers reads.
double ShortestDecimal(float x);

// A JSON value together with where it is: the file and the key path ("rope_scaling.factor",
// "overrides[2].format"). Reads are typed and exact.
class JsonView {
 public:
  JsonView(const nlohmann::json& value, std::string source, std::string path = {});

  const nlohmann::json& value() const { return *value_; }
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // Object members. `Has` is false for absent and for null members (HF configs write null for
  // "not set"). `operator[]` requires the member.
  bool Has(std::string_view key) const;
  JsonView operator[](std::string_view key) const;
  // Array elements; `Items` requires an array.
  std::vector<JsonView> Items() const;
  size_t size() const { return value_->size(); }

  // Requires this value to be an object (or array), naming what was found otherwise.
  const JsonView& ExpectObject() const;
  const JsonView& ExpectArray() const;

  // The value as T: an integral T (not bool) needs a JSON integer inside T's range; float/double
  // need a number that is finite in T and not a nonzero value that rounds to 0 in T; bool needs
  // true/false; std::string a string; std::vector<E> an array of E.
  template <class T>
  T As() const;

  // Member `key` as T: required, or `fallback` when absent or null.
  template <class T>
  T Get(std::string_view key) const {
    return (*this)[key].As<T>();
  }
  template <class T>
  T Get(std::string_view key, T fallback) const {
    return Has(key) ? (*this)[key].As<T>() : fallback;
  }

  // Error at this value: "<source>: <path>: <message>".
  [[noreturn]] void Fail(std::string_view message) const;

 private:
  [[noreturn]] void WrongType(std::string_view expected) const;
  [[noreturn]] void OutOfRange(std::string_view range) const;
  int64_t AsInt64(int64_t lo, int64_t hi) const;
  uint64_t AsUint64(uint64_t hi) const;
  double AsDouble(bool as_float) const;

  const nlohmann::json* value_;
  std::string source_, path_;
};

template <class T>
T JsonView::As() const {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value_->is_boolean()) WrongType("true or false");
    return value_->get<bool>();
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return static_cast<T>(AsInt64(std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(AsUint64(std::numeric_limits<T>::max()));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(AsDouble(std::is_same_v<T, float>));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value_->is_string()) WrongType("a string");
    return value_->get<std::string>();
  } else {
    // std::vector<E>
    std::vector<typename T::value_type> out;
    for (const JsonView& item : Items()) out.push_back(item.As<typename T::value_type>());
    return out;
  }
}

}  // namespace lowbit
