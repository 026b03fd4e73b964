#include "services/suffix_cache/suffix_tree/suffix_tree.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <queue>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "services/suffix_cache/suffix_tree/invariant.h"

namespace floe::suffix_cache {

void ApplyDefaultMode(DraftParams* draft) {
  draft->extend_past_depth = true;
  draft->discount_own_suffix = true;
  draft->confident_prob = 0.99f;
  draft->confident_min_acceptance = 0.5f;
  draft->confident_min_support = 3;
  draft->score_exponent = 1.5f;
  draft->min_token_prob = 0.13f;
}

SuffixTree::SuffixTree(int max_depth)
    : max_depth_(max_depth), pending_(max_depth) {
  FLOE_SUFFIX_INVARIANT(max_depth > 0 && max_depth <= 65535, "max_depth in [1, 65535]");
  nodes_.emplace_back();  // root: no label, no parent, no reference
  nodes_[kRoot].hashed = 1;
}

int64_t SuffixTree::num_tokens() const { return nodes_[kRoot].count; }

int32_t SuffixTree::SlotFor(int32_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it != slot_of_.end()) return it->second;
  int32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    seqs_[slot] = Seq();
  } else {
    slot = static_cast<int32_t>(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[slot].active.assign(max_depth_, kRoot);
  seqs_[slot].seq_id = seq_id;
  slot_of_.emplace(seq_id, slot);
  return slot;
}

int32_t SuffixTree::NewNode(int32_t count, int32_t parent, int32_t slot, int32_t idx,
                            int32_t length) {
  int32_t n;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& x = nodes_[n];
  x = Node();
  x.count = count;
  x.parent = parent;
  x.ref_seq = slot;
  x.ref_idx = idx;
  x.length = length;
  x.token = seqs_[slot].tokens[idx];
  ++seqs_[slot].refs;
  return n;
}

void SuffixTree::OnChildAdded(int32_t n, int32_t c) {
  Node& x = nodes_[n];
  if (x.hashed) {
    edges_.Set(n, nodes_[c].token, c);
  } else if (++x.num_children > kMaxScanned) {
    x.hashed = 1;
    for (int32_t s = x.head_child; s >= 0; s = nodes_[s].next) edges_.Set(n, nodes_[s].token, s);
  }
}

void SuffixTree::FreeNode(int32_t n) {
  DropSlotRef(nodes_[n].ref_seq);
  nodes_[n] = Node();
  free_nodes_.push_back(n);
}

void SuffixTree::SetRef(int32_t n, int32_t slot, int32_t idx) {
  Node& x = nodes_[n];
  if (x.ref_seq != slot) {
    ++seqs_[slot].refs;
    DropSlotRef(x.ref_seq);
    x.ref_seq = slot;
  }
  x.ref_idx = idx;
}

void SuffixTree::DropSlotRef(int32_t slot) {
  Seq& s = seqs_[slot];
  if (--s.refs == 0 && s.removed) {
    s = Seq();
    free_slots_.push_back(slot);
  }
}

// ---------------------------------------------------------------------------
// Sibling order. Children are kept in descending count; among equal counts
// the order is whatever these moves produce, which is what makes drafts
// reproducible against the reference implementation:
//  * a new child goes to the tail;
//  * +1: a child stays unless its predecessor's count is c or c+1; then it
//    moves in front of the first sibling of the predecessor's run (so from
//    the middle of a run of c it lands at the back of the c+1 run, and from
//    the front of a run of c at the front of the c+1 run);
//  * -1: a child whose successor has the same count moves behind the last
//    sibling of its run (landing at the front of the c-1 run); otherwise it
//    stays;
//  * splits and merges put the new node in the old one's place.
// ---------------------------------------------------------------------------

int32_t SuffixTree::PrevSibling(int32_t x) const {
  const Node& n = nodes_[x];
  return nodes_[n.parent].head_child == x ? -1 : n.prev;
}

int32_t SuffixTree::RunHead(int32_t x) const {
  const int32_t r = nodes_[x].run;
  return r < 0 ? x : runs_[r].head;
}

int32_t SuffixTree::RunTail(int32_t x) const {
  const int32_t r = nodes_[x].run;
  return r < 0 ? x : runs_[r].tail;
}

int32_t SuffixTree::NewRun(int32_t head, int32_t tail) {
  int32_t r;
  if (!free_runs_.empty()) {
    r = free_runs_.back();
    free_runs_.pop_back();
  } else {
    r = static_cast<int32_t>(runs_.size());
    runs_.emplace_back();
  }
  runs_[r] = Run{head, tail};
  return r;
}

void SuffixTree::Unlink(int32_t x) {
  Node& n = nodes_[x];
  if (n.run >= 0) {
    Run& r = runs_[n.run];
    if (r.head == x) r.head = n.next;
    if (r.tail == x) r.tail = PrevSibling(x);
    if (r.head == r.tail) {
      nodes_[r.head].run = -1;
      free_runs_.push_back(n.run);
    }
    n.run = -1;
  }
  Node& p = nodes_[n.parent];
  if (p.head_child == x) {
    p.head_child = n.next;
    if (n.next >= 0) nodes_[n.next].prev = n.prev;  // keeps the tail link
  } else {
    nodes_[n.prev].next = n.next;
    if (n.next >= 0) {
      nodes_[n.next].prev = n.prev;
    } else {
      nodes_[p.head_child].prev = n.prev;  // n was the tail
    }
  }
  n.prev = n.next = -1;
}

void SuffixTree::JoinRuns(int32_t x) {
  Node& n = nodes_[x];
  const int32_t a = PrevSibling(x);
  const int32_t b = n.next;
  const bool with_a = a >= 0 && nodes_[a].count == n.count;
  const bool with_b = b >= 0 && nodes_[b].count == n.count;
  if (with_a && with_b) {
    n.run = nodes_[a].run;
  } else if (with_a) {
    if (nodes_[a].run < 0) {
      nodes_[a].run = NewRun(a, x);
      nodes_[x].run = nodes_[a].run;
    } else {
      n.run = nodes_[a].run;
      runs_[n.run].tail = x;
    }
  } else if (with_b) {
    if (nodes_[b].run < 0) {
      nodes_[b].run = NewRun(x, b);
      nodes_[x].run = nodes_[b].run;
    } else {
      n.run = nodes_[b].run;
      runs_[n.run].head = x;
    }
  } else {
    n.run = -1;
  }
}

void SuffixTree::InsertBefore(int32_t x, int32_t b) {
  Node& p = nodes_[nodes_[x].parent];
  const int32_t a = PrevSibling(b);
  nodes_[x].next = b;
  if (a < 0) {
    nodes_[x].prev = nodes_[b].prev;  // the tail
    p.head_child = x;
  } else {
    nodes_[x].prev = a;
    nodes_[a].next = x;
  }
  nodes_[b].prev = x;
  JoinRuns(x);
}

void SuffixTree::InsertAfter(int32_t x, int32_t a) {
  Node& p = nodes_[nodes_[x].parent];
  const int32_t b = nodes_[a].next;
  nodes_[x].prev = a;
  nodes_[x].next = b;
  nodes_[a].next = x;
  if (b >= 0) {
    nodes_[b].prev = x;
  } else {
    nodes_[p.head_child].prev = x;  // new tail
  }
  JoinRuns(x);
}

void SuffixTree::InsertAtHead(int32_t x) {
  Node& p = nodes_[nodes_[x].parent];
  if (p.head_child < 0) {
    p.head_child = x;
    nodes_[x].prev = x;
    nodes_[x].next = -1;
    nodes_[x].run = -1;
  } else {
    InsertBefore(x, p.head_child);
  }
}

void SuffixTree::InsertAtTail(int32_t x) {
  Node& p = nodes_[nodes_[x].parent];
  if (p.head_child < 0) {
    InsertAtHead(x);
  } else {
    InsertAfter(x, nodes_[p.head_child].prev);
  }
}

void SuffixTree::ReplaceInSiblings(int32_t old_node, int32_t new_node) {
  Node& o = nodes_[old_node];
  Node& w = nodes_[new_node];
  Node& p = nodes_[o.parent];
  w.parent = o.parent;
  w.next = o.next;
  w.run = o.run;
  if (p.head_child == old_node) {
    p.head_child = new_node;
    w.prev = (o.prev == old_node) ? new_node : o.prev;
  } else {
    w.prev = o.prev;
    nodes_[o.prev].next = new_node;
  }
  if (o.next >= 0) {
    nodes_[o.next].prev = new_node;
  } else if (p.head_child != new_node) {
    nodes_[p.head_child].prev = new_node;
  }
  if (w.run >= 0) {
    Run& r = runs_[w.run];
    if (r.head == old_node) r.head = new_node;
    if (r.tail == old_node) r.tail = new_node;
  }
  o.prev = o.next = -1;
  o.run = -1;
}

void SuffixTree::Increment(int32_t x) {
  Node& n = nodes_[x];
  if (x == kRoot) {
    ++n.count;
    return;
  }
  const int32_t a = PrevSibling(x);
  if (a < 0 || nodes_[a].count > n.count + 1) {
    if (n.run < 0) {  // alone, and cannot join the run in front
      ++n.count;
      return;
    }
    Unlink(x);
    ++nodes_[x].count;
    if (a < 0) {
      InsertAtHead(x);
    } else {
      InsertAfter(x, a);
    }
    return;
  }
  const int32_t target = RunHead(a);
  Unlink(x);
  ++nodes_[x].count;
  InsertBefore(x, target);
}

void SuffixTree::Decrement(int32_t x) {
  Node& n = nodes_[x];
  if (x == kRoot) {
    --n.count;
    return;
  }
  const int32_t b = n.next;
  if (b < 0 || nodes_[b].count < n.count) {
    if (n.run < 0 && (b < 0 || nodes_[b].count < n.count - 1)) {
      --n.count;
      return;
    }
    const int32_t a = PrevSibling(x);
    Unlink(x);
    --nodes_[x].count;
    if (a < 0) {
      InsertAtHead(x);
    } else {
      InsertAfter(x, a);
    }
    return;
  }
  const int32_t tail = RunTail(x);
  Unlink(x);
  --nodes_[x].count;
  InsertAfter(x, tail);
}

// ---------------------------------------------------------------------------
// Growth. Each active node is where one of the sequence's last max_depth
// suffixes ends (always at the end of a node's label). A new token extends
// each of them by one; the cases keep the tree path-compressed.
// ---------------------------------------------------------------------------

void SuffixTree::CloseLeaf(int32_t n) {
  Node& x = nodes_[n];
  if (!x.open) return;
  Seq& s = seqs_[x.ref_seq];
  const int32_t len = static_cast<int32_t>(s.tokens.size());
  // length = max_depth - parent depth and ref_idx = start + parent depth.
  const int32_t start = x.ref_idx + x.length - max_depth_;
  x.length = static_cast<uint16_t>(std::min<int32_t>(x.length, len - x.ref_idx));
  x.open = 0;
  const int32_t depth = len - start;
  if (!s.finished && !s.removed && depth <= s.active_size) {
    const int32_t index = s.active_size - depth;
    s.leaf_count = std::min(s.leaf_count, index);
  }
}

void SuffixTree::Append(int32_t seq_id, int32_t token) {
  AppendToken(seq_id, token, /*prefetch=*/true, /*defer=*/false);
}

// Deferred slides. In a slide the suffix's end node n is unary (it ends only
// this suffix; every other occurrence continues into its one child c) and
// the boundary between n and c moves down one token: only n's and c's
// lengths, references and c's first token change. While the next tokens
// keep following c's label, Extend counts the slides instead of doing them
// and applies them at once: when the label ends or turns away, when any
// other suffix's work reaches n or c (both are marked), when the suffix
// leaves the ring, and at Extend's end. A copied span costs one comparison
// per token and suffix instead of a slide.
void SuffixTree::MaterializeSlides(int32_t slot, int32_t pos) {
  PendingSlides& p = pending_[pos];
  if (p.slides == 0) return;
  const int32_t slides = p.slides;
  p.slides = 0;
  const int32_t n = seqs_[slot].active[pos];
  const int32_t c = nodes_[n].head_child;
  nodes_[n].length += slides;
  SetRef(n, slot, p.n_ref);
  nodes_[c].length -= slides;
  nodes_[c].ref_idx += slides;
  nodes_[c].token = Token(c);
  nodes_[n].pending = 0;
  nodes_[c].pending = 0;
}

void SuffixTree::MaterializeOwnersOf(int32_t slot, int32_t node) {
  const std::vector<int32_t>& active = seqs_[slot].active;
  for (int32_t pos = 0; pos < max_depth_; ++pos) {
    if (pending_[pos].slides == 0) continue;
    const int32_t n = active[pos];
    if (n == node || nodes_[n].head_child == node) MaterializeSlides(slot, pos);
  }
}

void SuffixTree::MaterializeAllSlides(int32_t slot) {
  for (int32_t pos = 0; pos < max_depth_; ++pos) MaterializeSlides(slot, pos);
}

void SuffixTree::AppendToken(int32_t seq_id, int32_t token, bool prefetch, bool defer) {
  const int32_t slot = SlotFor(seq_id);
  {
    Seq& s = seqs_[slot];
    FLOE_SUFFIX_INVARIANT(!s.finished, "append to a finished sequence");
    if (s.active_size == max_depth_) {  // the oldest suffix reached max_depth
      MaterializeSlides(slot, s.active_begin);
      s.active_begin = s.active_begin + 1 == max_depth_ ? 0 : s.active_begin + 1;
      --s.active_size;
      if (s.leaf_count > 0) --s.leaf_count;
    }
    // Active suffixes that became leaves when another sequence was removed
    // (count 1, label possibly in that sequence's storage) open up here.
    const int32_t len = static_cast<int32_t>(s.tokens.size());
    while (s.leaf_count < s.active_size) {
      int32_t pos = s.active_begin + s.leaf_count;
      if (pos >= max_depth_) pos -= max_depth_;
      const int32_t n = s.active[pos];
      if (n == kRoot || nodes_[n].count != 1) break;
      if (nodes_[n].pending) MaterializeOwnersOf(slot, n);
      const int32_t depth = s.active_size - s.leaf_count;
      const int32_t length = nodes_[n].length;
      SetRef(n, slot, len - length);
      nodes_[n].length = static_cast<uint16_t>(max_depth_ - (depth - length));
      nodes_[n].open = 1;
      ++s.leaf_count;
    }
    int32_t back = s.active_begin + s.active_size;
    if (back >= max_depth_) back -= max_depth_;
    s.active[back] = kRoot;
    ++s.active_size;
    s.tokens.push_back(token);  // open leaves grow by this token
  }
  ++nodes_[kRoot].count;
  const int32_t seq_len = static_cast<int32_t>(seqs_[slot].tokens.size());
  const int32_t size = seqs_[slot].active_size;
  // Stable through the loop: nothing below adds sequences or resizes a ring.
  // (Held in a local because node stores, int32 too, would otherwise make
  // the compiler reload it for every suffix.)
  int32_t* const active = seqs_[slot].active.data();
  const int32_t* const own_tokens = seqs_[slot].tokens.data();  // stable below
  const int32_t first_pos = seqs_[slot].active_begin + seqs_[slot].leaf_count;
  const int32_t begin = first_pos >= max_depth_ ? first_pos - max_depth_ : first_pos;
  auto next_pos = [this](int32_t p) { return p + 1 == max_depth_ ? 0 : p + 1; };
  if (prefetch) {
    // The first token of a batch may find the tree cold (one of many
    // requests' local trees): ask for the active nodes, then their first
    // children, a level at a time, instead of waiting for each suffix's
    // misses in turn. Later tokens find them in cache; there this only costs.
    for (int32_t i = seqs_[slot].leaf_count, p = begin; i < size; ++i, p = next_pos(p)) {
      __builtin_prefetch(&nodes_[active[p]]);
    }
    for (int32_t i = seqs_[slot].leaf_count, p = begin; i < size; ++i, p = next_pos(p)) {
      const int32_t first = nodes_[active[p]].head_child;
      if (first >= 0) __builtin_prefetch(&nodes_[first]);
    }
  }
  int32_t pos = begin;
  for (int32_t i = seqs_[slot].leaf_count; i < size; ++i, pos = next_pos(pos)) {
    const int32_t n = active[pos];
    if (PendingSlides& p = pending_[pos]; p.slides > 0) {
      if (p.left >= 2 && (p.base != nullptr ? p.base : own_tokens)[p.next] == token) {  // slides on
        ++p.slides;
        --p.left;
        ++p.next;
        continue;
      }
      MaterializeSlides(slot, pos);
    } else if (nodes_[n].pending) {
      MaterializeOwnersOf(slot, n);
    }
    const int32_t c = FindChild(n, token);
    if (c >= 0 && nodes_[c].pending) MaterializeOwnersOf(slot, c);
    if (c < 0) {
      // Branch off a new open leaf. Only longer suffixes branch before
      // this one, so the leaves stay in front.
      const int32_t parent_depth = size - 1 - i;
      const int32_t leaf = NewNode(1, n, slot, seq_len - 1, max_depth_ - parent_depth);
      nodes_[leaf].open = 1;
      InsertAtTail(leaf);
      OnChildAdded(n, leaf);
      active[pos] = leaf;
      FLOE_SUFFIX_INVARIANT(seqs_[slot].leaf_count == i, "leaves first");
      seqs_[slot].leaf_count = i + 1;
    } else if (n != kRoot && nodes_[n].count == nodes_[c].count + 1) {
      // Every other suffix through n continues into c: n ends only this one.
      if (Length(c) == 1) {
        // n + token is exactly n + c: fuse n into c.
        CloseLeaf(c);
        const int32_t parent = nodes_[n].parent;
        const int32_t n_token = nodes_[n].token;
        Node& cn = nodes_[c];
        cn.count += 1;
        cn.token = n_token;
        cn.length = nodes_[n].length + 1;
        SetRef(c, slot, seq_len - nodes_[c].length);
        ReplaceInSiblings(n, c);
        nodes_[n].head_child = -1;
        if (nodes_[n].hashed) edges_.Erase(n, token);
        OnChildReplaced(parent, c);
        FreeNode(n);
        active[pos] = c;
      } else if (defer && !nodes_[n].hashed) {
        // n's label start does not move as its end does: its reference
        // after any number of slides is the one after this first.
        const Node& cn = nodes_[c];
        pending_[pos] = PendingSlides{1, seq_len - nodes_[n].length - 1, Length(c) - 1, cn.ref_idx + 1,
                                      cn.ref_seq == slot ? nullptr : seqs_[cn.ref_seq].tokens.data()};
        nodes_[n].pending = 1;
        nodes_[c].pending = 1;
      } else {
        // Slide the boundary between n and c one token down. (For an open
        // c, length and ref_idx move together, so it stays correct.)
        nodes_[n].length += 1;
        SetRef(n, slot, seq_len - nodes_[n].length);
        nodes_[c].length -= 1;
        nodes_[c].ref_idx += 1;
        const int32_t c_token = nodes_[c].token = Token(c);
        if (c_token != token) OnChildRekeyed(n, token, c);
      }
    } else if (Length(c) == 1) {
      // Step into c. (The reference leaves c's label reference alone here;
      // pointing it at the newest occurrence keeps old storage unpinned.)
      CloseLeaf(c);
      SetRef(c, slot, seq_len - 1);
      Increment(c);
      active[pos] = c;
    } else {
      // Split c after its first token and step into the upper half.
      const int32_t mid = NewNode(nodes_[c].count, n, slot, seq_len - 1, 1);
      ReplaceInSiblings(c, mid);
      OnChildReplaced(n, mid);
      nodes_[c].length -= 1;
      nodes_[c].ref_idx += 1;
      nodes_[c].parent = mid;
      nodes_[c].token = Token(c);
      nodes_[mid].head_child = c;
      nodes_[mid].num_children = 1;
      nodes_[c].prev = c;
      nodes_[c].next = -1;
      nodes_[c].run = -1;
      Increment(mid);
      active[pos] = mid;
    }
  }
}

void SuffixTree::Extend(int32_t seq_id, absl::Span<const int32_t> tokens) {
  // Deferring pays once a slide can run on for a few tokens; for an engine
  // step's one or two tokens its bookkeeping costs more than it saves.
  const bool defer = tokens.size() >= 4;
  for (size_t i = 0; i < tokens.size(); ++i) AppendToken(seq_id, tokens[i], /*prefetch=*/i == 0, defer);
  if (defer) MaterializeAllSlides(slot_of_.at(seq_id));
}

void SuffixTree::Finish(int32_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it == slot_of_.end()) return;
  Seq& s = seqs_[it->second];
  s.finished = true;
  s.active_size = 0;
  s.leaf_count = 0;
  s.tokens.shrink_to_fit();  // no more growth: drop the doubling slack
  std::vector<int32_t>().swap(s.active);
}

