// Random test inputs for a grammar, built from the IR alone (independent of
// the matcher): sentences from random derivations, then damaged copies
// (mutated, truncated) and noise over the grammar's own bytes, so that
// accepted and rejected inputs both occur. Deterministic per seed.
// Header-only; not thread-safe.
#pragma once

#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"

namespace floe::grammar::testing {

class StringGenerator {
 public:
  StringGenerator(const Grammar& g, uint32_t seed, size_t max_len = 80) : g_(g), rng_(seed), max_len_(max_len) {
    ComputeShortest();
    for (const ByteSet& set : g.byte_sets()) {
      std::vector<uint8_t> members;
      for (int b = 0; b < 256; ++b)
        if (set.Has(static_cast<uint8_t>(b))) members.push_back(static_cast<uint8_t>(b));
      if (members.empty()) continue;
      // A few bytes per set, both ends included: enough to hit every branch.
      alphabet_.push_back(members.front());
      alphabet_.push_back(members.back());
      for (int k = 0; k < 2; ++k) alphabet_.push_back(members[rng_() % members.size()]);
    }
    std::sort(alphabet_.begin(), alphabet_.end());
    alphabet_.erase(std::unique(alphabet_.begin(), alphabet_.end()), alphabet_.end());
  }

  // A random sentence of the grammar (short once max_len is reached).
  std::string Sentence() {
    std::string out;
    Derive(g_.root(), 0, &out);
    return out;
  }

  // A sentence, a damaged sentence or noise.
  std::string Next() {
    const int kind = static_cast<int>(rng_() % 20);
    std::string s = Sentence();
    if (kind < 8) return s;
    if (kind < 11) return s.substr(0, s.empty() ? 0 : rng_() % (s.size() + 1));
    if (kind < 17) {
      const int edits = 1 + static_cast<int>(rng_() % 3);
      for (int e = 0; e < edits; ++e) {
        const size_t at = s.empty() ? 0 : rng_() % (s.size() + 1);
        const char c = static_cast<char>(RandomByte());
        switch (rng_() % 3) {
          case 0: s.insert(s.begin() + static_cast<long>(at), c); break;
          case 1: if (at < s.size()) s.erase(at, 1); break;
          default: if (at < s.size()) s[at] = c; break;
        }
      }
      return s;
    }
    std::string noise;
    const size_t len = rng_() % 12;
    for (size_t i = 0; i < len; ++i) noise.push_back(static_cast<char>(RandomByte()));
    return noise;
  }

  uint8_t RandomByte() { return alphabet_.empty() ? 'a' : alphabet_[rng_() % alphabet_.size()]; }
  const std::vector<uint8_t>& alphabet() const { return alphabet_; }
  std::mt19937& rng() { return rng_; }

 private:
  static constexpr int kInf = INT_MAX / 4;

  int ElementLen(const Element& e) const {
    if (e.kind == Element::Kind::kBytes) return g_.byte_sets()[e.index].Empty() ? kInf : 1;
    return shortest_[e.index];
  }
  int AltLen(const Sequence& alt) const {
    int n = 0;
    for (const Element& e : alt) n = std::min(kInf, n + ElementLen(e));
    return n;
  }
  void ComputeShortest() {
    shortest_.assign(g_.rules().size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g_.rules().size(); ++r)
        for (const Sequence& alt : g_.rules()[r].alternatives) {
          const int n = AltLen(alt);
          if (n < shortest_[r]) {
            shortest_[r] = n;
            changed = true;
          }
        }
    }
  }

  void Derive(uint32_t rule, int depth, std::string* out) {
    const auto& alts = g_.rules()[rule].alternatives;
    std::vector<size_t> choices;
    const bool shortest = depth > 12 || out->size() >= max_len_;
    for (size_t a = 0; a < alts.size(); ++a) {
      const int n = AltLen(alts[a]);
      if (n < kInf && (!shortest || n == shortest_[rule])) choices.push_back(a);
    }
    // Shortest derivations never revisit a rule without consuming bytes
    // (that would be left recursion), so this ends.
    const Sequence& alt = alts[choices[rng_() % choices.size()]];
    for (const Element& e : alt) {
      if (e.kind == Element::Kind::kRule) {
        Derive(e.index, depth + 1, out);
        continue;
      }
      const ByteSet& set = g_.byte_sets()[e.index];
      const int pick = static_cast<int>(rng_() % static_cast<unsigned>(set.Count()));
      for (int b = 0, seen = 0; b < 256; ++b)
        if (set.Has(static_cast<uint8_t>(b)) && seen++ == pick) out->push_back(static_cast<char>(b));
    }
  }

  const Grammar& g_;
  std::mt19937 rng_;
  size_t max_len_;
  std::vector<int> shortest_;
  std::vector<uint8_t> alphabet_;
};

}  // namespace floe::grammar::testing
