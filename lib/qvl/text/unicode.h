// UTF-8 and Unicode helpers for the tokenizer. Invalid UTF-8 is handled the
// way the reference's decoders do it (Rust's from_utf8_lossy): every maximal
// ill-formed subsequence becomes one U+FFFD.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace qvl::unicode {

enum class Utf8Status { kOk, kInvalid, kIncomplete };

struct Utf8Step {
  Utf8Status status;
  int length;          // kOk: bytes of the character; kInvalid: bytes to replace by one U+FFFD;
                       // kIncomplete: bytes left, all a valid start of a character
  char32_t codepoint;  // valid when kOk
};

// Looks at the character starting at p (p < end).
Utf8Step next_utf8(const char* p, const char* end);

// Byte offset of the first invalid or truncated sequence, or npos.
size_t find_invalid_utf8(std::string_view bytes);
inline bool is_valid_utf8(std::string_view bytes) { return find_invalid_utf8(bytes) == std::string_view::npos; }

void append_utf8(char32_t codepoint, std::string& out);

// Appends `bytes` to `out` as valid UTF-8 (ill-formed parts as U+FFFD) but
// stops before a trailing incomplete character, which may be completed by
// bytes still to come. Returns how many bytes were consumed.
size_t append_complete_utf8(std::string_view bytes, std::string& out);

// All of `bytes` as valid UTF-8; a trailing incomplete character becomes U+FFFD.
std::string lossy_utf8(std::string_view bytes);

// Canonical composition (NFC) of valid UTF-8 text; throws qvl::Error otherwise.
std::string nfc(std::string_view text);
// A cheap test that passes most text: true means nfc(text) == text.
bool surely_nfc(std::string_view text);

// White_Space property, which is what `\s` means in the reference's regex engine.
bool is_white_space(char32_t c);
bool is_letter(char32_t c);  // \p{L}
bool is_number(char32_t c);  // \p{N}

}  // namespace qvl::unicode
