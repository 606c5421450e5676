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
  using std::runtime_error::runtime_error;
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
