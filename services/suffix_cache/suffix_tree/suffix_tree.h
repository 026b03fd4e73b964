// SuffixTree: a depth-limited, path-compressed suffix tree over many int32
// token sequences, with occurrence counts, for Suffix Decoding drafts.
//
// Every suffix of every sequence is indexed up to `max_depth` tokens; a node's
// count is the number of (sequence, start) occurrences of the string on its
// root path. Speculate() matches tails of a context and follows frequent
// continuations: a path draft (most frequent child) or a tree draft
// (best-first over path probability). The score of a draft is its expected
// number of accepted tokens, the sum of the per-token path probabilities.
//
// Compatibility: the growth rules, the counts, the matching loop and the order
// of equal-count children (which decides ties between drafts) follow Arctic
// Inference's suffix tree, so the drafts are the same token for token;
// DraftParams::extend_past_depth is the one departure and is off by default.
//
// Layout: nodes live in one array (growing by 1/4) and refer to each other by int32 index;
// children are found through one flat edge table and ordered by a sibling
// list (descending count, equal counts in "runs"), so a count change re-sorts
// in O(1). Edge labels are (sequence, offset, length) references into the
// stored sequences. A removed sequence's tokens stay stored while some node
// still refers to them (nodes are re-pointed whenever a newer sequence passes
// through them, so under FIFO eviction this is rare).
//
// Thread-safety: none; one owner thread (the speculator or a test).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "services/suffix_cache/suffix_tree/growable_array.h"
#include "services/suffix_cache/suffix_tree/edge_table.h"

namespace floe::suffix_cache {

struct DraftParams {
  int max_spec_tokens = 16;
  float max_spec_factor = 1.0f;
  float max_spec_offset = 0.0f;
  float min_token_prob = 0.1f;
  bool use_tree_spec = false;
  // Not reference-compatible: a path draft that reaches the end of the tree
  // (a node with no children, typically at max_depth) keeps copying the
  // sequence that node refers to, at the same probability. Lifts the
  // "match + draft <= max_depth" ceiling.
  bool extend_past_depth = false;
  // Not reference-compatible: when the match is the live sequence's own
  // tail (Speculate's hint), that occurrence has no continuation yet, so it
  // is left out of the first branching probability instead of diluting it.
  bool discount_own_suffix = false;
  // Not reference-compatible: past the match-length budget, keep drafting
  // (up to max_spec_tokens) while the path probability is at least this;
  // 0 turns it off. Only from matches of at least confident_min_match
  // tokens (-1: max_spec_tokens / 3, which held acceptance >= 0.9 on the
  // dev trace at budgets 16 and 32).
  float confident_prob = 0.0f;
  int confident_min_match = -1;
  // Not reference-compatible: past the match-length budget, keep drafting
  // (up to max_spec_tokens) while every continuation seen so far agrees
  // (path probability >= 0.99) and at least this many occurrences back the
  // next token ("two sequences agree" rather than one copy followed blindly);
  // 0 turns it off. Independent of confident_prob and of the match length.
  // Extension tokens do not raise the bound that lets Speculate skip shorter
  // matches.
  int confident_min_support = 0;
  // Not reference-compatible: a drafted token adds prob^score_exponent to
  // the score that picks the match length (and the tree: local or global),
  // instead of prob. Above 1, uncertain tokens count for less than their
  // path probability: a continuation seen once out of two is accepted far
  // less often than half the time (0.11 on dev-chat), and a draft with
  // fewer, surer tokens wins.
  float score_exponent = 1.0f;
  // Not reference-compatible, read by SuffixSpeculator through the
  // request's DraftFeedback (the tree ignores it; see draft_feedback.h):
  // the confident extension only for requests whose recent acceptance rate
  // is at least this (0: any).
  float confident_min_acceptance = 0.0f;
};

// Floe's default (not reference-compatible) drafting on top of a preset's
// parameters: drafts continue past the tree's depth and, for requests that
// copy, past the match-length budget; scores favour sure tokens and a higher
// min_token_prob cuts unlikely ones. It beats the reference's drafts on the
// dev traces at every budget tried, 4 to 32, at no lower acceptance
// (docs/suffix-cache.md, "Drafting modes"): the replay's and the worker's
// default.
void ApplyDefaultMode(DraftParams* draft);

// Tokens a match of `match_len` may draft before any extension:
// min(max_spec_tokens, match_len * max_spec_factor + max_spec_offset), >= 0.
// (Callers keep the factor and offset finite and modest; the service checks.)
// (Inline: Speculate asks for every match length.)
inline int DraftBudget(const DraftParams& params, int32_t match_len) {
  const int b = std::min(params.max_spec_tokens,
                         static_cast<int>(match_len * params.max_spec_factor + params.max_spec_offset + 1e-6));
  return std::max(b, 0);
}

struct Draft {
  std::vector<int32_t> token_ids;
  // parents[i]: index in token_ids of token i's parent, -1 for the root
  // (a path draft is the chain -1, 0, 1, ...).
  std::vector<int32_t> parents;
  std::vector<float> probs;
  // Sum of probs: expected accepted tokens (with
  // DraftParams::score_exponent != 1, of probs^score_exponent).
  float score = 0.0f;
  int32_t match_len = 0;
  // Path drafts: the sequence whose storage the draft's last node refers to
  // (the newest live sequence through it, where it can tell), the
  // response the draft was read from, for usage-aware eviction. -1: tree
  // drafts, empty drafts, or storage of a removed sequence.
  int32_t source_seq = -1;
};

class SuffixTree {
 public:
  explicit SuffixTree(int max_depth = 64);

