#include "cli/front_door.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace lowbit::cli {

namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// A number with nothing after it, or nullopt.
std::optional<double> Number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

CLI::Validator NumberValidator(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        const std::optional<double> v = Number(text);
        if (v && (zero_allowed ? *v >= 0 : *v > 0)) return {};
        return std::string(zero_allowed ? "must be 0 or more" : "must be a positive number") + ", not '" + text + "'";
      },
      zero_allowed ? ">=0" : ">0");
}

void Guard(CLI::App& app) {
  for (CLI::Option* option : app.get_options())
    if (option->get_type_name() == "UINT") option->check(NonNegative());
  for (CLI::App* sub : app.get_subcommands({})) Guard(*sub);
}

}  // namespace

void GuardUnsignedOptions(CLI::App& app) { Guard(app); }

CLI::Validator Positive() { return NumberValidator(false); }
CLI::Validator NonNegative() { return NumberValidator(true); }

std::string UnknownCommandMessage(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return {};
  const std::string given = argv[1];
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == given) return {};
    const size_t d = EditDistance(given, sub->get_name());
    if (d < best_distance) best_distance = d, best = sub->get_name();
  }
  if (best_distance <= std::max<size_t>(2, given.size() / 3))
    return "unknown command '" + given + "', did you mean '" + best + "'?";
  return "unknown command '" + given + "' (see lowbit --help)";
}

CLI::Validator GroupSize() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long v = 0;
        size_t used = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || (v != -1 && v < 1) || v > (1 << 30))
          return "must be a positive group size, or -1 for one group per row, not '" + text + "'";
        return {};
      },
      "N>0 or -1");
}

void PrintError(const std::string& message, const std::string& file, const std::string& field, bool json) {
  if (!json) {
    std::fprintf(stderr, "lowbit: error: %s\n", message.c_str());
    return;
  }
  std::string named_file = file;
  if (named_file.empty()) {
    const size_t colon = message.find(": ");
    std::error_code ec;
    if (colon != std::string::npos && std::filesystem::exists(message.substr(0, colon), ec))
      named_file = message.substr(0, colon);
  }
  const nlohmann::json j = {{"error", message},
                            {"file", named_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(named_file)},
                            {"field", field.empty() ? nlohmann::json(nullptr) : nlohmann::json(field)}};
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void AddAllowNonfiniteFlag(CLI::App* cmd, LoadOptions& options) {
  cmd->add_flag("--allow-nonfinite", options.allow_nonfinite,
                "Load a model whose weights hold NaN or Inf (by default an error naming the tensor)");
}

}  // namespace lowbit::cli
