// The pushdown core shared by the matcher and the token-mask precompute:
// persistent stacks in a hash-consed arena, and the step that advances a set
// of stacks by one byte.
//
// A node is a continuation: "run the program from `pos`, then return to
// `parent`". A stack is the node of its top; equal stacks are the same node
// id, so deduplicating stacks is deduplicating ids and advancing copies
// nothing. Two sentinels sit below every stack: kRootNode (below the root
// rule: reaching it means the input may end here) and kUnknownNode (used by
// the precompute: the frames below are not known, so reaching it means the
// outcome depends on context). Tops are always kBytes positions: expansion
// runs eagerly through references (pushing the position after the
// reference, or nothing for a reference that ends its alternative, so right
// recursion does not grow stacks) and alternative ends (popping).
//
// Not thread-safe: an arena and a stepper belong to one thread of use.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "common/grammar/program.h"

namespace floe::grammar {

inline constexpr uint32_t kRootNode = 0;
inline constexpr uint32_t kUnknownNode = 1;

class NodeArena {
 public:
  NodeArena() { Clear(); }
  // The node (pos, parent), created on first use.
  uint32_t Intern(uint32_t pos, uint32_t parent);
  uint32_t pos(uint32_t node) const { return nodes_[node].pos; }
  uint32_t parent(uint32_t node) const { return nodes_[node].parent; }
  size_t size() const { return nodes_.size(); }
  // Back to the two sentinels.
  void Clear();
  size_t MemoryBytes() const;

 private:
  struct Node {
    uint32_t pos;
    uint32_t parent;
  };
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
};

// The stacks after some input, and which bottoms the expansion reached.
struct Frontier {
  std::vector<uint32_t> tops;  // sorted, unique; each node's pos is a kBytes position
  bool reached_root = false;
  bool reached_unknown = false;

  void Clear() {
    tops.clear();
    reached_root = reached_unknown = false;
  }
  // Nothing can follow and nothing ended: the input was impossible.
  bool Dead() const { return tops.empty() && !reached_root && !reached_unknown; }
  bool operator==(const Frontier& o) const {
    return tops == o.tops && reached_root == o.reached_root && reached_unknown == o.reached_unknown;
  }
};

class StackStepper {
 public:
  explicit StackStepper(const Program* program) : program_(program) {}

  // `out` := the stacks before any input: `rule` expanded above kRootNode.
  void StartRule(NodeArena& arena, uint32_t rule, Frontier* out);
  // `out` := every stack of `tops` whose top takes `byte`, advanced and
  // expanded. `tops` must not alias out->tops.
  void Step(NodeArena& arena, absl::Span<const uint32_t> tops, uint8_t byte, Frontier* out);
  // Union of the byte sets at the tops: the bytes that can come next.
  ByteSet NextBytes(const NodeArena& arena, absl::Span<const uint32_t> tops) const;

 private:
  void Expand(NodeArena& arena, uint32_t pos, uint32_t parent, Frontier* out);
  void Finish(Frontier* out);

  const Program* program_;
  absl::flat_hash_set<uint64_t> visited_;
  std::vector<std::pair<uint32_t, uint32_t>> work_;
};

}  // namespace floe::grammar
