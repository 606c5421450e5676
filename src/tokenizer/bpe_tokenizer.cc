#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <queue>

#include "core/error.h"
#include "tokenizer/gguf_pre_tokenizers.h"
#include "tokenizer/utf8.h"

namespace lowbit {
namespace {

// ---- Unicode classes ---------------------------------------------------------------------------

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// General categories L* (class 1) and N* (class 2) of Unicode 15.1, the version of llama.cpp's
// unicode-data.cpp, as runs: each entry is (distance from the previous run's start) * 4 + class,
// the first run starting at U+0000 with class 0. Generated from UnicodeData.txt 15.0 (Debian's
// unicode-data package) plus the 15.1 CJK Extension I letters U+2EBF0..U+2EE5D:
//   prev = 0; for each code point c whose class differs from c-1's: emit (c - prev) * 4 + class.
constexpr uint32_t kCategoryRuns[] = {
    194, 40, 29, 104, 25, 104, 189, 4, 30, 8, 5, 4, 14, 5, 4, 6, 12, 5, 92, 5, 124, 5, 1832, 17, 48,
    57, 20, 29, 4, 5, 4, 517, 20, 5, 8, 9, 16, 5, 4, 25, 4, 5, 12, 5, 4, 5, 80, 5, 332, 5, 556, 33,
    664, 5, 152, 9, 4, 25, 164, 285, 108, 17, 16, 181, 172, 86, 40, 17, 8, 5, 396, 5, 4, 61, 8, 29,
    10, 41, 12, 9, 4, 65, 4, 5, 120, 117, 356, 45, 4, 58, 41, 132, 37, 8, 17, 4, 21, 88, 17, 4, 37,
    4, 13, 4, 93, 100, 29, 44, 21, 96, 5, 24, 69, 168, 233, 216, 13, 4, 73, 4, 29, 40, 18, 40, 5,
    64, 17, 32, 9, 8, 9, 88, 5, 28, 5, 4, 13, 16, 13, 4, 65, 4, 53, 8, 5, 12, 18, 41, 8, 10, 24, 9,
    4, 33, 24, 17, 8, 9, 88, 5, 28, 5, 8, 5, 8, 5, 8, 125, 16, 5, 4, 30, 40, 9, 12, 65, 36, 5, 12,
    5, 88, 5, 28, 5, 8, 5, 20, 13, 4, 73, 4, 61, 8, 18, 40, 37, 4, 45, 32, 9, 8, 9, 88, 5, 28, 5, 8,
    5, 20, 13, 4, 121, 8, 5, 12, 18, 40, 5, 6, 24, 45, 4, 5, 24, 13, 12, 5, 16, 13, 8, 5, 4, 5, 8,
    13, 8, 13, 12, 13, 48, 89, 4, 86, 52, 73, 32, 5, 12, 5, 92, 5, 64, 13, 4, 105, 12, 9, 4, 9, 8,
    18, 40, 34, 28, 5, 4, 17, 32, 5, 12, 5, 92, 5, 40, 5, 20, 13, 4, 125, 8, 5, 8, 18, 40, 5, 8, 69,
    36, 5, 12, 5, 164, 9, 4, 65, 4, 21, 12, 6, 29, 12, 18, 76, 5, 24, 21, 72, 13, 96, 5, 36, 5, 4,
    9, 28, 126, 40, 69, 192, 5, 8, 49, 28, 38, 40, 157, 8, 5, 4, 5, 20, 5, 96, 5, 4, 5, 40, 5, 8,
    37, 4, 9, 20, 5, 4, 38, 40, 9, 16, 129, 4, 126, 80, 49, 32, 5, 144, 109, 20, 461, 172, 81, 6,
    40, 25, 24, 17, 16, 13, 4, 13, 8, 29, 12, 17, 52, 49, 4, 6, 40, 25, 152, 5, 4, 21, 4, 9, 172, 5,
    1332, 5, 16, 9, 28, 5, 4, 5, 16, 9, 164, 5, 16, 9, 132, 5, 16, 9, 28, 5, 4, 5, 16, 9, 60, 5,
    228, 5, 16, 9, 268, 58, 80, 13, 64, 65, 344, 9, 24, 13, 2480, 9, 68, 5, 104, 21, 300, 14, 13,
    32, 29, 72, 53, 76, 57, 72, 57, 52, 5, 12, 61, 208, 141, 4, 17, 4, 14, 40, 26, 40, 90, 40, 25,
    356, 29, 20, 9, 136, 5, 4, 21, 280, 41, 124, 158, 41, 120, 9, 20, 45, 176, 17, 104, 26, 44, 149,
    92, 37, 212, 174, 40, 26, 40, 53, 4, 373, 188, 69, 32, 14, 40, 165, 120, 53, 10, 41, 176, 105,
    144, 114, 40, 13, 14, 41, 144, 9, 36, 29, 172, 9, 12, 165, 16, 5, 24, 5, 8, 13, 4, 21, 768, 257,
    1112, 9, 24, 9, 152, 9, 24, 9, 32, 5, 4, 5, 4, 5, 4, 5, 124, 9, 212, 5, 28, 5, 4, 13, 12, 5, 28,
    13, 16, 9, 24, 17, 52, 21, 12, 5, 28, 462, 5, 4, 10, 24, 21, 6, 40, 25, 52, 405, 4, 17, 4, 9,
    40, 5, 4, 13, 20, 25, 4, 5, 4, 5, 4, 5, 16, 5, 44, 9, 16, 21, 20, 17, 4, 6, 205, 10, 20, 2906,
    240, 314, 88, 2522, 120, 4529, 916, 25, 16, 13, 8, 38, 4, 9, 152, 5, 4, 21, 4, 9, 224, 29, 4,
    65, 92, 37, 28, 5, 28, 5, 28, 5, 28, 5, 28, 5, 28, 5, 28, 5, 28, 321, 4, 1877, 10, 4, 102, 36,
    29, 20, 10, 13, 8, 17, 344, 25, 12, 5, 360, 5, 16, 21, 172, 5, 376, 14, 16, 41, 128, 193, 64,
    130, 40, 122, 32, 6, 60, 130, 40, 158, 60, 1281, 26368, 257, 88628, 269, 184, 9, 1076, 13, 66,
    41, 8, 81, 188, 65, 124, 9, 282, 40, 157, 36, 9, 412, 9, 256, 21, 8, 5, 4, 5, 20, 97, 64, 5, 12,
    5, 16, 5, 92, 54, 24, 41, 208, 57, 200, 114, 40, 97, 24, 13, 4, 5, 8, 6, 41, 112, 41, 92, 101,
    116, 29, 188, 113, 6, 40, 25, 20, 5, 42, 41, 20, 5, 164, 93, 12, 5, 32, 18, 40, 25, 92, 13, 4,
    13, 200, 5, 4, 13, 8, 9, 20, 9, 4, 5, 4, 97, 12, 9, 44, 29, 12, 49, 24, 9, 24, 9, 24, 37, 28, 5,
    28, 5, 172, 5, 56, 25, 460, 54, 40, 25, 44688, 49, 92, 17, 196, 33809, 1464, 9, 424, 153, 28,
    49, 20, 21, 4, 5, 40, 5, 52, 5, 20, 5, 4, 5, 8, 5, 8, 5, 432, 133, 1452, 73, 256, 9, 216, 161,
    48, 465, 20, 5, 540, 78, 40, 29, 104, 25, 104, 45, 356, 13, 24, 9, 24, 9, 24, 9, 12, 141, 48, 5,
    104, 5, 76, 5, 8, 5, 60, 9, 56, 137, 492, 50, 180, 50, 228, 70, 8, 977, 116, 13, 196, 66, 108,
    17, 130, 16, 37, 82, 5, 34, 4, 21, 152, 41, 120, 9, 144, 17, 32, 6, 20, 169, 632, 10, 40, 25,
    144, 17, 144, 17, 160, 33, 208, 49, 44, 5, 60, 5, 28, 5, 8, 5, 44, 5, 60, 5, 28, 5, 8, 269,
    1244, 37, 88, 41, 32, 97, 24, 5, 168, 5, 36, 277, 24, 9, 4, 5, 176, 5, 8, 13, 4, 9, 92, 10, 33,
    92, 10, 29, 124, 34, 36, 193, 76, 5, 8, 22, 21, 90, 24, 17, 104, 281, 224, 18, 9, 10, 64, 10,
    185, 4, 61, 16, 5, 12, 5, 116, 42, 36, 93, 118, 8, 5, 118, 12, 129, 32, 5, 112, 26, 20, 65, 216,
    41, 88, 10, 33, 76, 22, 33, 72, 94, 28, 321, 292, 221, 204, 53, 204, 30, 25, 144, 50, 40, 1178,
    124, 5, 168, 25, 8, 313, 118, 41, 4, 33, 88, 46, 16, 109, 72, 185, 86, 28, 81, 92, 49, 212, 106,
    120, 5, 8, 9, 4, 53, 180, 129, 100, 30, 40, 37, 144, 62, 40, 17, 4, 9, 4, 33, 140, 13, 4, 49,
    192, 57, 16, 46, 41, 4, 5, 4, 18, 80, 45, 72, 5, 100, 77, 8, 253, 28, 5, 4, 5, 16, 5, 60, 5, 40,
    29, 188, 70, 40, 45, 32, 9, 8, 9, 88, 5, 28, 5, 8, 5, 20, 13, 4, 73, 4, 49, 20, 633, 212, 73,
    16, 22, 40, 21, 12, 121, 192, 81, 8, 5, 4, 34, 40, 665, 188, 165, 16, 145, 192, 81, 4, 46, 40,
    153, 172, 53, 4, 30, 40, 217, 108, 86, 48, 17, 28, 741, 176, 465, 258, 76, 49, 32, 9, 4, 9, 32,
    5, 8, 5, 96, 61, 4, 5, 4, 58, 40, 281, 32, 9, 156, 65, 4, 5, 4, 113, 4, 41, 160, 29, 4, 85, 4,
    45, 184, 77, 4, 73, 292, 1053, 36, 5, 148, 69, 4, 62, 116, 21, 120, 449, 28, 5, 8, 5, 152, 85,
    4, 38, 40, 25, 24, 5, 8, 5, 128, 57, 4, 30, 40, 1241, 76, 61, 4, 5, 52, 5, 136, 114, 40, 345, 4,
    62, 84, 173, 3688, 410, 444, 69, 784, 10545, 388, 61, 4288, 69, 24, 16101, 2332, 34533, 2276,
    29, 124, 6, 40, 25, 316, 6, 40, 25, 120, 73, 192, 65, 16, 50, 40, 6, 28, 5, 84, 21, 76, 2753,
    258, 92, 421, 300, 21, 4, 265, 52, 257, 8, 5, 4, 113, 24544, 33, 4952, 169, 36, 35741, 16, 5,
    28, 5, 8, 5, 1164, 61, 4, 117, 12, 9, 4, 57, 16, 33, 1584, 9233, 428, 21, 52, 13, 36, 29, 40,
    22682, 80, 50, 80, 434, 100, 541, 340, 5, 284, 5, 8, 9, 4, 9, 8, 9, 16, 5, 48, 5, 4, 5, 28, 5,
    260, 5, 16, 9, 32, 5, 28, 5, 112, 5, 16, 5, 20, 5, 4, 13, 28, 5, 1360, 9, 100, 5, 100, 5, 124,
    5, 100, 5, 124, 5, 100, 5, 124, 5, 100, 5, 124, 5, 100, 5, 32, 10, 200, 7169, 124, 25, 24, 1045,
    248, 585, 180, 41, 28, 10, 40, 17, 4, 1285, 120, 73, 176, 18, 40, 1881, 112, 18, 40, 2969, 28,
    5, 16, 5, 8, 5, 60, 5, 788, 10, 36, 193, 272, 29, 4, 18, 40, 3166, 236, 6, 12, 6, 16, 306, 180,
    6, 60, 777, 16, 5, 108, 5, 8, 5, 4, 9, 4, 5, 40, 5, 16, 5, 4, 5, 4, 25, 4, 17, 4, 5, 4, 5, 4, 5,
    12, 5, 8, 5, 4, 9, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 8, 5, 4, 9, 16, 5, 28, 5, 16, 5, 16, 5, 4, 5,
    40, 5, 68, 21, 12, 5, 20, 5, 68, 2322, 52, 11150, 40, 4121, 170880, 129, 16616, 25, 888, 9,
    23048, 57, 29892, 61, 2488, 9865, 2168, 6025, 19756, 21, 16768,
};

struct ClassRun {
  uint32_t start;
  CharClass cls;
};

const std::vector<ClassRun>& ClassRuns() {
  static const std::vector<ClassRun> runs = [] {
    std::vector<ClassRun> out{{0, kOther}};
    uint32_t start = 0;
    for (const uint32_t v : kCategoryRuns) {
      start += v >> 2;
      out.push_back({start, static_cast<CharClass>(v & 3)});
    }
    return out;
  }();
  return runs;
}

// Python's \s as llama.cpp's tables record it: the White_Space property.
bool IsWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

CharClass Classify(uint32_t c) {
  if (IsWhitespace(c)) return kSpace;  // no white-space character is a letter or number
  const auto& runs = ClassRuns();
  const auto it = std::upper_bound(runs.begin(), runs.end(), c,
                                   [](uint32_t v, const ClassRun& r) { return v < r.start; });
  return std::prev(it)->cls;
}

// ---- BPE merge queue ---------------------------------------------------------------------------

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t begin;
  size_t len;  // 0 once merged into the symbol on its left
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  size_t size;  // byte length of the pair when queued; a changed length marks a stale entry
};

// Lowest rank first, then the leftmost pair (a total order over live pairs, as in llama.cpp).
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

std::vector<std::string> BpeTokenizer::PreTokenize(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) cpts.push_back(NextCodePointLenient(text, offset));

