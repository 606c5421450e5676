// Regular expressions for pre-tokenizers: Hugging Face tokenizer.json `Split` patterns and
// llama.cpp's per-vocabulary regex lists. PCRE2 (Debian's libpcre2) in UTF + Unicode-property
// mode, JIT-compiled: the Perl-style backtracking semantics (leftmost match, alternatives in
// order, lookahead) that the Oniguruma engine of the `tokenizers` library also has.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lowbit {

class Regex {
 public:
  // Throws Error "<source>: <message> in pattern '<pattern>'" for a pattern PCRE2 rejects.
  Regex(std::string_view pattern, const std::string& source);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // The non-overlapping matches in `text` (valid UTF-8), left to right, as byte ranges
  // [begin, end). An empty match advances the search by one character and is not reported.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How a split treats the matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// `text` cut at the ranges in `matches` (sorted, non-overlapping), the matched pieces handled per
// `behavior`; `invert` swaps the roles of matches and the text between them. Empty pieces are
// dropped. Returns byte ranges into `text`.
std::vector<std::pair<size_t, size_t>> SplitAtMatches(
    size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
    bool invert);

}  // namespace lowbit
