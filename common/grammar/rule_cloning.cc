#include "common/grammar/rule_cloning.h"

#include <algorithm>
#include <utility>

namespace floe::grammar {
namespace {

constexpr int64_t kUnbounded = INT64_MAX / 4;

// Per rule: the longest sentence and the size of the call tree unfolded,
// both kUnbounded for a rule that reaches recursion (it cannot be copied
// as a tree).
struct Sizes {
  std::vector<int64_t> sentence_bytes;
  std::vector<int64_t> unfolded;
};

Sizes MeasureRules(const RuleTable& table) {
  const size_t n = table.alternatives.size();
  Sizes s{std::vector<int64_t>(n, -1), std::vector<int64_t>(n, -1)};
  std::vector<uint8_t> colour(n, 0);  // 0 new, 1 on the path, 2 done
  // Iterative DFS: (rule, next element to look at across its alternatives).
  std::vector<std::pair<uint32_t, size_t>> path;
  const auto element_at = [&](uint32_t r, size_t k, const Element** e) {
    for (const Sequence& alt : table.alternatives[r]) {
      if (k < alt.size()) {
        *e = &alt[k];
        return true;
      }
      k -= alt.size();
    }
    return false;
  };
  for (uint32_t start = 0; start < n; ++start) {
    if (colour[start] != 0) continue;
    colour[start] = 1;
    path.emplace_back(start, 0);
    while (!path.empty()) {
      auto& [r, k] = path.back();
      const Element* e = nullptr;
      if (element_at(r, k, &e)) {
        ++k;
        if (e->kind == Element::Kind::kRule) {
          if (colour[e->index] == 1) {
            // A cycle: every rule on it (and every caller) is unbounded.
            for (auto& [on_path, unused] : path) s.unfolded[on_path] = kUnbounded;
          } else if (colour[e->index] == 0) {
            colour[e->index] = 1;
            path.emplace_back(e->index, 0);
          }
        }
        continue;
      }
      // All callees are done (or on a cycle): combine.
      int64_t longest = 0, unfolded = 0;
      for (const Sequence& alt : table.alternatives[r]) {
        int64_t bytes = 0;
        for (const Element& el : alt) {
          const bool rule = el.kind == Element::Kind::kRule;
          bytes += rule ? s.sentence_bytes[el.index] : 1;
          unfolded += 1 + (rule ? s.unfolded[el.index] : 0);
          bytes = std::min(bytes, kUnbounded);
          unfolded = std::min(unfolded, kUnbounded);
        }
        longest = std::max(longest, bytes);
      }
      if (s.unfolded[r] == kUnbounded) unfolded = longest = kUnbounded;
      s.sentence_bytes[r] = longest;
      s.unfolded[r] = unfolded;
      colour[r] = 2;
      path.pop_back();
      if (!path.empty() && s.unfolded[r] == kUnbounded) s.unfolded[path.back().first] = kUnbounded;
    }
  }
  return s;
}

uint32_t CloneTree(RuleTable* table, uint32_t rule, size_t* added) {
  const uint32_t copy = static_cast<uint32_t>(table->alternatives.size());
  table->alternatives.push_back(table->alternatives[rule]);
  table->origin.push_back(table->origin[rule]);
  for (size_t a = 0; a < table->alternatives[copy].size(); ++a)
    for (size_t i = 0; i < table->alternatives[copy][a].size(); ++i) {
      ++*added;
      const Element e = table->alternatives[copy][a][i];
      // Reached rules are non-recursive (the caller checked the tree's size).
      if (e.kind == Element::Kind::kRule) {
        const uint32_t callee = CloneTree(table, e.index, added);  // may reallocate the table
        table->alternatives[copy][a][i].index = callee;
      }
    }
  return copy;
}

}  // namespace

void ClonePrivateCopies(RuleTable* table, const CloneLimits& limits) {
  const size_t inputs = table->alternatives.size();
  const Sizes sizes = MeasureRules(*table);
  std::vector<int> sites(inputs, 0);
  for (const auto& alts : table->alternatives)
    for (const Sequence& alt : alts)
      for (const Element& e : alt)
        if (e.kind == Element::Kind::kRule) ++sites[e.index];
  const auto clonable = [&](uint32_t r) {
    return sites[r] >= 2 && sizes.unfolded[r] <= limits.max_unfolded_elements &&
           sizes.sentence_bytes[r] <= limits.max_sentence_bytes;
  };
  std::vector<bool> kept(inputs, false);  // the first reference keeps the original
  size_t added = 0;
  for (uint32_t r = 0; r < inputs; ++r)
    for (size_t a = 0; a < table->alternatives[r].size(); ++a)
      for (size_t i = 0; i < table->alternatives[r][a].size(); ++i) {
        const Element e = table->alternatives[r][a][i];
        if (e.kind != Element::Kind::kRule || !clonable(e.index)) continue;
        if (!kept[e.index]) {
          kept[e.index] = true;
          continue;
        }
        if (added + static_cast<size_t>(sizes.unfolded[e.index]) > limits.max_added_elements) return;
        const uint32_t copy = CloneTree(table, e.index, &added);  // may reallocate the table
        table->alternatives[r][a][i].index = copy;
      }
}

}  // namespace floe::grammar
