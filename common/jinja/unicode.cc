#include "common/jinja/unicode.h"

#include <unicode/uchar.h>
#include <unicode/ucasemap.h>
#include <unicode/ustring.h>

#include <memory>

namespace floe::jinja {
namespace {

// Decodes one code point at s[pos]; returns its byte length. An invalid or
// truncated sequence decodes its first byte alone to U+DC80+byte.
size_t DecodeAt(std::string_view s, size_t pos, char32_t* cp) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n = 0;
  char32_t value = 0, min = 0;
  if ((c & 0xE0) == 0xC0) n = 2, value = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, value = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, value = c & 0x07, min = 0x10000;
  bool ok = n != 0 && pos + n <= s.size();
  for (size_t k = 1; ok && k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[pos + k]);
    ok = (d & 0xC0) == 0x80;
    value = (value << 6) | (d & 0x3F);
  }
  ok = ok && value >= min && value <= 0x10FFFF && !(value >= 0xD800 && value <= 0xDFFF);
  if (!ok) {
    *cp = 0xDC00 + c;
    return 1;
  }
  *cp = value;
  return n;
}

// One UCaseMap for the root locale; upper/lower/fold take it const, so it is
// shared by all threads.
const UCaseMap* RootCaseMap() {
  static UCaseMap* map = [] {
    UErrorCode error = U_ZERO_ERROR;
    return ucasemap_open("", 0, &error);
  }();
  return map;
}

template <typename Fn>
std::string MapUtf8(std::string_view s, Fn fn) {
  if (s.empty()) return "";
  std::string out(s.size() * 3 + 16, '\0');
  UErrorCode error = U_ZERO_ERROR;
  int32_t n = fn(out.data(), static_cast<int32_t>(out.size()), s.data(), static_cast<int32_t>(s.size()), &error);
  if (error == U_BUFFER_OVERFLOW_ERROR) {
    out.assign(static_cast<size_t>(n), '\0');
    error = U_ZERO_ERROR;
    n = fn(out.data(), static_cast<int32_t>(out.size()), s.data(), static_cast<int32_t>(s.size()), &error);
  }
  if (U_FAILURE(error)) return std::string(s);
  out.resize(static_cast<size_t>(n));
  return out;
}

// Full title-case mapping of one code point ("ǆ" -> "ǅ", "ß" -> "Ss"): ICU
// titlecases the whole (one-character) string with no word breaking. The
// map is per thread because ucasemap_utf8ToTitle caches an iterator in it.
std::string TitleChar(std::string_view cp) {
  thread_local std::unique_ptr<UCaseMap, void (*)(UCaseMap*)> map(
      [] {
        UErrorCode error = U_ZERO_ERROR;
        return ucasemap_open("", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_LOWERCASE |
                                     U_TITLECASE_NO_BREAK_ADJUSTMENT, &error);
      }(),
      ucasemap_close);
  return MapUtf8(cp, [](char* dest, int32_t cap, const char* src, int32_t len, UErrorCode* error) {
    return ucasemap_utf8ToTitle(map.get(), dest, cap, src, len, error);
  });
}

}  // namespace

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    pos += DecodeAt(s, pos, &cp);
    out.push_back(cp);
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {
    *out += static_cast<char>(cp - 0xDC00);  // a byte Decode could not place
  } else if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string Encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) AppendUtf8(cp, &out);
  return out;
}

size_t CodePointLength(std::string_view s, size_t pos) {
  char32_t cp;
  return DecodeAt(s, pos, &cp);
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) pos += CodePointLength(s, pos);
  return n;
}

bool IsPySpace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsPyPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool IsPyAlpha(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

static int NumericType(char32_t c) { return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE); }
bool IsPyDecimal(char32_t c) { return NumericType(c) == U_NT_DECIMAL; }
bool IsPyDigit(char32_t c) { return NumericType(c) == U_NT_DECIMAL || NumericType(c) == U_NT_DIGIT; }
bool IsPyNumeric(char32_t c) { return NumericType(c) != U_NT_NONE; }
bool IsPyCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }
bool IsPyLower(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE); }
bool IsPyUpper(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE); }
bool IsPyTitle(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_TITLECASE_LETTER; }

size_t PySpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  char32_t cp;
  const size_t n = DecodeAt(s, pos, &cp);
  return IsPySpace(cp) ? n : 0;
}

std::string_view PyStripSpace(std::string_view s, bool left, bool right) {
  size_t begin = 0;
  if (left)
    while (begin < s.size()) {
      const size_t n = PySpaceAt(s, begin);
      if (n == 0) break;
      begin += n;
    }
  size_t end = s.size();
  if (right) {
    end = begin;  // the end of the last code point that is not whitespace
    for (size_t pos = begin; pos < s.size();) {
      const size_t space = PySpaceAt(s, pos);
      pos += space ? space : CodePointLength(s, pos);
      if (!space) end = pos;
    }
  }
  return s.substr(begin, end - begin);
}

std::string PyUpper(std::string_view s) {
  return MapUtf8(s, [](char* dest, int32_t cap, const char* src, int32_t len, UErrorCode* error) {
    return ucasemap_utf8ToUpper(RootCaseMap(), dest, cap, src, len, error);
  });
}

std::string PyLower(std::string_view s) {
  return MapUtf8(s, [](char* dest, int32_t cap, const char* src, int32_t len, UErrorCode* error) {
    return ucasemap_utf8ToLower(RootCaseMap(), dest, cap, src, len, error);
  });
}

std::string PyCasefold(std::string_view s) {
  return MapUtf8(s, [](char* dest, int32_t cap, const char* src, int32_t len, UErrorCode* error) {
    return ucasemap_utf8FoldCase(RootCaseMap(), dest, cap, src, len, error);
  });
}

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return "";
  const size_t first = CodePointLength(s, 0);
  return TitleChar(s.substr(0, first)) + PyLower(s.substr(first));
}

std::string PyTitle(std::string_view s) {
  // Python: a character after a cased one is lowercased, any other is
  // titlecased. Runs to lowercase are mapped whole so that a final sigma
  // keeps its context.
  std::string out;
  size_t run_start = std::string_view::npos;
  bool previous_cased = false;
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    const size_t n = DecodeAt(s, pos, &cp);
    if (previous_cased) {
      if (run_start == std::string_view::npos) run_start = pos;
    } else {
      if (run_start != std::string_view::npos) out += PyLower(s.substr(run_start, pos - run_start));
      run_start = std::string_view::npos;
      out += TitleChar(s.substr(pos, n));
    }
    previous_cased = IsPyCased(cp);
    pos += n;
  }
  if (run_start != std::string_view::npos) out += PyLower(s.substr(run_start));
  return out;
}

bool PyIsLower(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsPyUpper(c) || IsPyTitle(c)) return false;
    cased |= IsPyLower(c);
  }
  return cased;
}

bool PyIsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsPyLower(c) || IsPyTitle(c)) return false;
    cased |= IsPyUpper(c);
  }
  return cased;
}

}  // namespace floe::jinja
