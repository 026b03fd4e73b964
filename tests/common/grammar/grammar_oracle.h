// An independent oracle for grammar tests: an Earley recognizer over the
// grammar IR (common/grammar/grammar.h), reading bytes.
//
// Contract: OracleAccepts(g, s) is true iff the root rule derives exactly
// the bytes s; OracleIsPrefix(g, s) is true iff some byte string t exists
// with OracleAccepts(g, s + t) (s itself counts, t may be empty). Works on
// any grammar whose references are in range, left-recursive or not (Earley
// needs no restriction), with nullable rules handled by the Aycock-Horspool
// prediction rule. Rules that derive no finite string (and empty byte sets)
// are pruned before parsing, so "some item survives the last byte" really
// means a completion exists.
//
// Deliberately simple (textbook Earley, no optimizations beyond hashing
// the items and indexing them by the rule they wait for): it is the
// reference the fast matcher and the front ends are checked against, so it
// shares no code with them beyond the IR types. Header-only; thread-
// compatible (no state beyond the call).
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/grammar/grammar.h"

namespace floe::grammar::testing {

namespace oracle_internal {

// (rule, alternative, dot, origin): alternative `alt` of `rule`, with its
// first `dot` elements matched from input position `origin`.
using Item = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;

// Rules that derive at least one finite byte string.
inline std::vector<bool> ProductiveRules(const Grammar& g) {
  const auto& rules = g.rules();
  std::vector<bool> productive(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (productive[r]) continue;
      for (const Sequence& alt : rules[r].alternatives) {
        bool all = true;
        for (const Element& e : alt) {
          const bool ok = e.kind == Element::Kind::kBytes ? !g.byte_sets()[e.index].Empty()
                                                           : productive[e.index];
          if (!ok) {
            all = false;
            break;
          }
        }
        if (all) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  return productive;
}

// The Earley chart after reading `bytes`; returns the final set (empty
// when the input died on the way). Alternatives that mention an
// unproductive element are never predicted.
inline absl::flat_hash_set<Item> FinalSet(const Grammar& g, std::string_view bytes) {
  const auto& rules = g.rules();
  if (g.root() >= rules.size()) return {};
  const std::vector<bool> productive = ProductiveRules(g);
  const std::vector<bool> nullable = g.NullableRules();
  // The alternatives worth predicting, per rule.
  std::vector<std::vector<uint32_t>> alive(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (uint32_t a = 0; a < rules[r].alternatives.size(); ++a) {
      bool ok = true;
      for (const Element& e : rules[r].alternatives[a])
        ok = ok && (e.kind == Element::Kind::kBytes ? !g.byte_sets()[e.index].Empty() : productive[e.index]);
      if (ok) alive[r].push_back(a);
    }

  // Set k: its items in order (the worklist), a hash set to drop
  // duplicates, and its items that wait for each rule (for completion).
  struct EarleySet {
    std::vector<Item> items;
    absl::flat_hash_set<Item> seen;
    absl::flat_hash_map<uint32_t, std::vector<Item>> waiting;
  };
  std::vector<EarleySet> chart(bytes.size() + 1);
  auto add = [&](size_t k, const Item& item) {
    if (!chart[k].seen.insert(item).second) return;
    chart[k].items.push_back(item);
    const auto [rule, alt, dot, origin] = item;
    const Sequence& seq = rules[rule].alternatives[alt];
    if (dot < seq.size() && seq[dot].kind == Element::Kind::kRule) chart[k].waiting[seq[dot].index].push_back(item);
  };
  auto predict = [&](size_t k, uint32_t rule) {
    for (uint32_t a : alive[rule]) add(k, Item{rule, a, 0, static_cast<uint32_t>(k)});
  };

  predict(0, g.root());
  for (size_t k = 0; k <= bytes.size(); ++k) {
    // chart[k].items grows while we walk it; index, not iterators.
    for (size_t i = 0; i < chart[k].items.size(); ++i) {
      const auto [rule, alt, dot, origin] = chart[k].items[i];
      const Sequence& seq = rules[rule].alternatives[alt];
      if (dot == seq.size()) {
        // Complete: advance the items of the origin set waiting for
        // `rule`. When origin == k the rule matched "" and is nullable:
        // the predictor advances those items, so skip (the list may grow).
        if (origin == k) continue;
        auto it = chart[origin].waiting.find(rule);
        if (it == chart[origin].waiting.end()) continue;
        for (const auto& [r2, a2, d2, o2] : it->second) add(k, Item{r2, a2, d2 + 1, o2});
        continue;
      }
      const Element& next = seq[dot];
      if (next.kind == Element::Kind::kRule) {
        predict(k, next.index);
        if (nullable[next.index]) add(k, Item{rule, alt, dot + 1, origin});
      } else if (k < bytes.size() && g.byte_sets()[next.index].Has(static_cast<uint8_t>(bytes[k]))) {
        add(k + 1, Item{rule, alt, dot + 1, origin});
      }
    }
    if (k < bytes.size()) {
      if (chart[k + 1].items.empty()) return {};
      // Completions in later sets read only `waiting` of this one.
      chart[k].items = {};
      chart[k].seen = {};
    }
  }
  return std::move(chart.back().seen);
}

}  // namespace oracle_internal

// True iff the root derives exactly `bytes`.
inline bool OracleAccepts(const Grammar& g, std::string_view bytes) {
  for (const auto& [rule, alt, dot, origin] : oracle_internal::FinalSet(g, bytes))
    if (rule == g.root() && origin == 0 && dot == g.rules()[rule].alternatives[alt].size()) return true;
  return false;
}

// True iff some continuation of `bytes` (possibly empty) is accepted.
inline bool OracleIsPrefix(const Grammar& g, std::string_view bytes) {
  return !oracle_internal::FinalSet(g, bytes).empty();
}

}  // namespace floe::grammar::testing