absl::Status SuffixTree::Remove(int32_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it == slot_of_.end()) {
    return absl::NotFoundError(absl::StrCat("suffix tree: no sequence ", seq_id));
  }
  const int32_t slot = it->second;
  slot_of_.erase(it);
  // Hold one reference while walking so the storage cannot be freed under us.
  ++seqs_[slot].refs;
  seqs_[slot].removed = true;
  seqs_[slot].active_size = 0;
  seqs_[slot].leaf_count = 0;
  std::vector<int32_t>().swap(seqs_[slot].active);
  const std::vector<int32_t>& seq = seqs_[slot].tokens;
  const int32_t len = static_cast<int32_t>(seq.size());
  for (int32_t start = 0; start < len; ++start) {
    Decrement(kRoot);
    int32_t node = kRoot;
    int32_t idx = start;
    while (idx < len) {
      const int32_t tok = seq[idx];
      const int32_t c = FindChild(node, tok);
      if (c < 0) break;
      if (nodes_[c].count > 1) {
        Decrement(c);
      } else {
        // Only this suffix used c, so c is a leaf: drop it.
        Unlink(c);
        OnChildRemoved(node, tok);
        FreeNode(c);
        break;
      }
      idx += Length(c);
      node = c;
    }
    // The last node may now be a pass-through: merge it into its only child.
    if (node != kRoot) {
      const int32_t c = nodes_[node].head_child;
      if (c >= 0 && nodes_[c].next < 0 && nodes_[node].count == nodes_[c].count) {
        const int32_t parent = nodes_[node].parent;
        const int32_t node_token = nodes_[node].token;
        const int32_t c_token = nodes_[c].token;
        nodes_[c].token = node_token;
        nodes_[c].length += nodes_[node].length;
        nodes_[c].ref_idx -= nodes_[node].length;
        ReplaceInSiblings(node, c);
        nodes_[node].head_child = -1;
        if (nodes_[node].hashed) edges_.Erase(node, c_token);
        OnChildReplaced(parent, c);
        FreeNode(node);
      }
    }
  }
  DropSlotRef(slot);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Matching and drafting.
