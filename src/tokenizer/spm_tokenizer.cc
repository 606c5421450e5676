#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace lowbit {
namespace {


// Byte length of the UTF-8 sequence a lead byte announces. Like llama.cpp this trusts the lead
// byte alone (continuation bytes are not checked), so invalid input still splits deterministically
// and ends up as byte tokens.
size_t Utf8Length(char lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[static_cast<uint8_t>(lead) >> 4];
}

// A run of bytes in the text being merged, linked to its live neighbours.
struct Symbol {
  int32_t prev;
  int32_t next;
  size_t begin;
  size_t len;  // 0 once merged into the symbol on its left
};

// Two adjacent symbols whose concatenation is a token.
struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  size_t size;  // byte length of the pair when it was queued; detects stale entries
};

// Orders the queue: the highest score first, ties broken by the leftmost pair. Valid entries
// never tie on both (two live pairs cannot share a left symbol), so the merge order is fully
// determined and equals llama.cpp's.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(const VocabData& vocab)
    : index_(vocab),
      source_(vocab.source.empty() ? "vocabulary" : vocab.source),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      unk_id_(vocab.unk_id),
      add_space_prefix_(vocab.add_space_prefix),
      adds_bos_(vocab.add_bos) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    // llama.cpp looks for the <0xXX> piece (upper-case hex) first, then the raw byte itself.
    const char piece[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = index_.Find(std::string_view(piece, sizeof(piece)));
    if (id < 0) id = index_.Find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = id;
  }
}

int32_t SpmTokenizer::ByteToken(uint8_t b) const {
  if (byte_ids_[b] >= 0) return byte_ids_[b];
  // llama.cpp aborts here; emitting <unk> keeps the text's length visible instead.
  if (unk_id_ >= 0) return unk_id_;
  Fail("{}: the vocabulary has no token for byte 0x{:02X} and no unknown token", source_, b);
}

void SpmTokenizer::EncodeFragment(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(Utf8Length(text[offset]), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  const auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t id = index_.Find(text.substr(l.begin, l.len + r.len));
    if (id >= 0) queue.push({index_.score(id), left, right, l.len + r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.left)];
    Symbol& right = symbols[static_cast<size_t>(top.right)];
    // Skip pairs whose symbols have changed since they were queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
    try_pair(left.prev, top.left);
    try_pair(top.left, left.next);
  }

  // Every merged symbol is a token by construction; only unmerged characters can be missing
  // from the vocabulary, and those fall back to one token per byte.
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.len);
    if (const int32_t id = index_.Find(piece); id >= 0) {
      out.push_back(id);
    } else {
      for (const char c : piece) out.push_back(ByteToken(static_cast<uint8_t>(c)));
    }
  }
}

std::vector<int32_t> SpmTokenizer::EncodeText(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && adds_bos_) {
    if (bos_id_ < 0) Fail("{}: the vocabulary has no BOS token", source_);
    out.push_back(bos_id_);
  }
  // The dummy-prefix space goes before the first text fragment and before any text that
  // follows a user-defined token, as in llama.cpp.
  bool after_special = true;
  for (const TextFragment& fragment : index_.Partition(text, parse_special)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      after_special = true;
      continue;
    }
    std::string escaped;
    escaped.reserve(fragment.text.size() + kSpaceMark.size());
    if (add_space_prefix_ && after_special) escaped += kSpaceMark;
    for (const char c : fragment.text) {
      if (c == ' ') {
        escaped += kSpaceMark;
      } else {
        escaped += c;
      }
    }
    EncodeFragment(escaped, out);
    after_special = false;
  }
  return out;
}

std::string SpmTokenizer::DecodeToken(int32_t id, int32_t previous) const {
  if (!index_.valid(id)) return "";
  std::string text = index_.SentencePieceText(id);
  // Drop the space the encoder put in front of the text.
  if (add_space_prefix_ && (previous < 0 || previous == bos_id_) && text.starts_with(' '))
    text.erase(0, 1);
  return text;
}

std::string SpmTokenizer::Piece(int32_t id) const {
  return index_.valid(id) ? index_.text(id) : std::string();
}

}  // namespace lowbit
