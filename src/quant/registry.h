// The registry of quantization methods. Methods register by name; registering a name twice is
// an error (never an override), asking for an unknown name lists the known ones, and a method's
// JSON config is checked against the keys it declares (unknown keys are errors).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "quant/method.h"

namespace lowbit {

class MethodRegistry {
 public:
  // `config` is an object whose keys are the method's declared config keys.
  using Factory = std::function<std::unique_ptr<QuantMethod>(const JsonView& config)>;

  // Throws Error when `info.name` is already registered or not an identifier.
  void Register(MethodInfo info, Factory factory);

  // Validates `config` (an object or null; unknown keys are errors; errors name its file and key
  // path) and the scheme against what the method supports, then builds it. Throws Error.
  std::unique_ptr<QuantMethod> Create(std::string_view name, const JsonView& config, const QuantScheme& scheme) const;
  // A config built in code; errors call it "method 'NAME' config".
  std::unique_ptr<QuantMethod> Create(std::string_view name, const nlohmann::json& config,
                                      const QuantScheme& scheme) const;
  const MethodInfo& Info(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted

 private:
  struct Entry {
    MethodInfo info;
    Factory factory;
  };
  const Entry& Find(std::string_view name) const;
  std::map<std::string, Entry, std::less<>> entries_;
};

// The built-in methods, registered once.
const MethodRegistry& BuiltinMethods();

}  // namespace lowbit
