// Private copies of short shared rules, made while a Program is built.
//
// The token-mask precompute knows the frames below a stack top only as far
// as rules are entered from one place; a rule entered from many places
// ends in "it depends" for every token that runs past its end. For a rule
// whose sentences are a few bytes long (one JSON string character, a hex
// digit, a literal), that is nearly every token - bounded repetitions such
// as a string's maxLength call one character rule from each of their
// steps. Giving each reference after the first its own copy of such a rule
// (and of everything it calls) makes its return static again. The language
// is unchanged: a copy derives exactly what the original does.
//
// Pure function of its input; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "common/grammar/grammar.h"

namespace floe::grammar {

struct RuleTable {
  std::vector<std::vector<Sequence>> alternatives;  // by rule id
  std::vector<uint32_t> origin;                     // the input rule each rule copies (itself for input rules)
};

struct CloneLimits {
  int max_sentence_bytes = 8;     // only rules whose longest sentence is this short
  int max_unfolded_elements = 64;  // ... and whose call tree has this many elements at most
  size_t max_added_elements = 1 << 18;  // all copies of the grammar together
};

// Rewrites references in the input rules (ids below table->alternatives
// .size() on entry) to fresh copies, appending the copies to `table`.
void ClonePrivateCopies(RuleTable* table, const CloneLimits& limits = {});

}  // namespace floe::grammar
