// UTF-8 and the GPT-2 byte-level alphabet, shared by the GGUF and Hugging Face tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes one code point at `offset` and advances past it, the way llama.cpp's
// unicode_cpts_from_utf8 does: only the lead byte and the continuation bits are checked (overlong
// forms and surrogates pass); an invalid sequence yields U+FFFD and skips one byte.
uint32_t NextCodePointLenient(std::string_view s, size_t& offset);

// Appends `c` as UTF-8 (values past U+10FFFF become U+FFFD).
void AppendUtf8(uint32_t c, std::string& out);

// `s` as well-formed UTF-8: every maximal invalid subsequence (a stray continuation byte, a
// truncated sequence, an overlong form, a surrogate, a value past U+10FFFF) becomes U+FFFD, as
// Python's bytes.decode("utf-8", "replace") does. Returns `s` itself when it is already valid.
std::string ToValidUtf8(std::string_view s);

// The GPT-2 byte-to-unicode alphabet (formats.md 8.3): printable bytes stand for themselves, the
// other 68 take U+0100.., so that no byte-level vocabulary string holds whitespace or controls.
uint32_t ByteLevelCodePoint(uint8_t byte);
// The inverse, or -1 for code points outside the alphabet.
int ByteOfByteLevelCodePoint(uint32_t c);
// Appends the byte-level spelling of `bytes`.
void AppendByteLevel(std::string_view bytes, std::string& out);

}  // namespace lowbit
