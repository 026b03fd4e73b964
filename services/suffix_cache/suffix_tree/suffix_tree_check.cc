// SuffixTree::CheckIntegrity: every invariant the tree relies on, plus a
// recount of all indexed suffixes from the raw sequences.
#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {
namespace {

#define FLOE_TREE_CHECK(cond, ...)                                                      \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      return absl::InternalError(absl::StrCat("suffix tree integrity: ", #cond, " (", \
                                              __VA_ARGS__, ")"));                       \
    }                                                                                   \
  } while (0)

}  // namespace

absl::Status SuffixTree::CheckNode(int32_t n, int depth, std::vector<int32_t>* stack) const {
  const Node& x = nodes_[n];
  FLOE_TREE_CHECK(!x.pending, "node ", n, " has a pending slide outside Extend");
  if (n != kRoot) {
    const int32_t length = Length(n);
    FLOE_TREE_CHECK(length > 0 && x.count > 0, "node ", n);
    FLOE_TREE_CHECK(x.ref_seq >= 0 && x.ref_seq < static_cast<int32_t>(seqs_.size()), "node ", n);
    const Seq& s = seqs_[x.ref_seq];
    FLOE_TREE_CHECK(s.refs > 0, "node ", n);
    FLOE_TREE_CHECK(x.ref_idx >= 0 &&
                        x.ref_idx + length <= static_cast<int32_t>(s.tokens.size()),
                    "node ", n);
    FLOE_TREE_CHECK(depth <= max_depth_, "node ", n, " depth ", depth);
    FLOE_TREE_CHECK(x.token == Token(n), "node ", n);
    FLOE_TREE_CHECK(FindChild(x.parent, Token(n)) == n, "node ", n);
    // The label's occurrence is preceded by the whole root path (merges
    // rely on it).
    int32_t pos = x.ref_idx;
    for (int32_t a = x.parent; a != kRoot; a = nodes_[a].parent) {
      for (int32_t i = Length(a) - 1; i >= 0; --i) {
        --pos;
        FLOE_TREE_CHECK(pos >= 0 && s.tokens[pos] == Token(a, i), "node ", n, " ancestor ", a);
      }
    }
    if (x.count == 1) FLOE_TREE_CHECK(x.head_child < 0, "node ", n);
    if (x.open) {
      // An open leaf: one occurrence, in live storage, whose label runs to
      // the end of its sequence or to max_depth, whichever comes first.
      FLOE_TREE_CHECK(x.count == 1 && x.head_child < 0 && !s.removed, "open leaf ", n);
      FLOE_TREE_CHECK(x.length == max_depth_ - (depth - length), "open leaf ", n, " cap ",
                      x.length, " depth ", depth);
    }
  } else {
    FLOE_TREE_CHECK(x.parent == -1 && x.length == 0 && x.count >= 0, "root");
  }
  if (x.head_child < 0) {
    FLOE_TREE_CHECK(x.hashed || x.num_children == 0, "leaf ", n, " counts ", x.num_children, " children");
    return absl::OkStatus();
  }
  int64_t child_sum = 0;
  int32_t children = 0;
  int32_t prev = -1;
  int32_t seg_start = -1;
  int32_t seg_len = 0;
  auto check_segment = [&](int32_t first, int32_t length) -> absl::Status {
    if (length == 1) {
      FLOE_TREE_CHECK(nodes_[first].run == -1, "lone node ", first, " in a run");
      return absl::OkStatus();
    }
    const int32_t r = nodes_[first].run;
    FLOE_TREE_CHECK(r >= 0 && r < static_cast<int32_t>(runs_.size()), "node ", first);
    FLOE_TREE_CHECK(runs_[r].head == first, "run ", r);
    int32_t c = first;
    for (int32_t i = 0; i < length; ++i, c = nodes_[c].next) {
      FLOE_TREE_CHECK(nodes_[c].run == r, "node ", c, " run ", r);
      if (i == length - 1) FLOE_TREE_CHECK(runs_[r].tail == c, "run ", r);
    }
    return absl::OkStatus();
  };
  for (int32_t c = x.head_child; c >= 0; c = nodes_[c].next) {
    const Node& y = nodes_[c];
    FLOE_TREE_CHECK(y.parent == n, "child ", c, " of ", n);
    if (prev >= 0) {
      FLOE_TREE_CHECK(y.prev == prev, "child ", c);
      FLOE_TREE_CHECK(y.count <= nodes_[prev].count, "order at child ", c);
    }
    if (n != kRoot) FLOE_TREE_CHECK(y.count < x.count, "child ", c, " of ", n);
    child_sum += y.count;
    ++children;
    if (prev >= 0 && y.count == nodes_[prev].count) {
      ++seg_len;
    } else {
      if (seg_start >= 0) {
        absl::Status st = check_segment(seg_start, seg_len);
        if (!st.ok()) return st;
      }
      seg_start = c;
      seg_len = 1;
    }
    stack->push_back(c);
    prev = c;
  }
  absl::Status st = check_segment(seg_start, seg_len);
  if (!st.ok()) return st;
  FLOE_TREE_CHECK(nodes_[x.head_child].prev == prev, "tail link of ", n);
  if (!x.hashed) {
    FLOE_TREE_CHECK(x.num_children == children && children <= kMaxScanned, "node ", n);
  }
  FLOE_TREE_CHECK(child_sum <= x.count, "node ", n);
  return absl::OkStatus();
}

