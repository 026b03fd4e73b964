// String helpers shared by the grammar front-end tests: UTF-8 <-> code
// points and random edits, so tests can build near-misses of a language's
// members that stay well-formed UTF-8.
//
// Header-only test helper; thread-compatible.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "common/grammar/utf8_ranges.h"

namespace floe::grammar::testing {

// Code points of well-formed UTF-8, or nullopt.
inline std::optional<std::u32string> CodePoints(std::string_view utf8) {
  std::u32string out;
  while (!utf8.empty()) {
    const Utf8Decoded d = DecodeUtf8(utf8);
    if (d.length == 0) return std::nullopt;
    out.push_back(d.code_point);
    utf8.remove_prefix(static_cast<size_t>(d.length));
  }
  return out;
}

inline std::string Utf8(const std::u32string& cps) {
  std::string out;
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

// 1..3 random insertions, deletions, replacements or swaps, inserting and
// replacing with characters of `alphabet` (not empty).
inline std::u32string Mutate(std::u32string s, const std::u32string& alphabet, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    const char32_t c = alphabet[rng() % alphabet.size()];
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
      case 1: if (at < s.size()) s.erase(at, 1); break;
      case 2: if (at < s.size()) s[at] = c; break;
      default: if (at + 1 < s.size()) std::swap(s[at], s[at + 1]);
    }
  }
  return s;
}

// A random string of up to `max_length` characters of `alphabet`.
inline std::u32string RandomString(const std::u32string& alphabet, size_t max_length, std::mt19937& rng) {
  std::u32string s(rng() % (max_length + 1), U' ');
  for (char32_t& c : s) c = alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace floe::grammar::testing
