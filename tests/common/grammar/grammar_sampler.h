// Random documents drawn from a grammar (common/grammar/grammar.h), for
// tests that check a front end's language from the outside: every string
// sampled here is in the grammar's language by construction, so a
// validator that rejects one has found a string the grammar should not
// admit.
//
// A random walk from the root: each rule picks one of its alternatives
// (uniformly among those that can finish), each byte set one of its bytes.
// Past `max_depth` nested rules, or `max_bytes` of output, every rule takes
// an alternative of least height (the shallowest derivation), which ends
// the walk: each such step replaces a rule by elements of smaller height.
// Iterative (an explicit stack), so deep grammars cannot overflow the stack.
//
// Heights are computed once per sampler, in O(grammar size x log).
// Header-only; thread-compatible (the caller's generator is the only state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/grammar/grammar.h"

namespace floe::grammar::testing {

class GrammarSampler {
 public:
  explicit GrammarSampler(const Grammar& g) : g_(g), height_(Heights(g)) {}

  // Whether the root derives any finite string.
  bool CanFinish() const { return g_.root() < height_.size() && height_[g_.root()] != kInfinite; }

  // One random string of the root's language; nullopt when the root
  // derives no finite string, or when even the shallowest completion
  // passes `give_up_bytes` (a schema's minItems of minItems can make every
  // document huge).
  template <typename Rng>
  std::optional<std::string> Sample(Rng& rng, int max_depth = 40, size_t max_bytes = 4096,
                                    size_t give_up_bytes = size_t{1} << 22) const {
    if (!CanFinish()) return std::nullopt;
    std::string out;
    // (element, depth) still to expand, the next one last.
    std::vector<std::pair<Element, int>> pending{{Grammar::Ref(g_.root()), 0}};
    while (!pending.empty()) {
      const auto [e, depth] = pending.back();
      pending.pop_back();
      if (e.kind == Element::Kind::kBytes) {
        out.push_back(static_cast<char>(PickByte(g_.byte_sets()[e.index], rng)));
        if (out.size() > give_up_bytes) return std::nullopt;
        continue;
      }
      const auto& alts = g_.rules()[e.index].alternatives;
      const bool shallow = depth >= max_depth || out.size() >= max_bytes;
      std::vector<size_t> choices;
      uint64_t best = kInfinite;
      for (size_t a = 0; a < alts.size(); ++a) {
        const uint64_t h = AltHeight(alts[a]);
        if (h == kInfinite) continue;
        if (!shallow) {
          choices.push_back(a);
        } else if (h < best) {
          best = h;
          choices = {a};
        } else if (h == best) {
          choices.push_back(a);
        }
      }
      // CanFinish() held for the root, and every alternative chosen so far
      // had finite height, so each rule reached has one.
      const Sequence& alt = alts[choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)]];
      for (size_t i = alt.size(); i-- > 0;) pending.push_back({alt[i], depth + 1});
    }
    return out;
  }

 private:
  static constexpr uint64_t kInfinite = std::numeric_limits<uint64_t>::max();

  uint64_t ElementHeight(const Element& e) const {
    if (e.kind == Element::Kind::kRule) return height_[e.index];
    return g_.byte_sets()[e.index].Empty() ? kInfinite : 0;
  }
  uint64_t AltHeight(const Sequence& alt) const {
    uint64_t h = 0;
    for (const Element& e : alt) h = std::max(h, ElementHeight(e));
    return h == kInfinite ? kInfinite : h + 1;
  }

  // Least derivation height of each rule (kInfinite: derives nothing
  // finite): Knuth's generalization of Dijkstra to grammars. An
  // alternative's height is 1 + the largest of its elements' heights, known
  // once all its rules are final; rules become final in increasing order.
  static std::vector<uint64_t> Heights(const Grammar& g) {
    const auto& rules = g.rules();
    std::vector<uint64_t> height(rules.size(), kInfinite);
    std::vector<bool> final(rules.size(), false);
    // (alternative's rule, index) waiting on each rule; per alternative the
    // count of distinct rule references not final yet and the max so far.
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> waiting(rules.size());
    std::vector<std::vector<uint32_t>> pending_refs(rules.size());
    std::vector<std::vector<uint64_t>> partial(rules.size());
    using Entry = std::pair<uint64_t, uint32_t>;  // (candidate height, rule)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    for (uint32_t r = 0; r < rules.size(); ++r) {
      pending_refs[r].assign(rules[r].alternatives.size(), 0);
      partial[r].assign(rules[r].alternatives.size(), 0);
      for (uint32_t a = 0; a < rules[r].alternatives.size(); ++a) {
        bool dead = false;
        for (const Element& e : rules[r].alternatives[a]) {
          if (e.kind == Element::Kind::kBytes) {
            dead |= g.byte_sets()[e.index].Empty();
          } else {
            ++pending_refs[r][a];
            waiting[e.index].push_back({r, a});
          }
        }
        if (dead) pending_refs[r][a] = std::numeric_limits<uint32_t>::max();
        if (pending_refs[r][a] == 0) queue.push({1, r});
      }
    }
    while (!queue.empty()) {
      const auto [h, r] = queue.top();
      queue.pop();
      if (final[r]) continue;
      final[r] = true;
      height[r] = h;
      // One reference counts once per occurrence, as it was counted.
      for (const auto& [parent, a] : waiting[r]) {
        if (pending_refs[parent][a] == std::numeric_limits<uint32_t>::max()) continue;
        partial[parent][a] = std::max(partial[parent][a], h);
        if (--pending_refs[parent][a] == 0 && !final[parent]) queue.push({partial[parent][a] + 1, parent});
      }
    }
    return height;
  }

  template <typename Rng>
  static uint8_t PickByte(const ByteSet& set, Rng& rng) {
    int k = std::uniform_int_distribution<int>(0, set.Count() - 1)(rng);
    for (int b = 0; b < 256; ++b)
      if (set.Has(static_cast<uint8_t>(b)) && k-- == 0) return static_cast<uint8_t>(b);
    return 0;
  }

  const Grammar& g_;
  std::vector<uint64_t> height_;
};

}  // namespace floe::grammar::testing