// ---------------------------------------------------------------------------

namespace {
// Path probability of a path whose every branching was unanimous (float
// products of ratios >= 0.99 stay above it for a few steps; 1.0 exactly when
// every continuation seen agrees).
constexpr float kUnanimous = 0.99f;
// A score summed token by token may round above the same bound computed as
// one product: n terms of at most 1 drift by up to about n^2 float epsilons
// (a long copy at one probability rounds the same way every step). Bounds
// stop a walk only beyond this margin.
float BoundSlack(int tokens) { return 1e-3f + static_cast<float>(tokens) * static_cast<float>(tokens) * FLT_EPSILON; }

// The most tokens a draft from a match can have: its budget, or with an
// extension past the budget max_spec_tokens (before the tree's depth cuts).
int MostTokens(const DraftParams& params, int budget, bool confident_extra) {
  return confident_extra || params.confident_min_support > 0 ? std::max(budget, params.max_spec_tokens) : budget;
}

// Whether the confident extension applies to a match of `match_len`.
bool ConfidentFrom(const DraftParams& params, int32_t match_len) {
  const int confident_min =
      params.confident_min_match >= 0 ? params.confident_min_match : params.max_spec_tokens / 3;
  return params.confident_prob > 0.0f && match_len >= confident_min;
}

// A drafted token's share of the score (see DraftParams::score_exponent).
float ScoreOf(float prob, const DraftParams& params) {
  return params.score_exponent == 1.0f ? prob : std::pow(prob, params.score_exponent);
}
}  // namespace

