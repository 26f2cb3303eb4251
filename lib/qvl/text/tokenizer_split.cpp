#include "qvl/text/tokenizer_split.h"

#include <cstdint>

#include "qvl/text/unicode.h"

namespace qvl {

const char* const kQwenSplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// The character classes the pattern distinguishes. kNewline (\r, \n) is also
// whitespace; kOther is everything that is neither whitespace, letter nor number.
enum CharClass : uint8_t { kLetter, kNumber, kNewline, kSpace, kOther };

struct Char {
  char32_t codepoint;
  size_t offset;  // byte offset in the text
  CharClass cls;
};

CharClass classify(char32_t c) {
  if (c == '\r' || c == '\n') return kNewline;
  if (unicode::is_white_space(c)) return kSpace;
  if (unicode::is_letter(c)) return kLetter;
  if (unicode::is_number(c)) return kNumber;
  return kOther;
}

// Simple case folding as far as the contractions need it; U+017F (long s)
// folds to 's' in the reference's case-insensitive matching.
char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
  if (c == 0x17F) return 's';
  return c;
}

class Scanner {
 public:
  explicit Scanner(const std::vector<Char>& chars) : c_(chars), n_(chars.size()) {}

  // End (exclusive, in characters) of the match that starts at i. Every
  // character is matched by some alternative, so the result is always > i.
  size_t match(size_t i) const {
    if (size_t e = contraction(i)) return e;
    const CharClass cls = c_[i].cls;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (cls == kLetter) return run(i, kLetter);
    if ((cls == kSpace || cls == kOther) && is(i + 1, kLetter)) return run(i + 1, kLetter);
    // \p{N}
    if (cls == kNumber) return i + 1;
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    size_t first = (c_[i].codepoint == ' ' && is(i + 1, kOther)) ? i + 1 : i;
    if (c_[first].cls == kOther) return run(run(first, kOther), kNewline);
    // Only whitespace is left.
    size_t end = i;
    size_t after_last_newline = 0;
    while (end < n_ && (c_[end].cls == kSpace || c_[end].cls == kNewline)) {
      if (c_[end].cls == kNewline) after_last_newline = end + 1;
      ++end;
    }
    // \s*[\r\n]+ : backtracks to the last newline of the run.
    if (after_last_newline) return after_last_newline;
    // \s+(?!\S) : all of it at the end of the text, else all but the last
    // character, which then starts the next word.
    if (end == n_) return end;
    if (end - i >= 2) return end - 1;
    // \s+
    return end;
  }

 private:
  bool is(size_t i, CharClass cls) const { return i < n_ && c_[i].cls == cls; }
  size_t run(size_t i, CharClass cls) const {
    while (i < n_ && c_[i].cls == cls) ++i;
    return i;
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  size_t contraction(size_t i) const {
    if (c_[i].codepoint != '\'' || i + 1 >= n_) return 0;
    const char32_t a = fold(c_[i + 1].codepoint);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= n_) return 0;
    const char32_t b = fold(c_[i + 2].codepoint);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  const std::vector<Char>& c_;
  size_t n_;
};

}  // namespace

void split_words(std::string_view text, std::vector<std::string_view>& words) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  const char* begin = text.data();
  const char* end = begin + text.size();
  for (const char* p = begin; p < end;) {
    unicode::Utf8Step step = unicode::next_utf8(p, end);
    // Callers pass valid UTF-8; a stray byte still gets a class of its own.
    char32_t cp = step.status == unicode::Utf8Status::kOk ? step.codepoint : 0xFFFD;
    chars.push_back({cp, static_cast<size_t>(p - begin), classify(cp)});
    p += step.length;
  }
  Scanner scanner(chars);
  for (size_t i = 0; i < chars.size();) {
    size_t e = scanner.match(i);
    size_t from = chars[i].offset;
    size_t to = e < chars.size() ? chars[e].offset : text.size();
    words.push_back(text.substr(from, to - from));
    i = e;
  }
}

}  // namespace qvl
