#include "qvl/text/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "qvl/error.h"

namespace qvl::unicode {

namespace {
bool in(unsigned char b, unsigned char lo, unsigned char hi) { return b >= lo && b <= hi; }
}  // namespace

Utf8Step next_utf8(const char* p, const char* end) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  const size_t avail = static_cast<size_t>(end - p);
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return {Utf8Status::kOk, 1, b0};

  // The allowed range of the second byte depends on the lead byte: this is
  // what rules out overlong forms, surrogates and values above U+10FFFF.
  int length;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (in(b0, 0xC2, 0xDF)) {
    length = 2, cp = b0 & 0x1F;
  } else if (in(b0, 0xE0, 0xEF)) {
    length = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (in(b0, 0xF0, 0xF4)) {
    length = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::kInvalid, 1, 0};
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= avail) return {Utf8Status::kIncomplete, i, 0};
    const unsigned char b = s[i];
    const bool ok = i == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF);
    if (!ok) return {Utf8Status::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kOk, length, cp};
}

size_t find_invalid_utf8(std::string_view bytes) {
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  while (p < end) {
    if (static_cast<unsigned char>(*p) < 0x80) {
      ++p;
      continue;
    }
    Utf8Step step = next_utf8(p, end);
    if (step.status != Utf8Status::kOk) return static_cast<size_t>(p - bytes.data());
    p += step.length;
  }
  return std::string_view::npos;
}

void append_utf8(char32_t c, std::string& out) {
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

size_t append_complete_utf8(std::string_view bytes, std::string& out) {
  const char* begin = bytes.data();
  const char* p = begin;
  const char* end = p + bytes.size();
  while (p < end) {
    Utf8Step step = next_utf8(p, end);
    if (step.status == Utf8Status::kIncomplete) break;
    if (step.status == Utf8Status::kOk)
      out.append(p, static_cast<size_t>(step.length));
    else
      append_utf8(0xFFFD, out);
    p += step.length;
  }
  return static_cast<size_t>(p - begin);
}

std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t used = append_complete_utf8(bytes, out);
  if (used < bytes.size()) append_utf8(0xFFFD, out);
  return out;
}

bool surely_nfc(std::string_view text) {
  // Every character below U+0300 is already composed and cannot combine with
  // its neighbour, and U+0300 is the first to need a lead byte of 0xCC.
  for (unsigned char b : text)
    if (b >= 0xCC) return false;
  return true;
}

std::string nfc(std::string_view text) {
  if (surely_nfc(text)) return std::string(text);

  utf8proc_uint8_t* composed = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &composed, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw Error(std::string("cannot normalize text to NFC: ") + utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(composed, &std::free);
  return std::string(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace qvl::unicode