  int max_depth() const { return max_depth_; }
  // Live sequences and their total length (= the root count).
  int num_seqs() const { return static_cast<int>(slot_of_.size()); }
  int64_t num_tokens() const;
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size() - free_nodes_.size()); }
  bool Contains(int32_t seq_id) const { return slot_of_.contains(seq_id); }

  // Appends to sequence `seq_id` (created on first use). O(depth) per token;
  // its last max_depth suffixes stay "active" until Finish or Remove.
  void Append(int32_t seq_id, int32_t token);
  void Extend(int32_t seq_id, absl::Span<const int32_t> tokens);
  // No more appends will come for `seq_id`: drops its match state (the
  // tokens stay indexed). Appending later is an error (CHECK).
  void Finish(int32_t seq_id);
  // Removes every suffix of `seq_id`; counts become as if it had never been
  // added. NotFound if the sequence does not exist.
  absl::Status Remove(int32_t seq_id);

  // Best draft over match lengths 1 .. context.size()-1 of the context tail
  // (a miss ends the search; equal scores go to the longer match). When
  // `hint_seq` names a live sequence whose tail equals the context tail, its
  // active suffixes serve as matches instead of walks from the root.
  // `must_beat` >= 0: only a draft scoring more is of use (the caller holds
  // one scoring that much, and wins ties): matches that cannot beat it are
  // not drafted, and an empty draft comes back when none does.
  Draft Speculate(absl::Span<const int32_t> context, const DraftParams& params,
                  int32_t hint_seq = -1, float must_beat = -1.0f) const;

  // The path draft from exactly the match of the context's last
  // `match_len` tokens, walked from the root with nothing pruned (empty when
  // that tail does not occur). `own_suffix`: the match is the live
  // sequence's own tail (see DraftParams::discount_own_suffix). The single
  // step of the search Speculate shortens: tests rebuild the search on it.
  Draft DraftForMatch(absl::Span<const int32_t> context, int32_t match_len, const DraftParams& params,
                      bool own_suffix = false) const;

  // Occurrences of `pattern` (0 if absent; patterns longer than max_depth
  // are not indexed and give 0).
  int64_t CountOccurrences(absl::Span<const int32_t> pattern) const;

  // Every root path string (each prefix of each edge) with its count, for
  // oracle tests. Keys are token strings.
  std::vector<std::pair<std::vector<int32_t>, int64_t>> AllPaths() const;

  // Full structural check (links, order, runs, edge table, references,
  // active suffixes) plus a recount of all suffixes. Slow: for tests.
  absl::Status CheckIntegrity() const;

  // Bytes held (capacity based): nodes, edges, runs, token storage.
  size_t MemoryUsage() const;

  // A byte image of the whole tree (suffix_tree_image.cc), so that a restart
  // restores it at copy speed instead of re-appending every token. Tied to
  // this build's layout: LoadImage refuses an image of another layout.
  void AppendImage(std::string* out) const;
  // Replaces the contents with an image. InvalidArgument, with the reason,
  // for an image of another layout or depth, or one that is inconsistent
  // (truncated, an index out of range, a cycle, miscounted references); the
  // tree is then empty. Checks are O(size): any bytes are safe to load.
  absl::Status LoadImage(absl::string_view image);
  // A live sequence's tokens (empty when absent) and whether it is finished.
  absl::Span<const int32_t> Tokens(int32_t seq_id) const;
  bool IsFinished(int32_t seq_id) const;
  // Live sequence ids, in no particular order.
  std::vector<int32_t> SeqIds() const;

 private:
  struct Node {
    int32_t count = 0;
    int32_t token = 0;  // first label token (its key in the parent)
    int32_t parent = -1;
    int32_t ref_seq = -1;  // storage slot of the label's occurrence
    int32_t ref_idx = 0;   // label = tokens[ref_idx, ref_idx + length)
    // Label length. For an open leaf (see Length) the length the label
    // reaches once its sequence has grown past it: max_depth minus the
    // parent's depth.
    uint16_t length = 0;
    // Children are found by scanning the sibling list while there are at
    // most kMaxScanned of them (num_children counts them); beyond that the
    // node is "hashed": all its child edges are in edges_ for good.
    uint8_t num_children = 0;
    uint8_t hashed : 1 = 0;
    // An open leaf: a count-1 leaf whose label runs in its own sequence's
    // storage to that sequence's end (capped by `length`), so it grows with
    // the sequence at no cost per token (Ukkonen's open leaves).
    uint8_t open : 1 = 0;
    // Inside one Extend: a unary end node, or its only child, whose slides
    // (see Extend) are deferred; never set outside Extend.
    uint8_t pending : 1 = 0;
    int32_t head_child = -1;
    int32_t prev = -1;  // previous sibling; the head's prev is the tail
    int32_t next = -1;  // next sibling; -1 at the tail
    int32_t run = -1;   // run of >= 2 equal-count siblings, -1 if alone
  };
  struct Run {  // >= 2 siblings; one left (head == tail) dissolves it
    int32_t head = -1;
    int32_t tail = -1;
  };
  struct Seq {
    int32_t seq_id = -1;
    std::vector<int32_t> tokens;
    int32_t refs = 0;        // nodes referring to this storage
    bool removed = false;    // storage kept only for refs
    bool finished = false;
    // Ring of active nodes: the nodes where its last suffixes end, oldest
    // (longest) first.
    std::vector<int32_t> active;
    int32_t active_begin = 0;
    int32_t active_size = 0;
    // The first leaf_count active nodes (the longest suffixes) are open
    // leaves; Append skips them. Leaves always come first: a suffix occurs
    // at least as often as any longer one.
    int32_t leaf_count = 0;
  };
  struct Locus {
    int32_t node;
    int32_t idx;
  };

  static constexpr int32_t kRoot = 0;
  static constexpr int kMaxScanned = 8;

  int32_t SlotFor(int32_t seq_id);
  // Append; `prefetch` asks for the active nodes up front (worth it when
  // the tree may be cold: the first token of an Extend).
  // `defer`: slides may be left pending (Extend materialises them at its end).
  void AppendToken(int32_t seq_id, int32_t token, bool prefetch, bool defer);
  // Applies the pending slides of the suffix at ring position `pos` of
  // `slot`'s active ring / of every pending suffix whose end node or child
  // is `node` / of all.
  void MaterializeSlides(int32_t slot, int32_t pos);
  void MaterializeOwnersOf(int32_t slot, int32_t node);
  void MaterializeAllSlides(int32_t slot);
  int32_t NewNode(int32_t count, int32_t parent, int32_t slot, int32_t idx, int32_t length);
  void FreeNode(int32_t n);
  void SetRef(int32_t n, int32_t slot, int32_t idx);
  void DropSlotRef(int32_t slot);
  // Label length, derived for an open leaf from its sequence's length.
  int32_t Length(int32_t n) const {
    const Node& x = nodes_[n];
    if (!x.open) return x.length;
    return std::min<int32_t>(
        x.length, static_cast<int32_t>(seqs_[x.ref_seq].tokens.size()) - x.ref_idx);
  }
  // Fixes an open leaf's length (it is about to gain a second occurrence);
  // its sequence's leaf_count drops below it when it is still active.
  void CloseLeaf(int32_t n);
  int32_t Token(int32_t n, int32_t offset = 0) const {
    const Node& x = nodes_[n];
    return seqs_[x.ref_seq].tokens[x.ref_idx + offset];
  }
  // Child of n starting with `token`, or -1.
  int32_t FindChild(int32_t n, int32_t token) const {
    if (nodes_[n].hashed) return edges_.Find(n, token);
    for (int32_t c = nodes_[n].head_child; c >= 0; c = nodes_[c].next) {
      if (nodes_[c].token == token) return c;
    }
    return -1;
  }
  // Edge-index upkeep (a no-op for nodes that are scanned, not hashed).
  void OnChildAdded(int32_t n, int32_t c);
  void OnChildRemoved(int32_t n, int32_t token) {
    if (nodes_[n].hashed) {
      edges_.Erase(n, token);
    } else {
      --nodes_[n].num_children;
    }
  }
  void OnChildRekeyed(int32_t n, int32_t old_token, int32_t c) {
    if (nodes_[n].hashed) {
      edges_.Erase(n, old_token);
      edges_.Set(n, nodes_[c].token, c);
    }
  }
  void OnChildReplaced(int32_t n, int32_t c) {
    if (nodes_[n].hashed) edges_.Set(n, nodes_[c].token, c);
  }

  // Sibling list and runs (see the .cc for the ordering rules).
  int32_t PrevSibling(int32_t x) const;
  int32_t RunHead(int32_t x) const;
  int32_t RunTail(int32_t x) const;
  void Unlink(int32_t x);
  void InsertBefore(int32_t x, int32_t b);
  void InsertAfter(int32_t x, int32_t a);
  void InsertAtHead(int32_t x);
  void InsertAtTail(int32_t x);
  void JoinRuns(int32_t x);
  void ReplaceInSiblings(int32_t old_node, int32_t new_node);
  void Increment(int32_t x);
  void Decrement(int32_t x);
  int32_t NewRun(int32_t head, int32_t tail);

  bool MatchFromRoot(absl::Span<const int32_t> pattern, Locus* out) const;
  int32_t HintedMatches(absl::Span<const int32_t> context, int32_t hint_seq,
                        const Seq** seq) const;
  // What a path draft's walk found (PathDraft).
  struct Walk {
    float score = 0.0f;
    int32_t last_node = 0;
    // Every step followed from the counts alone: each branch taken had a
    // strictly most frequent child, and the walk never reached the tree's
    // end. A locus with the same occurrences then walks the same path.
    bool counts_decided = true;
    // Stopped by WalkBounds before its natural end.
    bool stopped = false;
  };
  // A walk stops once even every token left at the current probability
  // would score no more than `beat` or less than `reach` (negative: no
  // bound), returning a score within that bound: a draft that cannot win.
  struct WalkBounds {
    float beat = -1.0f;
    float reach = -1.0f;
  };
  template <typename Sink>
  Walk PathDraft(Locus at, bool own_suffix, absl::Span<const int32_t> matched, int budget,
                 bool confident_extra, const DraftParams& params, WalkBounds bounds,
                 std::vector<int32_t>* window, Sink&& sink) const;
  void TreeDraft(Locus at, int budget, const DraftParams& params, Draft* out) const;
  // The whole path draft of the match ending at `at` (its tokens `matched`,
  // the context's tail), with its source sequence.
  Draft PathDraftAt(Locus at, bool own_suffix, absl::Span<const int32_t> matched, const DraftParams& params,
                    std::vector<int32_t>* window) const;
  absl::Status CheckNode(int32_t n, int depth, std::vector<int32_t>* stack) const;
  absl::Status ValidateLoaded() const;

  int max_depth_;
  // Per ring position of the sequence being extended: the slides deferred
  // since the last materialisation (0: none, always outside Extend), the end
  // node's label reference once they are applied, and the rest of the
  // child's label (tokens left; where the next one is: `base` is the storage
  // of another sequence, stable during the Extend, or null for the extended
  // sequence's own, which may move as it grows), so that a slide reads no
  // node.
  struct PendingSlides {
    int32_t slides = 0;
    int32_t n_ref = 0;
    int32_t left = 0;
    int32_t next = 0;
    const int32_t* base = nullptr;
  };
  std::vector<PendingSlides> pending_;
  GrowableArray<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  GrowableArray<Run> runs_;
  std::vector<int32_t> free_runs_;
  EdgeTable edges_;
  std::vector<Seq> seqs_;  // storage slots
  std::vector<int32_t> free_slots_;
  absl::flat_hash_map<int32_t, int32_t> slot_of_;  // seq_id -> slot
};

}  // namespace floe::suffix_cache