bool SuffixTree::MatchFromRoot(absl::Span<const int32_t> pattern, Locus* out) const {
  int32_t node = kRoot;
  int32_t idx = 0;
  for (int32_t c : pattern) {
    if (idx >= Length(node)) {
      node = FindChild(node, c);
      if (node < 0) return false;
      idx = 0;
    }
    if (Token(node, idx) != c) return false;
    ++idx;
  }
  *out = Locus{node, idx};
  return true;
}

int32_t SuffixTree::HintedMatches(absl::Span<const int32_t> context, int32_t hint_seq,
                                  const Seq** seq) const {
  if (hint_seq < 0) return 0;
  auto it = slot_of_.find(hint_seq);
  if (it == slot_of_.end()) return 0;
  const Seq& s = seqs_[it->second];
  const int32_t limit =
      std::min<int32_t>(s.active_size, static_cast<int32_t>(context.size()));
  const int32_t* a = context.data() + context.size();
  const int32_t* b = s.tokens.data() + s.tokens.size();
  int32_t k = 0;
  while (k < limit && a[-1 - k] == b[-1 - k]) ++k;
  *seq = &s;
  return k;
}

template <typename Sink>
SuffixTree::Walk SuffixTree::PathDraft(Locus at, bool own_suffix, absl::Span<const int32_t> matched,
                                       int budget, bool confident_extra, const DraftParams& params,
                                       WalkBounds bounds, std::vector<int32_t>* window,
                                       Sink&& sink) const {
  Walk walk;
  bool& decided = walk.counts_decided;
  // Float arithmetic in the reference's order, so scores (and ties) agree.
  float prob = 1.0f;
  float score = 0.0f;
  int emitted = 0;
  int32_t node = at.node;
  int32_t idx = at.idx;
  const bool extend = params.extend_past_depth;
  // The tokens drafted so far; with `matched` before them they are the
  // window a re-anchoring at the tree's end matches on (built only then:
  // copying the matched tail for every match length was a third of
  // Speculate's time).
  if (extend) window->clear();
  auto emit = [&](int32_t token) {
    sink(token, prob);
    score += ScoreOf(prob, params);
    ++emitted;
    if (extend) window->push_back(token);
  };
  // Past the budget: the confident extension, or a unanimous path whose next
  // token enough occurrences back (the own tail, with no continuation yet,
  // not counted).
  auto past_budget = [&]() {
    if (emitted >= params.max_spec_tokens) return false;
    if (confident_extra && prob >= params.confident_prob) return true;
    if (params.confident_min_support <= 0 || prob < kUnanimous) return false;
    const Node& n = nodes_[node];
    const int32_t support = idx < n.length || n.head_child < 0
                                ? n.count - (own_suffix ? 1 : 0)
                                : nodes_[n.head_child].count;
    return support >= params.confident_min_support;
  };
  // The most tokens this walk can draft: extensions included, and without
  // extend_past_depth no deeper than the tree.
  int cap = MostTokens(params, budget, confident_extra);
  if (!extend) cap = std::min(cap, max_depth_ - static_cast<int>(matched.size()));
  const float slack = BoundSlack(cap);
  const bool bounded = bounds.beat >= 0.0f || bounds.reach >= 0.0f;
  while (prob >= params.min_token_prob && (emitted < budget || past_budget())) {
    const Node& n = nodes_[node];
    if (idx < Length(node)) {
      emit(Token(node, idx));
      ++idx;
      continue;
    }
    const int32_t child = n.head_child;
    if (child >= 0) {
      // The head child is in a run exactly when its next sibling has the
      // same count: a tie, seen without reading that sibling.
      if (nodes_[child].run >= 0) decided = false;
      const int32_t total = own_suffix ? n.count - 1 : n.count;
      own_suffix = false;
      prob *= static_cast<float>(nodes_[child].count) / static_cast<float>(total);
      node = child;
      idx = 0;
      if (bounded) {
        // Probabilities only fall along the path.
        const float most = score + ScoreOf(prob, params) * static_cast<float>(cap - emitted) + slack;
        if (most <= bounds.beat || most < bounds.reach) {
          walk.stopped = true;
          break;
        }
      }
      continue;
    }
    decided = false;
    if (!extend || node == kRoot) break;
    // The end of the indexed depth. A single occurrence continues as its
    // sequence does; otherwise re-anchor on the shorter tail of what has
    // been matched and drafted, whose children say how it goes on.
    if (n.count == 1) {
      const std::vector<int32_t>& toks = seqs_[n.ref_seq].tokens;
      const int limit = confident_extra && prob >= params.confident_prob
                            ? std::max(budget, params.max_spec_tokens)
                            : budget;
      for (int32_t p = n.ref_idx + idx; emitted < limit && p < static_cast<int32_t>(toks.size());
           ++p) {
        emit(toks[p]);
      }
      break;
    }
    const int32_t drafted = static_cast<int32_t>(window->size());
    const int32_t keep =
        std::min<int32_t>(max_depth_ / 2, static_cast<int32_t>(matched.size()) + drafted - 1);
    if (keep < 1) break;
    std::vector<int32_t> tail(matched.end() - std::max(0, keep - drafted), matched.end());
    tail.insert(tail.end(), window->end() - std::min(keep, drafted), window->end());
    Locus again;
    if (!MatchFromRoot(tail, &again)) break;
    if (again.idx >= Length(again.node) && nodes_[again.node].head_child < 0) break;
    node = again.node;
    idx = again.idx;
  }
  walk.last_node = node;
  walk.score = score;
  return walk;
}

