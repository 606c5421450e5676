#include "tokenizer/hf_pipeline.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace lowbit {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string Where(const JsonView& json) { return json.source() + ": " + json.path(); }

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, pos)) {
    out.append(text, pos, at - pos).append(to);
    pos = at + from.size();
  }
  if (pos == 0) return;
  out.append(text, pos);
  text = std::move(out);
}

// A `pattern` member: {"String": literal} or {"Regex": pattern}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  // A fixed regex (the pre-tokenizers that are Splits by another name); `where` names it in errors.
  Pattern(std::string_view regex, const std::string& where) : regex(std::make_unique<Regex>(regex, where)) {}
  explicit Pattern(const JsonView& json) {
    json.ExpectObject();
    if (json.Has("Regex")) {
      regex = std::make_unique<Regex>(json.Get<std::string>("Regex"), Where(json["Regex"]));
    } else if (json.Has("String")) {
      literal = json.Get<std::string>("String");
    } else {
      json.Fail("expected {\"String\": ...} or {\"Regex\": ...}");
    }
  }
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const {
    if (regex) return regex->FindAll(text);
    std::vector<std::pair<size_t, size_t>> out;
    if (literal.empty()) return out;
    for (size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size()))
      out.emplace_back(at, at + literal.size());
    return out;
  }
  void ReplaceIn(std::string& text, std::string_view content) const {
    if (!regex) return ReplaceAll(text, literal, content);
    std::string out;
    size_t pos = 0;
    for (const auto& [begin, end] : regex->FindAll(text)) {
      out.append(text, pos, begin - pos).append(content);
      pos = end;
    }
    out.append(text, pos);
    text = std::move(out);
  }
};

// ---- normalizers -------------------------------------------------------------------------------

class NormalizerSequence final : public HfNormalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<HfNormalizer>> steps) : steps_(std::move(steps)) {}
  void Apply(std::string& text) const override {
    for (const auto& step : steps_) step->Apply(text);
  }

 private:
  std::vector<std::unique_ptr<HfNormalizer>> steps_;
};

