// GBNF front end: llama.cpp's grammar syntax (grammars/README.md there)
// to the grammar IR.
//
//   root  ::= item+              # a comment
//   item  ::= "- " [^\n]+ "\n" | ( [a-z] | "\u00e9" ){2,5}
//
// Rules are `name ::= alternatives`, names of [a-zA-Z0-9_-]; the start
// rule is `root`. Terminals are string literals and character classes
// ([a-z], [^...]) with the escapes \n \r \t \\ \" \[ \] \- \^ \xNN \uNNNN
// \UNNNNNNNN, raw UTF-8, and `.` (any character). Groups ( ), alternation
// |, and the quantifiers * + ? {m} {m,} {m,n}. Newlines end a rule except
// inside parentheses, after `::=`, and after or before `|`. Characters
// are Unicode code points, lowered to their UTF-8 bytes; classes cover
// scalar values only (surrogates never match).
//
// Every error is InvalidArgument "grammar: line L:C: what was expected",
// or names the limit (GbnfLimits) or the rules of a left recursion.
//
// Thread-safe (no shared state).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/front_end.h"
#include "common/grammar/grammar.h"

namespace floe::grammar {

using GbnfLimits = SourceLimits;

// The grammar the text defines, root = `root`; it passes CheckIntegrity.
absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

// The byte-level dialect Grammar::ToGbnf() writes: \xNN, raw bytes and
// class bounds are single bytes (not code points; \u and \U above 0xFF are
// errors), `.` is any byte. For reading back dumps and round-trip tests.
absl::StatusOr<Grammar> ParseGbnfBytes(std::string_view text, const GbnfLimits& limits = {});

}  // namespace floe::grammar