void SuffixTree::TreeDraft(Locus at, int budget, const DraftParams& params,
                           Draft* out) const {
  struct Item {
    float prob;
    int32_t node;
    int32_t idx;
    int32_t parent;
    bool operator<(const Item& o) const { return prob < o.prob; }
  };
  std::priority_queue<Item> heap;
  heap.push(Item{1.0f, at.node, at.idx, -1});
  while (static_cast<int>(out->token_ids.size()) < budget && !heap.empty()) {
    const Item item = heap.top();
    heap.pop();
    const Node& n = nodes_[item.node];
    if (item.idx < Length(item.node)) {
      out->token_ids.push_back(Token(item.node, item.idx));
      out->parents.push_back(item.parent);
      out->probs.push_back(item.prob);
      out->score += ScoreOf(item.prob, params);
      heap.push(Item{item.prob, item.node, item.idx + 1,
                     static_cast<int32_t>(out->token_ids.size()) - 1});
    } else {
      for (int32_t c = n.head_child; c >= 0; c = nodes_[c].next) {
        const float p = item.prob * static_cast<float>(nodes_[c].count) /
                        static_cast<float>(n.count);
        if (p < params.min_token_prob) break;  // siblings are in count order
        heap.push(Item{p, c, 0, item.parent});
      }
    }
  }
}

