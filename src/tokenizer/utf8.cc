#include "tokenizer/utf8.h"

#include <algorithm>
#include <array>

namespace lowbit {
namespace {

bool IsPrintableByte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const std::array<uint32_t, 256>& ByteLevelTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) t[b] = IsPrintableByte(b) ? b : next++;
    return t;
  }();
  return table;
}

}  // namespace

uint32_t NextCodePointLenient(std::string_view s, size_t& offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[offset + i]); };
  const auto continuation = [&](size_t n) {
    if (offset + n >= s.size()) return false;
    for (size_t i = 1; i <= n; ++i)
      if ((byte(i) & 0xC0) != 0x80) return false;
    return true;
  };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) {
    offset += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0 && continuation(1)) {
    const uint32_t c = (uint32_t{b0 & 0x1Fu} << 6) | (byte(1) & 0x3F);
    offset += 2;
    return c;
  }
  if ((b0 & 0xF0) == 0xE0 && continuation(2)) {
    const uint32_t c = (uint32_t{b0 & 0x0Fu} << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3F);
    offset += 3;
    return c;
  }
  if ((b0 & 0xF8) == 0xF0 && continuation(3)) {
    const uint32_t c = (uint32_t{b0 & 0x07u} << 18) | ((byte(1) & 0x3Fu) << 12) |
                       ((byte(2) & 0x3Fu) << 6) | (byte(3) & 0x3F);
    offset += 4;
    return c;
  }
  offset += 1;
  return kReplacementChar;
}

void AppendUtf8(uint32_t c, std::string& out) {
  if (c > 0x10FFFF) c = kReplacementChar;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string ToValidUtf8(std::string_view s) {
  // Length of the well-formed sequence at `i`, or 0. The second-byte ranges exclude overlong
  // forms, surrogates and values past U+10FFFF (Unicode table 3-7); a maximal invalid prefix is
  // replaced by one U+FFFD, as the Unicode "best practice" (and Python) do.
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto valid_length = [&](size_t i, size_t& prefix) -> size_t {
    const uint8_t b0 = b(i);
    prefix = 1;
    if (b0 < 0x80) return 1;
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 == 0xE0) n = 3, lo = 0xA0;
    else if (b0 >= 0xE1 && b0 <= 0xEC) n = 3;
    else if (b0 == 0xED) n = 3, hi = 0x9F;
    else if (b0 >= 0xEE && b0 <= 0xEF) n = 3;
    else if (b0 == 0xF0) n = 4, lo = 0x90;
    else if (b0 >= 0xF1 && b0 <= 0xF3) n = 4;
    else if (b0 == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    for (size_t k = 1; k < n; ++k) {
      if (i + k >= s.size()) return 0;
      const uint8_t c = b(i + k);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
      prefix = k + 1;
    }
    return n;
  };
  size_t i = 0, prefix = 0;
  while (i < s.size()) {
    const size_t n = valid_length(i, prefix);
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return std::string(s);
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = valid_length(i, prefix);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      AppendUtf8(kReplacementChar, out);
      i += prefix;
    }
  }
  return out;
}

uint32_t ByteLevelCodePoint(uint8_t byte) { return ByteLevelTable()[byte]; }

int ByteOfByteLevelCodePoint(uint32_t c) {
  if (c < 0x100 && IsPrintableByte(c)) return static_cast<int>(c);
  if (c < 0x100 || c >= 0x100 + 68) return -1;
  const auto& table = ByteLevelTable();
  return static_cast<int>(std::find(table.begin(), table.end(), c) - table.begin());
}

void AppendByteLevel(std::string_view bytes, std::string& out) {
  for (const char c : bytes) AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(c)), out);
}

}  // namespace lowbit
