// UTF-8 text as Python's str sees it: code points, and the character classes
// and case mappings of str's methods (isspace, isprintable, upper, title...),
// so that a template's string handling matches CPython's byte for byte.
// Character data comes from ICU; it agrees with Python's tables except for
// characters assigned after the Unicode version of the reference Python.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace floe::jinja {

// Code points of `s`. A byte that is not part of valid UTF-8 decodes alone to
// U+DC80..U+DCFF (Python's surrogateescape), which Encode turns back into it,
// so nothing is lost or invented.
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view code_points);
void AppendUtf8(char32_t cp, std::string* out);
size_t CodePointCount(std::string_view s);
// Byte length of the code point starting at s[pos] (1 for a stray byte).
size_t CodePointLength(std::string_view s, size_t pos);

// Python's str predicates, per code point.
bool IsPySpace(char32_t c);      // str.isspace; also what \s matches in re
bool IsPyPrintable(char32_t c);  // repr() escapes the others
bool IsPyAlpha(char32_t c);
bool IsPyDecimal(char32_t c);
bool IsPyDigit(char32_t c);
bool IsPyNumeric(char32_t c);
bool IsPyCased(char32_t c);
bool IsPyLower(char32_t c);      // the Lowercase property
bool IsPyUpper(char32_t c);      // the Uppercase property
bool IsPyTitle(char32_t c);      // category Lt

// Byte length of the Python whitespace code point at s[pos], 0 if none.
size_t PySpaceAt(std::string_view s, size_t pos);
// Python's str.strip()/lstrip()/rstrip() without arguments.
std::string_view PyStripSpace(std::string_view s, bool left, bool right);

// Python's str.upper(), lower(), casefold(), capitalize() and title()
// (full case mappings: "ß".upper() == "SS").
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCasefold(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);
// str.islower() / str.isupper(): some cased character, none of the other case.
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);

}  // namespace floe::jinja
