// Longest-match lookup of literal strings (a tokenizer's added tokens) at a text position: a byte
// trie with sorted edges, so scanning a text costs about one lookup per byte however many tokens
// there are (Llama-3 has 256 reserved ones, DeepSeek thousands).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace lowbit {

class TokenTrie {
 public:
  // A later Insert of the same text keeps the first value.
  void Insert(std::string_view text, size_t value) {
    int32_t node = 0;
    for (const char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      auto& edges = nodes_[static_cast<size_t>(node)].edges;
      auto it = std::lower_bound(edges.begin(), edges.end(), std::pair<uint8_t, int32_t>{byte, -1});
      if (it == edges.end() || it->first != byte) {
        const auto child = static_cast<int32_t>(nodes_.size());
        it = edges.insert(it, {byte, child});
        nodes_.emplace_back();  // invalidates `edges`; `child` is already recorded
      }
      node = it->second;
    }
    Node& end = nodes_[static_cast<size_t>(node)];
    if (end.value < 0) end.value = static_cast<int64_t>(value);
  }

  // The value and length of the longest inserted text that starts at text[pos].
  bool LongestAt(std::string_view text, size_t pos, size_t& value, size_t& length) const {
    bool found = false;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto& edges = nodes_[static_cast<size_t>(node)].edges;
      const auto byte = static_cast<uint8_t>(text[i]);
      const auto it = std::lower_bound(edges.begin(), edges.end(), std::pair<uint8_t, int32_t>{byte, -1});
      if (it == edges.end() || it->first != byte) break;
      node = it->second;
      if (const int64_t v = nodes_[static_cast<size_t>(node)].value; v >= 0) {
        value = static_cast<size_t>(v);
        length = i + 1 - pos;
        found = true;
      }
    }
    return found;
  }

  bool empty() const { return nodes_.size() == 1; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> edges;  // sorted by byte
    int64_t value = -1;
  };
  std::vector<Node> nodes_{1};
};

}  // namespace lowbit
