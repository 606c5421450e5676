#include "core/json_util.h"

#include <fmt/format.h>

#include <unordered_set>

#include "core/error.h"
#include "core/file_util.h"

namespace lowbit {

using json = nlohmann::json;

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] "; users need only the rest.
std::string WithoutExceptionTag(std::string_view what) {
  const size_t tag_end = what.starts_with("[json.exception") ? what.find("] ") : std::string_view::npos;
  return std::string(tag_end == std::string_view::npos ? what : what.substr(tag_end + 2));
}

// Where the parser is, for messages: one frame per open object or array.
struct ParseFrame {
  bool is_object = true;
  std::unordered_set<std::string> keys;
  std::string key;      // object: the member being parsed
  size_t elements = 0;  // array: elements finished so far
};

std::string PathOf(const std::vector<ParseFrame>& frames) {
  std::string path;
  for (const ParseFrame& f : frames) {
    if (!f.is_object) {
      path += fmt::format("[{}]", f.elements);
    } else if (!f.key.empty()) {
      if (!path.empty()) path += '.';
      path += f.key;
    }
  }
  return path;
}

std::string Excerpt(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace

json ParseJson(std::string_view text, const std::string& source, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    Fail("{}: {} bytes of JSON, more than the {} this reader accepts", source, text.size(), limits.max_bytes);
  std::vector<ParseFrame> frames;
  auto element_done = [&] {
    if (!frames.empty() && !frames.back().is_object) ++frames.back().elements;
  };
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= limits.max_depth)
          Fail("{}: '{}' nests deeper than {} levels", source, PathOf(frames), limits.max_depth);
        frames.emplace_back().is_object = event == json::parse_event_t::object_start;
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        element_done();
        break;
      case json::parse_event_t::key: {
        ParseFrame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) Fail("{}: duplicate key '{}'", source, PathOf(frames));
        break;
      }
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    Fail("{}: not valid JSON: {}", source, WithoutExceptionTag(e.what()));
  }
}

double ShortestDecimal(float x) { return std::stod(fmt::format("{}", x)); }

json ReadJsonFile(const std::filesystem::path& path, const JsonLimits& limits) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > limits.max_bytes)
    Fail("{}: {} bytes of JSON, more than the {} this reader accepts", path.string(), size, limits.max_bytes);
  return ParseJson(ReadTextFile(path), path.string(), limits);
}

JsonView::JsonView(const json& value, std::string source, std::string path)
    : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

void JsonView::Fail(std::string_view message) const {
  if (path_.empty()) throw Error(fmt::format("{}: {}", source_, message), source_);
  throw Error(fmt::format("{}: {}: {}", source_, path_, message), source_, path_);
}

void JsonView::WrongType(std::string_view expected) const {
  Fail(fmt::format("must be {}, not {} {}", expected, value_->type_name(), Excerpt(*value_)));
}

void JsonView::OutOfRange(std::string_view range) const {
  Fail(fmt::format("is {}, outside {}", Excerpt(*value_), range));
}

const JsonView& JsonView::ExpectObject() const {
  if (!value_->is_object()) WrongType("an object");
  return *this;
}

const JsonView& JsonView::ExpectArray() const {
  if (!value_->is_array()) WrongType("an array");
  return *this;
}

bool JsonView::Has(std::string_view key) const {
  ExpectObject();
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonView JsonView::operator[](std::string_view key) const {
  ExpectObject();
  const std::string member = path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null())
    throw Error(fmt::format("{}: missing field '{}'", source_, member), source_, member);
  return JsonView(*it, source_, member);
}

std::vector<JsonView> JsonView::Items() const {
  ExpectArray();
  std::vector<JsonView> items;
  items.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i)
    items.emplace_back((*value_)[i], source_, fmt::format("{}[{}]", path_, i));
  return items;
}

int64_t JsonView::AsInt64(int64_t lo, int64_t hi) const {
  if (!value_->is_number_integer()) WrongType("an integer");
  if (value_->is_number_unsigned()) {
    const uint64_t v = value_->get<uint64_t>();
    if (v > static_cast<uint64_t>(hi)) OutOfRange(fmt::format("[{}, {}]", lo, hi));
    return static_cast<int64_t>(v);
  }
  const int64_t v = value_->get<int64_t>();
  if (v < lo || v > hi) OutOfRange(fmt::format("[{}, {}]", lo, hi));
  return v;
}

uint64_t JsonView::AsUint64(uint64_t hi) const {
  if (!value_->is_number_integer()) WrongType("an integer");
  // Parsed JSON stores non-negative integers as unsigned; JSON built in code may hold them signed.
  if (!value_->is_number_unsigned() && value_->get<int64_t>() < 0) OutOfRange(fmt::format("[0, {}]", hi));
  const uint64_t v = value_->get<uint64_t>();
  if (v > hi) OutOfRange(fmt::format("[0, {}]", hi));
  return v;
}

double JsonView::AsDouble(bool as_float) const {
  if (!value_->is_number()) WrongType("a number");
  const double v = value_->get<double>();
  if (!std::isfinite(v)) Fail("is not a finite number");
  if (as_float) {
    if (std::fabs(v) > std::numeric_limits<float>::max()) Fail(fmt::format("is {}, not finite as a 32-bit float", v));
    if (v != 0 && static_cast<float>(v) == 0) Fail(fmt::format("is {}, which rounds to 0 as a 32-bit float", v));
  }
  return v;
}

}  // namespace lowbit
