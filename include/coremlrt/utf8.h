#pragma once
// UTF-8 checks for text that comes from files. Every string the engine hands to a caller
// (names, metadata, error messages) must be valid UTF-8: Python decodes them as such, and a
// byte that does not decode would surface as UnicodeDecodeError instead of coremlrt.Error.
#include <string>
#include <string_view>

namespace coremlrt {

// Length of the valid UTF-8 sequence starting at text[i] (1-4), or 0 when it is not one
// (truncated, overlong, a surrogate or past U+10FFFF).
inline size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (length == 0 || lead > 0xF4 || lead == 0xC0 || lead == 0xC1 || i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  unsigned char second = byte(i + 1);
  if (lead == 0xE0 && second < 0xA0) return 0;   // overlong 3-byte form
  if (lead == 0xED && second > 0x9F) return 0;   // UTF-16 surrogates
  if (lead == 0xF0 && second < 0x90) return 0;   // overlong 4-byte form
  if (lead == 0xF4 && second > 0x8F) return 0;   // past U+10FFFF
  return length;
}

inline bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// The text with every byte that is not part of valid UTF-8 written as \xNN, so a message
// quoting a damaged name stays readable and decodable.
inline std::string escape_invalid_utf8(std::string_view text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      unsigned char bad = static_cast<unsigned char>(text[i]);
      out += "\\x";
      out += digits[bad >> 4];
      out += digits[bad & 0xF];
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

}  // namespace coremlrt
