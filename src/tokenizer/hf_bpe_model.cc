// The BPE model of a tokenizer.json, as the `tokenizers` library runs it (models/bpe/model.rs):
// characters that are tokens become symbols, others fall back to <0xXX> byte tokens or to the
// unknown token; then adjacent symbols merge by merge rank (lowest first, leftmost on ties).
#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

namespace lowbit {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;
  bool alive;
};

struct Candidate {
  int32_t rank, pos, result;
};

// The heap's top is the lowest rank, then the leftmost position.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  }
};

size_t Utf8Length(char lead) {
  const auto b = static_cast<uint8_t>(lead);
  return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

}  // namespace

HfBpeModel::HfBpeModel(const JsonView& model) {
  model.ExpectObject();
  const std::string type = model.Get<std::string>("type", "BPE");
  if (type != "BPE")
    model["type"].Fail(fmt::format("model type '{}' is not supported (supported: 'BPE')", type));
  if (model.Has("dropout") && model.Get<double>("dropout") != 0.0)
    model["dropout"].Fail("BPE dropout makes tokenization random; only null or 0 is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.Get<std::string>(key, "").empty())
      model[key].Fail("subword prefixes and suffixes (WordPiece-style BPE) are not supported");
  byte_fallback_ = model.Get<bool>("byte_fallback", false);
  fuse_unk_ = model.Get<bool>("fuse_unk", false);
  ignore_merges_ = model.Get<bool>("ignore_merges", false);

  // Tens of thousands of entries: read directly, with the checks JsonView would make.
  const JsonView vocab = model["vocab"];
  vocab.ExpectObject();
  ids_.reserve(vocab.size());
  // Ids are dense in real files; the bound keeps a hostile id from sizing the table.
  const int64_t max_id = 2 * static_cast<int64_t>(vocab.size()) + 65536;
  for (const auto& [token, value] : vocab.value().items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > max_id)
      vocab[token].Fail(fmt::format("expected a token id from 0 to {} (twice the entries, plus 65536)", max_id));
    const auto id = value.get<int32_t>();
    if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(id) + 1);
    if (!tokens_[static_cast<size_t>(id)].empty())
      vocab[token].Fail(fmt::format("id {} is also the id of '{}'", id, tokens_[static_cast<size_t>(id)]));
    tokens_[static_cast<size_t>(id)] = token;
    ids_.emplace(token, id);
  }
  if (tokens_.empty()) vocab.Fail("the vocabulary is empty");

  const JsonView merges = model["merges"];
  merges.ExpectArray();
  merges_.reserve(merges.size());
  int32_t rank = 0;
  std::string joined;
  for (const auto& item : merges.value()) {
    std::string_view left, right;
    if (item.is_string()) {
      const std::string& line = item.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        merges.Fail(fmt::format("merges[{}] '{}' is not two tokens separated by one space", rank, line));
      left = std::string_view(line).substr(0, space);
      right = std::string_view(line).substr(space + 1);
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      left = item[0].get_ref<const std::string&>();
      right = item[1].get_ref<const std::string&>();
    } else {
      merges.Fail(fmt::format("merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", rank));
    }
    joined.assign(left).append(right);
    const int32_t a = Find(left), b = Find(right), result = Find(joined);
    if (a < 0 || b < 0 || result < 0)
      merges.Fail(fmt::format("merges[{}] '{} {}' names a token that is not in model.vocab", rank, left, right));
    // A repeated pair takes its last rank, as the library's map does.
    merges_.insert_or_assign(PairKey(a, b), Merge{rank, result});
    ++rank;
  }

  if (model.Has("unk_token")) {
    const std::string unk = model.Get<std::string>("unk_token");
    unk_id_ = Find(unk);
    if (unk_id_ < 0) model["unk_token"].Fail(fmt::format("'{}' is not in model.vocab", unk));
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char piece[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    byte_ids_[b] = Find(std::string_view(piece, sizeof(piece)));
  }
}

int32_t HfBpeModel::Find(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string* HfBpeModel::Token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[static_cast<size_t>(id)].empty()) return nullptr;
  return &tokens_[static_cast<size_t>(id)];
}

void HfBpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = Find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  const auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  // The library keeps a pending unknown token (fused over consecutive unknown characters) and
  // emits it before the next character that is a token, or at the end.
  bool unk_pending = false;
  for (size_t offset = 0; offset < piece.size();) {
    const size_t len = std::min(Utf8Length(piece[offset]), piece.size() - offset);
    const std::string_view c = piece.substr(offset, len);
    offset += len;
    if (const int32_t id = Find(c); id >= 0) {
      if (unk_pending) add(unk_id_), unk_pending = false;
      add(id);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(c.begin(), c.end(), [this](char b) { return byte_ids_[static_cast<uint8_t>(b)] >= 0; })) {
      for (const char b : c) add(byte_ids_[static_cast<uint8_t>(b)]);
      continue;
    }
    if (unk_id_ < 0) continue;  // no unknown token: the library drops the character
    if (unk_pending && !fuse_unk_) add(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  const auto merge_of = [&](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges_.find(PairKey(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id));
    return it == merges_.end() ? nullptr : &it->second;
  };
  const auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    if (const Merge* m = merge_of(left, right)) queue.push({m->rank, left, m->result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    // Stale when either side has merged since the pair was queued.
    const Merge* current = merge_of(top.pos, left.next);
    if (current == nullptr || current->result != top.result) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    left.id = top.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    try_pair(left.prev);
    try_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) out.push_back(symbols[static_cast<size_t>(i)].id);
}

}  // namespace lowbit
