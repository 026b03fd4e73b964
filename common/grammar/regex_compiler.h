// Regex front end: the ECMAScript (ECMA-262, `u` flag) subset that JSON
// Schema `pattern`s and vLLM's `guided_regex` use, compiled to grammar
// rules over UTF-8 bytes.
//
// Supported: literals (raw UTF-8 too); escapes \d \w \s \D \W \S, \n \r \t
// \f \v \0, \xHH, \uHHHH (surrogate pairs combine), \u{H..}, \cX, and any
// escaped ASCII punctuation (\. \- \/ ...); classes [a-z] [^...] with those
// escapes (\b is backspace there); `.` (any character but the line
// terminators \n \r U+2028 U+2029, as in ECMAScript); groups ( ), (?: ),
// (?<name> ); alternation |; quantifiers * + ? {m} {m,} {m,n}, each with
// an optional lazy `?` (same language); ^ at the start and $ at the end of
// the pattern or of one of its top-level alternatives. A ']' or '}' with
// nothing to close is a literal (Annex B); '{' must start a quantifier.
//
// Refused with InvalidArgument "regex: <construct> is not supported" (and
// the byte offset): lookahead and lookbehind, backreferences (\1, \k<n>),
// word boundaries (\b \B), \p{..} property escapes, inline flags, ^ or $
// anywhere else, lone surrogates. Other errors name the offset and what
// was expected, or the limit. Messages never quote more than a few bytes
// of the pattern.
//
// Thread-safe (no shared state); AddRegex writes only to its grammar.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/front_end.h"
#include "common/grammar/grammar.h"

namespace floe::grammar {

struct RegexOptions {
  SourceLimits limits{.max_text_bytes = 1 << 14};
  // ASCII bytes no match may contain: removed from every character the
  // pattern can match (`.`, classes, negated classes, literals), so a
  // pattern compiled for the inside of a JSON string (`"`, `\`, control
  // bytes) never needs escaping. Bytes >= 0x80 are ignored. A pattern every
  // match of which needs an excluded character is an InvalidArgument.
  ByteSet excluded;
  // kFull: the whole string must match (std::regex_match, vLLM's
  // guided_regex). kSearch: JSON Schema `pattern` semantics, a match
  // anywhere in the string (RegExp.test): a top-level alternative without
  // ^ may have any text before it, one without $ any text after it.
  enum class Match { kFull, kSearch };
  Match match = Match::kFull;
};

// Adds rules to `g` matching exactly the strings (as UTF-8) the pattern
// matches, the top one named after `name` (made unique by Grammar::AddRule),
// and returns a reference to it. Rules already in `g` are not touched, and
// `g` need not be complete. A pattern that does not parse leaves `g`
// untouched; one refused while lowering (a limit) may leave rules without
// alternatives in it, so discard `g` then.
absl::StatusOr<Element> AddRegex(Grammar* g, std::string_view pattern, std::string_view name,
                                 const RegexOptions& options = {});

// A grammar whose root matches what the pattern matches; passes
// CheckIntegrity.
absl::StatusOr<Grammar> CompileRegex(std::string_view pattern, const RegexOptions& options = {});

}  // namespace floe::grammar
