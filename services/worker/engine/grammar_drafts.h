// Structured outputs meet speculation: drafts walked through the request's
// grammar before verification, and the bytes the grammar forces drafted for
// free.
//
// - ConstrainDraft cuts a chain draft at its first token the grammar
//   forbids and drops every tree node whose root path it forbids (parents
//   re-indexed; a kept node's parent is kept, so the result is a tree in
//   the same preorder). Verification samples each position under its own
//   mask, so cutting only saves rows that could never be accepted: the
//   output is what constrained decoding without drafts writes.
// - It then adds forced tokens: where the grammar allows exactly one next
//   byte for a while (keys, punctuation, the rest of the one enum value
//   left), those bytes, tokenized by greedy longest match over the
//   vocabulary, are drafted. An empty draft becomes the forced tokens; a
//   chain that covers fewer bytes than are forced is extended by the
//   tokens of the rest (every accepted chain of tokens spells a prefix of
//   the forced bytes, since only one byte was ever possible); trees and
//   chains that reach past the forced bytes are left as they are.
//
// The matcher is left in the state it was found in (accepts are rolled
// back). Not thread-safe: the engine thread, with the sequence's matcher.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/grammar/vocab.h"
#include "services/worker/engine/sequence.h"

namespace floe {

// Bytes of forced output looked at per step: more than any draft uses.
inline constexpr size_t kMaxForcedDraftBytes = 64;

struct GrammarDraftResult {
  int32_t cut = 0;     // draft tokens dropped as forbidden
  int32_t forced = 0;  // forced tokens added
};

// Constrains seq.draft (and draft_parents) to seq.matcher's grammar and adds
// forced tokens up to `max_draft` tokens in all; sets seq.draft_proposed to
// the proposer's tokens kept (draft_source is left as it is, -1 for a draft
// that is only forced tokens). Needs seq.matcher with a vocabulary.
GrammarDraftResult ConstrainDraft(Sequence& seq, int32_t max_draft);

// The tokens of `bytes` by greedy longest match over the vocabulary's
// allowed tokens (lowest id among tokens with equal bytes), at most
// `max_tokens`; stops early where no token starts with the next byte.
std::vector<int32_t> GreedyTokens(const grammar::TokenVocab& vocab, std::string_view bytes, size_t max_tokens);

}  // namespace floe