  const size_t n = cpts.size();
  // The class at `pos`, with positions past the end reading as "nothing" (no class matches).
  constexpr int kEnd = -1;
  const auto cls = [&](size_t pos) {
    return pos < n ? static_cast<int>(Classify(cpts[pos])) : kEnd;
  };

  std::vector<std::string> words;
  size_t start = 0;
  const auto emit = [&](size_t end) {
    if (end > start) {
      std::string& word = words.emplace_back();
      for (size_t i = start; i < end; ++i) AppendUtf8(cpts[i], word);
    }
    start = end;
  };

  for (size_t pos = 0; pos < n;) {
    const uint32_t c = cpts[pos];
    // 's|'t|'re|'ve|'m|'ll|'d (lower case only, as in the original GPT-2 regex)
    if (c == '\'' && pos + 1 < n) {
      const uint32_t c1 = cpts[pos + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(pos += 2);
        continue;
      }
      if (pos + 2 < n) {
        const uint32_t c2 = cpts[pos + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(pos += 3);
          continue;
        }
      }
    }
    // " ?X+" for X = letters, numbers, or anything that is none of those nor white space: an
    // optional leading space joins a run of the class that follows it.
    const int run = c == ' ' ? cls(pos + 1) : cls(pos);
    if (run == kLetter || run == kNumber || run == kOther) {
      pos += c == ' ';
      while (cls(pos) == run) ++pos;
      emit(pos);
      continue;
    }
    // \s+(?!\S) leaves the last white-space character of a run for the word that follows;
    // \s+ takes a run that ends the text whole.
    size_t spaces = 0;
    while (cls(pos + spaces) == kSpace) ++spaces;
    if (spaces > 1 && pos + spaces < n) {
      emit(pos += spaces - 1);
    } else {
      emit(pos += std::max<size_t>(spaces, 1));
    }
  }
  return words;
}