Draft SuffixTree::Speculate(absl::Span<const int32_t> context, const DraftParams& params,
                            int32_t hint_seq, float must_beat) const {
  Draft best;
  const int32_t len = static_cast<int32_t>(context.size());
  if (len < 2) return best;
  const int32_t max_match = len - 1;
  // Matches of length <= k come from the hinted sequence's active nodes.
  const Seq* hinted = nullptr;
  const int32_t k = std::min(HintedMatches(context, hint_seq, &hinted), max_match);
  // Longer matches are walked from the root; a miss ends them (a longer
  // tail cannot match if a shorter one does not).
  // (Any number of them: a fixed bound here once ignored matches longer
  // than 256 unhinted tokens at deep trees.)
  absl::InlinedVector<Locus, 64> walked;
  int32_t m_max = k;
  for (int32_t m = k + 1; m <= max_match; ++m) {
    Locus at;
    if (!MatchFromRoot(context.subspan(len - m), &at)) break;
    walked.push_back(at);
    m_max = m;
  }
  auto hinted_node = [&](int32_t m) {
    int32_t pos = hinted->active_begin + hinted->active_size - m;
    if (pos >= max_depth_) pos -= max_depth_;
    return hinted->active[pos];
  };
  auto locus = [&](int32_t m) -> Locus {
    if (m > k) return walked[m - k - 1];
    const int32_t n = hinted_node(m);
    return Locus{n, Length(n)};
  };
  // Where match m ends (its count is the node's).
  auto locus_node = [&](int32_t m) { return m > k ? walked[m - k - 1].node : hinted_node(m); };
  // The hinted sequence's own open leaf: the context's tail is the match's
  // only occurrence, and nothing follows it yet (an empty draft, no walk).
  // In a request's own tree every long enough tail is one.
  const int32_t hinted_slot = hinted == nullptr ? -1 : static_cast<int32_t>(hinted - seqs_.data());
  auto only_own = [&](int32_t m, int32_t node) {
    return m <= k && nodes_[node].open && nodes_[node].ref_seq == hinted_slot;
  };
  // The hinted loci's nodes are scattered (a cold tree: one of many
  // requests' local trees); the loops below read each one's count. Ask for
  // them all at once instead of one miss per match length.
  for (int32_t m = 1; m <= k; ++m) __builtin_prefetch(&nodes_[hinted_node(m)]);
  auto own = [&](int32_t m) { return params.discount_own_suffix && m <= k; };
  auto confident = [&](int32_t m) { return ConfidentFrom(params, m); };
  auto budget_for = [&](int32_t m) { return DraftBudget(params, m); };
  // Longest match first: equal scores keep the longer match, and a match
  // whose budget cannot beat the best score ends the search (budgets do not
  // grow as matches shorten).
  const bool can_prune = params.max_spec_factor >= 0.0f;
  int32_t best_m = 0;
  float best_score = 0.0f;
  auto improves = [&](float score) { return best_m == 0 || score > best_score; };
  // With a score to beat, the search stops as soon as nothing left can beat
  // it (and returns nothing); until then it runs exactly as without one.
  const bool floor = must_beat >= 0.0f;
  auto beats_floor = [&] { return best_m > 0 && best_score > must_beat; };
  std::vector<int32_t> window;  // only for extend_past_depth
  // Path drafts stop at the tree's depth: a match of m tokens drafts at most
  // max_depth - m. Matches longer than m_top are cut by it, so they are
  // searched after the others, shortest first, each only while its cut can
  // still reach the best score (longer matches win ties): a handful of walks
  // instead of one per length. With the supported extension this order
  // would change the result (the break below is part of the search's
  // definition there), so it keeps the plain order.
  const bool depth_cut = !params.use_tree_spec && !params.extend_past_depth &&
                         params.confident_min_support <= 0;
  const int32_t m_top = depth_cut ? std::min(m_max, std::max(0, max_depth_ - params.max_spec_tokens)) : m_max;
  // The last match drafted, when its walk was decided by counts alone. A
  // shorter match with as many occurrences has exactly the same ones (each
  // occurrence of the longer tail is one of the shorter), so the same
  // continuations: its draft is the same path under a budget no larger, a
  // prefix scoring no more, and cannot beat the longer match. Long copied
  // spans have the same few occurrences for dozens of match lengths.
  struct Decided {
    int32_t count = -1;
    bool own = false;
    bool confident = false;
  };
  Decided decided;
  auto same_occurrences = [&](const Decided& d, int32_t m, int32_t count) {
    return count == d.count && own(m) == d.own && confident(m) == d.confident;
  };
  // Conversely a longer match with the same occurrences and budget walks
  // the same path until its cut ends it: the cut matches take their scores
  // from the last complete decided walk at or above m_top.
  struct Source {
    Decided occurrences;
    int budget = 0;
    absl::InlinedVector<float, 32> prefix;  // score after each drafted token
  };
  Source source, walked_source;
  // Drafts match m until its end or until it cannot win (`bounds`); notes
  // it in `decided` (for the shorter matches), and a complete decided walk
  // becomes `*record` when given (for the cut matches).
  auto walk = [&](int32_t m, int32_t count, WalkBounds bounds, Source* record) {
    float sum = 0.0f;
    walked_source.prefix.clear();
    const int budget = budget_for(m);
    const Walk w = PathDraft(locus(m), own(m), context.subspan(len - m), budget, confident(m), params, bounds,
                             &window, [&](int32_t, float p) {
                               if (record == nullptr) return;
                               sum += ScoreOf(p, params);  // term by term, as the walk sums
                               walked_source.prefix.push_back(sum);
                             });
    // A stopped walk could not win with every token left at its last
    // probability; a shorter match with the same occurrences follows it that
    // far with no more tokens left, unless the tree's depth cut this one
    // shorter than theirs.
    const bool depth_cut_this = !params.extend_past_depth && MostTokens(params, budget, confident(m)) > max_depth_ - m;
    decided = w.counts_decided && (!w.stopped || !depth_cut_this) ? Decided{count, own(m), confident(m)}
                                                                    : Decided{};
    if (record != nullptr) {
      record->occurrences = Decided{};
      if (decided.count >= 0 && !w.stopped) {
        walked_source.occurrences = decided;
        walked_source.budget = budget;
        std::swap(*record, walked_source);
      }
    }
    return w.score;
  };
  for (int32_t m = m_top; m >= 1; --m) {
    const int budget = budget_for(m);
    // Scores never exceed the number of drafted tokens.
    const int bound = confident(m) ? std::max(budget, params.max_spec_tokens) : budget;
    if (can_prune && best_m > 0 && best_score >= static_cast<float>(bound)) break;
    // The most this or any shorter match can score, extensions past the
    // budget included (budgets do not grow as matches shorten).
    const int most = MostTokens(params, budget, confident(m));
    if (can_prune && floor && !beats_floor() && must_beat >= static_cast<float>(most)) break;
    const int32_t node = locus_node(m);
    const int32_t count = nodes_[node].count;
    if (can_prune && !params.use_tree_spec && same_occurrences(decided, m, count)) continue;
    float score;
    if (!params.use_tree_spec && only_own(m, node)) {
      score = 0.0f;
      decided = Decided{};
    } else if (params.use_tree_spec) {
      Draft d;
      TreeDraft(locus(m), budget, params, &d);
      score = d.score;
      if (improves(score)) {
        best = std::move(d);
        best.match_len = m;
      }
    } else {
      // Only a draft scoring more than the best (shorter matches lose ties)
      // or than the floor is of use. But where the break above is part of
      // the search's definition (the supported extension), a stopped walk's
      // lower score must not become the best: there only the best bounds.
      const float beat = std::max(best_m > 0 ? best_score : -1.0f,
                                  floor && params.confident_min_support <= 0 ? must_beat : -1.0f);
      score = walk(m, count, WalkBounds{can_prune ? beat : -1.0f, -1.0f},
                   depth_cut && m == m_top ? &source : nullptr);
    }
    if (improves(score)) {
      best_m = m;
      best_score = score;
    }
  }
  for (int32_t m = m_top + 1; m <= m_max; ++m) {
    const int cut = max_depth_ - m;
    // Cuts only shrink from here; a longer match needs only to tie.
    if (best_m > 0 && static_cast<float>(cut) < best_score) break;
    if (floor && static_cast<float>(cut) <= must_beat) break;
    const int budget = budget_for(m);
    const int most = std::min(cut, MostTokens(params, budget, confident(m)));
    if ((best_m > 0 && static_cast<float>(most) < best_score) || (floor && static_cast<float>(most) <= must_beat)) {
      continue;
    }
    const int32_t node = locus_node(m);
    const int32_t count = nodes_[node].count;
    float score;
    if (only_own(m, node)) {
      score = 0.0f;
    } else if (same_occurrences(source.occurrences, m, count) && budget == source.budget) {
      const int tokens = std::min<int>(cut, static_cast<int>(source.prefix.size()));
      score = tokens == 0 ? 0.0f : source.prefix[tokens - 1];
    } else {
      score = walk(m, count, WalkBounds{floor ? must_beat : -1.0f, best_m > 0 ? best_score : -1.0f}, &source);
    }
    if (best_m == 0 || score >= best_score) {
      best_m = m;
      best_score = score;
    }
  }
  if (floor && !beats_floor()) return Draft();
  if (best_m > 0 && !params.use_tree_spec) {
    best = PathDraftAt(locus(best_m), own(best_m), context.subspan(len - best_m), params, &window);
  }
  return best;
}