absl::Status SuffixTree::CheckIntegrity() const {
  // 1. Structure, reachable from the root.
  std::vector<int32_t> stack = {kRoot};
  std::vector<int32_t> depth(nodes_.size(), 0);
  std::vector<int32_t> refs(seqs_.size(), 0);
  int64_t reachable = 0;
  int64_t hashed_edges = 0;
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    ++reachable;
    if (n != kRoot) {
      depth[n] = depth[nodes_[n].parent] + Length(n);
      ++refs[nodes_[n].ref_seq];
    }
    const size_t before = stack.size();
    absl::Status st = CheckNode(n, depth[n], &stack);
    if (!st.ok()) return st;
    // Counted over reachable nodes only: a free node's fields are stale.
    if (nodes_[n].hashed) hashed_edges += static_cast<int64_t>(stack.size() - before);
  }
  FLOE_TREE_CHECK(reachable == num_nodes(), reachable, " vs ", num_nodes());
  FLOE_TREE_CHECK(static_cast<int64_t>(edges_.size()) == hashed_edges, edges_.size());
  for (size_t s = 0; s < seqs_.size(); ++s) {
    FLOE_TREE_CHECK(seqs_[s].refs == refs[s], "slot ", s, ": ", seqs_[s].refs, " vs ", refs[s]);
  }
  // 2. Recount: walk every indexed suffix of every live sequence.
  absl::flat_hash_map<int32_t, int64_t> visits;
  int64_t total = 0;
  for (const auto& [seq_id, slot] : slot_of_) {
    const Seq& s = seqs_[slot];
    FLOE_TREE_CHECK(!s.removed, "seq ", seq_id);
    const int32_t len = static_cast<int32_t>(s.tokens.size());
    total += len;
    for (int32_t start = 0; start < len; ++start) {
      const int32_t end = std::min(len, start + max_depth_);
      int32_t node = kRoot;
      int32_t idx = start;
      while (idx < end) {
        node = FindChild(node, s.tokens[idx]);
        FLOE_TREE_CHECK(node >= 0, "seq ", seq_id, " start ", start, " idx ", idx);
        FLOE_TREE_CHECK(idx + Length(node) <= end, "seq ", seq_id, " start ", start);
        for (int32_t i = 0; i < Length(node); ++i) {
          FLOE_TREE_CHECK(Token(node, i) == s.tokens[idx + i], "seq ", seq_id, " start ", start);
        }
        ++visits[node];
        idx += Length(node);
      }
    }
    // 3. Active suffixes end at the ends of their nodes.
    if (!s.finished) {
      FLOE_TREE_CHECK(s.active_size == std::min(len, max_depth_), "seq ", seq_id);
      FLOE_TREE_CHECK(s.leaf_count >= 0 && s.leaf_count <= s.active_size, "seq ", seq_id);
      for (int32_t i = 0; i < s.active_size; ++i) {
        const int32_t n = s.active[(s.active_begin + i) % max_depth_];
        // Open leaves first (exactly the first leaf_count), then closed
        // nodes; a closed leaf (count 1) only right after the open ones.
        FLOE_TREE_CHECK(nodes_[n].open == (i < s.leaf_count), "seq ", seq_id, " active ", i);
        if (i > 0 && nodes_[n].count == 1) {
          FLOE_TREE_CHECK(nodes_[s.active[(s.active_begin + i - 1) % max_depth_]].count == 1,
                          "seq ", seq_id, " active ", i);
        }
        FLOE_TREE_CHECK(depth[n] == s.active_size - i, "seq ", seq_id, " active ", i);
        int32_t pos = len;
        for (int32_t a = n; a != kRoot; a = nodes_[a].parent) {
          for (int32_t j = Length(a) - 1; j >= 0; --j) {
            FLOE_TREE_CHECK(s.tokens[--pos] == Token(a, j), "seq ", seq_id, " active ", i);
          }
        }
      }
    }
  }
  FLOE_TREE_CHECK(nodes_[kRoot].count == total, nodes_[kRoot].count, " vs ", total);
  stack = {kRoot};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    for (int32_t c = nodes_[n].head_child; c >= 0; c = nodes_[c].next) {
      auto it = visits.find(c);
      const int64_t v = it == visits.end() ? 0 : it->second;
      FLOE_TREE_CHECK(nodes_[c].count == v, "node ", c, ": ", nodes_[c].count, " vs ", v);
      stack.push_back(c);
    }
  }
  return absl::OkStatus();
}

}  // namespace floe::suffix_cache