BpeTokenizer::BpeTokenizer(const VocabData& vocab)
    : index_(vocab),
      source_(vocab.source.empty() ? "vocabulary" : vocab.source),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      add_space_prefix_(vocab.add_space_prefix),
      adds_bos_(vocab.add_bos) {
  if (!SplitsLikeGpt2(vocab.pre)) {
    const GgufPreTokenizer* pre = FindGgufPreTokenizer(vocab.pre);
    if (pre == nullptr)
      Fail("{}: tokenizer.ggml.pre '{}' is not supported for the gpt2 tokenizer (supported: {})", source_, vocab.pre,
           KnownGgufPreTokenizers(/*gpt2_names=*/true));
    for (const std::string_view regex : pre->regexes) regexes_.emplace_back(regex, source_ + ": tokenizer.ggml.pre");
    ignore_merges_ = pre->ignore_merges;
    raw_utf8_ = pre->raw_utf8;
  }
  ranks_.reserve(vocab.merges.size());
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& merge = vocab.merges[i];
    // llama.cpp splits at the first space after position 0; a line without one can never match.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) continue;
    // The first occurrence of a pair keeps its rank, as llama.cpp's map emplace does.
    ranks_.emplace(merge, static_cast<int32_t>(i));
  }
}

int32_t BpeTokenizer::Rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + 1 + right.size());
  key.append(left).append(1, ' ').append(right);
  const auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<std::string> BpeTokenizer::RegexPreTokenize(std::string_view text) const {
  // llama.cpp splits code points decoded leniently; PCRE2 needs them re-encoded as valid UTF-8.
  std::string valid;
  valid.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const uint32_t c = NextCodePointLenient(text, offset);
    AppendUtf8(c >= 0xD800 && c <= 0xDFFF ? kReplacementChar : c, valid);
  }
  std::vector<std::string> pieces{std::move(valid)}, next;
  for (const Regex& regex : regexes_) {
    next.clear();
    for (const std::string& piece : pieces)
      for (const auto& [begin, end] : SplitAtMatches(piece.size(), regex.FindAll(piece), SplitBehavior::kIsolated, false))
        next.push_back(piece.substr(begin, end - begin));
    pieces.swap(next);
  }
  return pieces;
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_ || (raw_utf8_ && word.find_first_not_of('\n') == std::string_view::npos)) {
    if (const int32_t id = index_.Find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < word.size();) {
    // `word` is valid UTF-8 (built from the byte-level alphabet), so lead bytes give lengths.
    const auto lead = static_cast<uint8_t>(word[offset]);
    const size_t len = std::min<size_t>(lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4,
                                        word.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + len == word.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  const auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t rank = Rank(word.substr(l.begin, l.len), word.substr(r.begin, r.len));
    if (rank >= 0) queue.push({rank, left, right, l.len + r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.left)];
    Symbol& right = symbols[static_cast<size_t>(top.right)];
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
    try_pair(left.prev, top.left);
    try_pair(top.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = word.substr(s.begin, s.len);
    if (const int32_t id = index_.Find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // A piece missing from the vocabulary: llama.cpp looks up each of its bytes as a one-byte
    // token (raw UTF-8: as "<0xAB>") and silently drops the bytes that have none.
    for (const char c : piece) {
      const std::string byte = raw_utf8_ ? fmt::format("<0x{:02X}>", static_cast<uint8_t>(c)) : std::string(1, c);
      if (const int32_t id = index_.Find(byte); id >= 0) out.push_back(id);
    }
  }
}

std::vector<int32_t> BpeTokenizer::EncodeText(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && adds_bos_) {
    if (bos_id_ < 0) Fail("{}: the vocabulary has no BOS token", source_);
    out.push_back(bos_id_);
  }
  std::string encoded;
  for (const TextFragment& fragment : index_.Partition(text, parse_special)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      continue;
    }
    if (raw_utf8_) {
      std::string escaped;
      for (const char c : fragment.text) {
        if (c == ' ') escaped.append(kSpaceMark);
        else escaped.push_back(c);
      }
      for (const std::string& word : RegexPreTokenize(escaped)) EncodeWord(word, out);
      continue;
    }
    for (const std::string& word : regexes_.empty() ? PreTokenize(fragment.text) : RegexPreTokenize(fragment.text)) {
      encoded.clear();
      AppendByteLevel(word, encoded);
      EncodeWord(encoded, out);
    }
  }
  return out;
}

std::string BpeTokenizer::DecodeToken(int32_t id, int32_t previous) const {
  if (!index_.valid(id)) return "";
  if (raw_utf8_) return index_.SentencePieceText(id);
  const std::string& piece = index_.text(id);
  std::string text;
  switch (index_.attr(id)) {
    case TokenAttr::kUserDefined:
      text = piece;
      break;
    case TokenAttr::kNormal:
      for (size_t offset = 0; offset < piece.size();) {
        const size_t begin = offset;
        const int byte = ByteOfByteLevelCodePoint(NextCodePointLenient(piece, offset));
        if (byte >= 0) {
          text += static_cast<char>(byte);
        } else {
          // Outside the alphabet: llama.cpp writes this marker (with the whole piece) instead.
          text += "[UNK_BYTE_0x";
          for (size_t i = begin; i < offset; ++i)
            text += fmt::format("{:02x}", static_cast<uint8_t>(piece[i]));
          text += piece + "]";
        }
      }
      break;
    default:  // control, unknown, byte, unused, undefined: no text, as llama.cpp renders them
      return "";
  }
  if (add_space_prefix_ && (previous < 0 || previous == bos_id_) && text.starts_with(' '))
    text.erase(0, 1);
  return text;
}

std::string BpeTokenizer::Piece(int32_t id) const {
  return index_.valid(id) ? index_.text(id) : std::string();
}

}  // namespace lowbit