Draft SuffixTree::PathDraftAt(Locus at, bool own_suffix, absl::Span<const int32_t> matched,
                              const DraftParams& params, std::vector<int32_t>* window) const {
  const int32_t match_len = static_cast<int32_t>(matched.size());
  const int budget = DraftBudget(params, match_len);
  Draft d;
  d.token_ids.reserve(budget);
  d.probs.reserve(budget);
  const Walk w = PathDraft(at, own_suffix, matched, budget, ConfidentFrom(params, match_len), params, WalkBounds{},
                           window, [&](int32_t t, float p) {
                             d.parents.push_back(static_cast<int32_t>(d.token_ids.size()) - 1);
                             d.token_ids.push_back(t);
                             d.probs.push_back(p);
                           });
  d.score = w.score;
  d.match_len = match_len;
  if (!d.token_ids.empty() && w.last_node != kRoot) {
    const Seq& src = seqs_[nodes_[w.last_node].ref_seq];
    if (!src.removed) d.source_seq = src.seq_id;
  }
  return d;
}

Draft SuffixTree::DraftForMatch(absl::Span<const int32_t> context, int32_t match_len, const DraftParams& params,
                                bool own_suffix) const {
  Locus at;
  if (match_len < 1 || match_len > static_cast<int32_t>(context.size()) ||
      !MatchFromRoot(context.subspan(context.size() - match_len), &at)) {
    return Draft();
  }
  std::vector<int32_t> window;
  return PathDraftAt(at, own_suffix, context.subspan(context.size() - match_len), params, &window);
}