class UnicodeNormalizer final : public HfNormalizer {
 public:
  UnicodeNormalizer(const JsonView& json, std::string_view form) {
    UErrorCode status = U_ZERO_ERROR;
    normalizer_ = form == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                  : form == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                  : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                   : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) json.Fail(fmt::format("ICU has no {} normalizer: {}", form, u_errorName(status)));
  }
  void Apply(std::string& text) const override {
    if (IsAscii(text)) return;  // ASCII is invariant under all four forms
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
    if (normalizer_->isNormalized(in, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = normalizer_->normalize(in, status);
    if (U_FAILURE(status)) Fail("Unicode normalization failed: {}", u_errorName(status));
    text.clear();
    out.toUTF8String(text);
  }

 private:
  const icu::Normalizer2* normalizer_ = nullptr;
};

class Lowercase final : public HfNormalizer {
 public:
  void Apply(std::string& text) const override {
    if (IsAscii(text)) {
      std::transform(text.begin(), text.end(), text.begin(),
                     [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
      return;
    }
    icu::UnicodeString s = icu::UnicodeString::fromUTF8(text);
    s.toLower(icu::Locale::getRoot());
    text.clear();
    s.toUTF8String(text);
  }
};

// Byte length of the Unicode white space at the start (or end) of `text`.
size_t LeadingSpace(std::string_view text) {
  size_t offset = 0;
  while (offset < text.size()) {
    size_t next = offset;
    if (!u_isUWhiteSpace(static_cast<UChar32>(NextCodePointLenient(text, next)))) break;
    offset = next;
  }
  return offset;
}
size_t TrailingSpace(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
    size_t next = begin;
    if (!u_isUWhiteSpace(static_cast<UChar32>(NextCodePointLenient(text, next)))) break;
    end = begin;
  }
  return text.size() - end;
}

class Strip final : public HfNormalizer {
 public:
  explicit Strip(const JsonView& json) : left_(json.Get<bool>("strip_left", true)), right_(json.Get<bool>("strip_right", true)) {}
  void Apply(std::string& text) const override {
    if (right_) text.resize(text.size() - TrailingSpace(text));
    if (left_) text.erase(0, LeadingSpace(text));
  }

 private:
  bool left_, right_;
};

class Replace final : public HfNormalizer {
 public:
  explicit Replace(const JsonView& json) : pattern_(json["pattern"]), content_(json.Get<std::string>("content")) {}
  void Apply(std::string& text) const override { pattern_.ReplaceIn(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public HfNormalizer {
 public:
  explicit Prepend(const JsonView& json) : prefix_(json.Get<std::string>("prepend")) {}
  void Apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// ---- pre-tokenizers ----------------------------------------------------------------------------

// Cuts every piece at the matches of `find` (a callable giving byte ranges), per `behavior`.
template <class Find>
void SplitPieces(std::vector<HfPiece>& pieces, const Find& find, SplitBehavior behavior, bool invert) {
  std::vector<HfPiece> out;
  out.reserve(pieces.size());
  for (HfPiece& piece : pieces) {
    const auto ranges = SplitAtMatches(piece.text.size(), find(piece.text), behavior, invert);
    if (ranges.size() == 1 && ranges[0].first == 0 && ranges[0].second == piece.text.size()) {
      out.push_back(std::move(piece));
      continue;
    }
    for (const auto& [begin, end] : ranges)
      out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
  }
  pieces = std::move(out);
}

SplitBehavior ParseBehavior(const JsonView& json) {
  const std::string name = json.As<std::string>();  // case-sensitive, as the library reads it
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  json.Fail(fmt::format("unknown split behavior '{}' (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)", name));
}

class PreTokenizerSequence final : public HfPreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<HfPreTokenizer>> steps) : steps_(std::move(steps)) {}
  void Apply(std::vector<HfPiece>& pieces) const override {
    for (const auto& step : steps_) step->Apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<HfPreTokenizer>> steps_;
};

// Split, and the fixed splits Digits, Whitespace, WhitespaceSplit and Punctuation.
class Split final : public HfPreTokenizer {
 public:
  explicit Split(const JsonView& json)
      : Split(Pattern(json["pattern"]), ParseBehavior(json["behavior"]), json.Get<bool>("invert", false)) {}
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void Apply(std::vector<HfPiece>& pieces) const override {
    SplitPieces(pieces, [this](std::string_view t) { return pattern_.FindAll(t); }, behavior_, invert_);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel final : public HfPreTokenizer {
 public:
  explicit ByteLevel(const JsonView& json) : add_prefix_space_(json.Get<bool>("add_prefix_space", true)) {
    if (json.Get<bool>("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern, Where(json));
  }
  void Apply(std::vector<HfPiece>& pieces) const override {
    if (add_prefix_space_)
      for (HfPiece& piece : pieces)
        if (!piece.text.starts_with(' ')) piece.text.insert(0, 1, ' ');
    if (regex_)
      SplitPieces(pieces, [this](std::string_view t) { return regex_->FindAll(t); }, SplitBehavior::kIsolated, false);
    std::string mapped;
    for (HfPiece& piece : pieces) {
      mapped.clear();
      AppendByteLevel(piece.text, mapped);
      piece.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

std::string ReadReplacement(const JsonView& json) {
  const std::string replacement = json.Get<std::string>("replacement", "\xE2\x96\x81");
  size_t offset = 0;
  if (replacement.empty() || (NextCodePointLenient(replacement, offset), offset != replacement.size()))
    json["replacement"].Fail("expected a single character");
  return replacement;
}

PrependScheme ReadPrependScheme(const JsonView& json) {
  if (json.Has("prepend_scheme")) {
    const std::string scheme = json.Get<std::string>("prepend_scheme");
    if (scheme == "always") return PrependScheme::kAlways;
    if (scheme == "first") return PrependScheme::kFirst;
    if (scheme == "never") return PrependScheme::kNever;
    json["prepend_scheme"].Fail(fmt::format("unknown prepend_scheme '{}' (always, first, never)", scheme));
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  return json.Get<bool>("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

class Metaspace final : public HfPreTokenizer {
 public:
  explicit Metaspace(const JsonView& json)
      : replacement_(ReadReplacement(json)), scheme_(ReadPrependScheme(json)), split_(json.Get<bool>("split", true)) {}
  void Apply(std::vector<HfPiece>& pieces) const override {
    for (HfPiece& piece : pieces) {
      ReplaceAll(piece.text, " ", replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && !piece.text.starts_with(replacement_)) piece.text.insert(0, replacement_);
    }
    if (!split_) return;
    SplitPieces(
        pieces,
        [this](std::string_view t) {
          std::vector<std::pair<size_t, size_t>> out;
          for (size_t at = t.find(replacement_); at != std::string_view::npos; at = t.find(replacement_, at + 1))
            out.emplace_back(at, at + replacement_.size());
          return out;
        },
        SplitBehavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// ---- decoders ----------------------------------------------------------------------------------

class DecoderSequence final : public HfDecoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<HfDecoder>> steps) : steps_(std::move(steps)) {}
  void Apply(std::string& token, bool first, bool fused) const override {
    for (const auto& step : steps_) {
      step->Apply(token, first, fused);
      fused = fused || step->Fuses();
    }
  }
  bool Fuses() const override {
    return std::any_of(steps_.begin(), steps_.end(), [](const auto& s) { return s->Fuses(); });
  }

 private:
  std::vector<std::unique_ptr<HfDecoder>> steps_;
};

class ByteLevelDecoder final : public HfDecoder {
 public:
  void Apply(std::string& token, bool, bool) const override {
    std::string bytes;
    for (size_t offset = 0; offset < token.size();) {
      const size_t begin = offset;
      const int byte = ByteOfByteLevelCodePoint(NextCodePointLenient(token, offset));
      if (byte >= 0) {
        bytes += static_cast<char>(byte);
      } else {
        bytes.append(token, begin, offset - begin);  // outside the alphabet: kept as written
      }
    }
    token = std::move(bytes);
  }
};

class MetaspaceDecoder final : public HfDecoder {
 public:
  explicit MetaspaceDecoder(const JsonView& json)
      : replacement_(ReadReplacement(json)), prepend_(ReadPrependScheme(json) != PrependScheme::kNever) {}
  void Apply(std::string& token, bool first, bool) const override {
    // As the `tokenizers` library does: in the first token every mark is dropped, elsewhere each
    // becomes a space.
    ReplaceAll(token, replacement_, first && prepend_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class ReplaceDecoder final : public HfDecoder {
 public:
  explicit ReplaceDecoder(const JsonView& json) : pattern_(json["pattern"]), content_(json.Get<std::string>("content")) {}
  void Apply(std::string& token, bool, bool) const override { pattern_.ReplaceIn(token, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder final : public HfDecoder {
 public:
  void Apply(std::string& token, bool, bool) const override {
    unsigned value = 0;
    if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>' &&
        std::from_chars(&token[3], &token[5], value, 16).ptr == &token[5])
      token = std::string(1, static_cast<char>(value));
  }
};

class FuseDecoder final : public HfDecoder {
 public:
  void Apply(std::string&, bool, bool) const override {}
  bool Fuses() const override { return true; }
};

class StripDecoder final : public HfDecoder {
 public:
  explicit StripDecoder(const JsonView& json)
      : content_(json.Get<std::string>("content")), start_(json.Get<uint32_t>("start")), stop_(json.Get<uint32_t>("stop")) {
    size_t offset = 0;
    if (content_.empty() || (NextCodePointLenient(content_, offset), offset != content_.size()))
      json["content"].Fail("expected a single character");
  }
  void Apply(std::string& token, bool first, bool fused) const override {
    if (fused && stop_ > 0)
      Fail("a Strip decoder with stop > 0 after Fuse strips the end of the whole text, which a token stream cannot know");
    if (fused && !first) return;
    for (uint32_t i = 0; i < start_ && token.starts_with(content_); ++i) token.erase(0, content_.size());
    for (uint32_t i = 0; i < stop_ && token.ends_with(content_); ++i) token.resize(token.size() - content_.size());
  }

 private:
  std::string content_;
  uint32_t start_, stop_;
};

template <class Base, class Parse>
std::vector<std::unique_ptr<Base>> ParseList(const JsonView& json, std::string_view key, const Parse& parse) {
  std::vector<std::unique_ptr<Base>> steps;
  for (const JsonView& item : json[key].Items())
    if (auto step = parse(item)) steps.push_back(std::move(step));
  return steps;
}

[[noreturn]] void Unsupported(const JsonView& json, std::string_view what, const std::string& type,
                              std::string_view supported) {
  json["type"].Fail(fmt::format("{} '{}' is not supported (supported: {})", what, type, supported));
}

}  // namespace

std::unique_ptr<HfNormalizer> ParseHfNormalizer(const JsonView& json) {
  if (json.is_null()) return nullptr;
  json.ExpectObject();
  const std::string type = json.Get<std::string>("type");
  if (type == "Sequence") return std::make_unique<NormalizerSequence>(ParseList<HfNormalizer>(json, "normalizers", ParseHfNormalizer));
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") return std::make_unique<UnicodeNormalizer>(json, type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(json);
  if (type == "Replace") return std::make_unique<Replace>(json);
  if (type == "Prepend") return std::make_unique<Prepend>(json);
  Unsupported(json, "normalizer", type, "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend");
}

std::unique_ptr<HfPreTokenizer> ParseHfPreTokenizer(const JsonView& json) {
  if (json.is_null()) return nullptr;
  json.ExpectObject();
  const std::string type = json.Get<std::string>("type");
  if (type == "Sequence")
    return std::make_unique<PreTokenizerSequence>(ParseList<HfPreTokenizer>(json, "pretokenizers", ParseHfPreTokenizer));
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(json);
  if (type == "Split") return std::make_unique<Split>(json);
  if (type == "Metaspace") return std::make_unique<Metaspace>(json);
  const auto fixed = [&](std::string_view regex, SplitBehavior behavior, bool invert) {
    return std::make_unique<Split>(Pattern(regex, Where(json)), behavior, invert);
  };
  if (type == "Digits")
    return fixed(R"(\p{N})",
                 json.Get<bool>("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                 false);
  if (type == "WhitespaceSplit") return fixed(R"(\s+)", SplitBehavior::kRemoved, false);
  if (type == "Whitespace") return fixed(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true);
  if (type == "Punctuation")
    return fixed(R"([\p{P}!-/:-@\[-`{-~])",
                 json.Has("behavior") ? ParseBehavior(json["behavior"]) : SplitBehavior::kIsolated, false);
  Unsupported(json, "pre_tokenizer", type,
              "Sequence, ByteLevel, Split, Metaspace, Digits, WhitespaceSplit, Whitespace, Punctuation");
}

std::unique_ptr<HfDecoder> ParseHfDecoder(const JsonView& json) {
  if (json.is_null()) return nullptr;
  json.ExpectObject();
  const std::string type = json.Get<std::string>("type");
  if (type == "Sequence") return std::make_unique<DecoderSequence>(ParseList<HfDecoder>(json, "decoders", ParseHfDecoder));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(json);
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(json);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(json);
  Unsupported(json, "decoder", type, "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip");
}

}  // namespace lowbit
