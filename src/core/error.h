// Errors. Bad input (files, flags, configs) throws lowbit::Error with a message that names the
// file and field; the CLI prints it and exits non-zero. Programmer errors (broken invariants)
// go through LOWBIT_CHECK, which throws std::logic_error so tests can observe them too.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace lowbit {

class Error : public std::runtime_error {
 public:
  // `file` and `field`, when the thrower knows them apart from the message, are for readers of
  // `--json` errors (the message names them too).
  explicit Error(const std::string& message, std::string file = {}, std::string field = {})
      : std::runtime_error(message), file_(std::move(file)), field_(std::move(field)) {}
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }

 private:
  std::string file_, field_;
};

template <class... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace lowbit

#define LOWBIT_CHECK(cond)                                                               \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw std::logic_error(fmt::format("{}:{}: check failed: {}", __FILE__, __LINE__, \
                                         #cond));                                        \
  } while (0)