int64_t SuffixTree::CountOccurrences(absl::Span<const int32_t> pattern) const {
  if (pattern.empty()) return nodes_[kRoot].count;
  if (static_cast<int>(pattern.size()) > max_depth_) return 0;
  Locus at;
  if (!MatchFromRoot(pattern, &at)) return 0;
  return nodes_[at.node].count;
}

std::vector<std::pair<std::vector<int32_t>, int64_t>> SuffixTree::AllPaths() const {
  std::vector<std::pair<std::vector<int32_t>, int64_t>> out;
  std::vector<int32_t> path;
  struct Frame {
    int32_t node;
    size_t path_len;
  };
  std::vector<Frame> stack;
  for (int32_t c = nodes_[kRoot].head_child; c >= 0; c = nodes_[c].next) stack.push_back({c, 0});
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    path.resize(f.path_len);
    for (int32_t i = 0, e = Length(f.node); i < e; ++i) {
      path.push_back(Token(f.node, i));
      out.emplace_back(path, nodes_[f.node].count);
    }
    for (int32_t c = nodes_[f.node].head_child; c >= 0; c = nodes_[c].next) {
      stack.push_back({c, path.size()});
    }
  }
  return out;
}

size_t SuffixTree::MemoryUsage() const {
  size_t total = sizeof(*this) + nodes_.MemoryUsage() +
                 free_nodes_.capacity() * sizeof(int32_t) + runs_.MemoryUsage() +
                 free_runs_.capacity() * sizeof(int32_t) + edges_.MemoryUsage() +
                 seqs_.capacity() * sizeof(Seq) + free_slots_.capacity() * sizeof(int32_t) +
                 slot_of_.capacity() * (sizeof(std::pair<int32_t, int32_t>) + 1);
  for (const Seq& s : seqs_) {
    total += s.tokens.capacity() * sizeof(int32_t) + s.active.capacity() * sizeof(int32_t);
  }
  return total;
}

}  // namespace floe::suffix_cache
