#include "cli/front_door.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/gguf_mix.h"
#include "model/kv_cache.h"
#include "plan/presets.h"
#include "quant/registry.h"
#include "quant/scheme.h"

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

CLI::Validator ParsedBy(std::function<void(const std::string&)> parse) {
  return CLI::Validator(
      [parse = std::move(parse)](std::string& text) -> std::string {
        try {
          parse(text);
        } catch (const Error& e) {
          return e.what();
        }
        return {};
      },
      "");
}

CLI::Validator SchemeName() {
  return ParsedBy([](const std::string& text) { (void)ParseScheme(text); });
}
CLI::Validator MethodName() {
  return ParsedBy([](const std::string& text) { (void)BuiltinMethods().Info(text); });
}
CLI::Validator KvDtypeName() {
  return ParsedBy([](const std::string& text) { (void)ParseKvDtype(text); });
}
CLI::Validator GgufTypeName() {
  return ParsedBy([](const std::string& text) { (void)FindGgufFileType(text); });
}
CLI::Validator PresetName() {
  return ParsedBy([](const std::string& text) { (void)FindPreset(text); });
}

CLI::Validator Between(double lo, double hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::optional<double> v = Number(text);
        if (v && *v >= lo && *v <= hi) return {};
        return "must be in " + range + ", not '" + text + "'";
      },
      range);
}

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

namespace {

// The command argv names ("lowbit bench gemv"), and its app: subcommand names followed from argv[1].
const CLI::App* CommandOf(const CLI::App& app, int argc, char** argv, std::string* path) {
  const CLI::App* current = &app;
  *path = "lowbit";
  for (int i = 1; i < argc; ++i)
    for (const CLI::App* sub : current->get_subcommands({}))
      if (sub->get_name() == argv[i]) {
        current = sub;
        *path += " " + sub->get_name();
        break;
      }
  return current;
}

// "ppl: " before a message about `lowbit ppl` (after "lowbit: error: "), nothing for lowbit itself.
std::string Prefix(const std::string& path) { return path == "lowbit" ? "" : path.substr(7) + ": "; }

// Whether `token` looks like an option rather than a value ("-5" and "-1e-3" are values).
bool LooksLikeOption(const std::string& token) {
  return token.size() > 1 && token[0] == '-' && token != "--" && !Number(token).has_value();
}

}  // namespace

std::string UnknownOptionMessage(const CLI::App& app, int argc, char** argv) {
  std::string path;
  const CLI::App* command = CommandOf(app, argc, argv, &path);
  std::vector<std::string> known = {"--help", "-h"};
  std::vector<std::string> with_value;  // the options whose next argument is their value
  for (const CLI::Option* o : command->get_options()) {
    std::vector<std::string>& names = o->get_type_size() != 0 ? with_value : known;
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (int i = 1; i < argc; ++i) {
    std::string token = argv[i];
    if (!LooksLikeOption(token)) continue;
    const bool inline_value = token.find('=') != std::string::npos;
    token = token.substr(0, token.find('='));
    if (std::find(with_value.begin(), with_value.end(), token) != with_value.end()) {
      i += inline_value ? 0 : 1;  // its value may look like an option ("--engine-flags '--quantization gptq'")
      continue;
    }
    if (std::find(known.begin(), known.end(), token) != known.end() || (command == &app && token == "--version")) continue;
    known.insert(known.end(), with_value.begin(), with_value.end());
    std::string best;
    size_t best_distance = SIZE_MAX;
    for (const std::string& k : known)
      if (const size_t d = EditDistance(token, k); d < best_distance) best_distance = d, best = k;
    if (best_distance <= std::max<size_t>(2, token.size() / 3))
      return fmt::format("{}unknown option '{}', did you mean '{}'?", Prefix(path), token, best);
    return fmt::format("{}unknown option '{}' ({} --help lists the options)", Prefix(path), token, path);
  }
  return {};
}

std::string ParseErrorMessage(const CLI::ParseError& e, const CLI::App& app, int argc, char** argv) {
  std::string path;
  (void)CommandOf(app, argc, argv, &path);
  std::string message = e.what();
  // CLI11's wording where it says less than it should.
  static const std::regex missing_value(R"(^(\S+): \d+ required \S+ missing$)");
  static const std::regex not_expected(R"(^The following arguments? (was|were) not expected: (.*)$)");
  static const std::regex out_of_range(R"(^(\S+): Value (\S+) not in range (\S+) to (\S+)$)");
  static const std::regex positional_required(R"(^([^-\s]\S*) is required$)");
  std::smatch m;
  if (std::regex_match(message, m, missing_value)) {
    message = m[1].str() + " needs a value";
  } else if (std::regex_match(message, m, not_expected)) {
    std::istringstream words(m[2].str());  // CLI11 lists them last first
    std::vector<std::string> extras{std::istream_iterator<std::string>(words), {}};
    std::reverse(extras.begin(), extras.end());
    message = fmt::format("unexpected argument{} '{}'", extras.size() > 1 ? "s" : "", fmt::join(extras, "' '"));
  } else if (std::regex_match(message, m, out_of_range)) {
    message = fmt::format("{}: must be in [{}, {}], not '{}'", m[1].str(), m[3].str(), m[4].str(), m[2].str());
  } else if (std::regex_match(message, m, positional_required)) {
    message = fmt::format("the {} argument is required", m[1].str());
  } else if (message == "A subcommand is required") {
    std::vector<std::string> names;
    for (const CLI::App* sub : CommandOf(app, argc, argv, &path)->get_subcommands({})) names.push_back(sub->get_name());
    message = fmt::format("a command is required: {}", fmt::join(names, ", "));
  }
  return fmt::format("{}{} ({} --help lists the options)", Prefix(path), message, path);
}

std::string ParseErrorField(const CLI::ParseError& e) {
  const std::string_view message = e.what();
  const size_t colon = message.find(": ");
  if (!message.starts_with("-") || colon == std::string_view::npos) return {};
  const std::string_view option = message.substr(0, colon);
  return option.find(' ') == std::string_view::npos ? std::string(option) : std::string();
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
