#include "common/grammar/program.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/rule_cloning.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace {

// Worklist fixpoint: runs update(r) for every rule, then again for each
// dependent of a rule whose update reported a change, until none does.
// Linear in the grammar for the monotone facts below, however the rules
// are ordered (pass-based loops take a pass per step of a long chain).
template <typename Update>
void Propagate(const std::vector<std::vector<uint32_t>>& dependents, Update&& update) {
  std::vector<uint32_t> work(dependents.size());
  for (size_t r = 0; r < work.size(); ++r) work[r] = static_cast<uint32_t>(work.size() - 1 - r);
  std::vector<bool> queued(dependents.size(), true);
  while (!work.empty()) {
    const uint32_t r = work.back();
    work.pop_back();
    queued[r] = false;
    if (!update(r)) continue;
    for (uint32_t d : dependents[r])
      if (!queued[d]) {
        queued[d] = true;
        work.push_back(d);
      }
  }
}

// Which rules can derive some finite string; byte sets with no bytes never can.
std::vector<bool> ProductiveRules(const Grammar& g) {
  const auto& rules = g.rules();
  std::vector<std::vector<uint32_t>> users(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const Sequence& alt : rules[r].alternatives)
      for (const Element& e : alt)
        if (e.kind == Element::Kind::kRule) users[e.index].push_back(static_cast<uint32_t>(r));
  std::vector<bool> productive(rules.size(), false);
  Propagate(users, [&](uint32_t r) {
    if (productive[r]) return false;
    for (const Sequence& alt : rules[r].alternatives) {
      bool all = true;
      for (const Element& e : alt)
        all = all && (e.kind == Element::Kind::kBytes ? !g.byte_sets()[e.index].Empty() : productive[e.index]);
      if (all) {
        productive[r] = true;
        return true;
      }
    }
    return false;
  });
  return productive;
}

uint32_t JoinReturn(uint32_t a, uint32_t b) {
  if (a == Program::kUnreached) return b;
  if (b == Program::kUnreached || a == b) return a;
  return Program::kReturnsToMany;
}

}  // namespace

absl::StatusOr<Program> Program::Build(const Grammar& grammar) {
  FLOE_RETURN_IF_ERROR(grammar.CheckIntegrity());
  const std::vector<bool> productive = ProductiveRules(grammar);
  if (!productive[grammar.root()])
    return absl::InvalidArgumentError(absl::StrCat("the grammar matches no string: root rule '",
                                                   grammar.rules()[grammar.root()].name, "' cannot be completed"));
  // Alternatives that can never complete are dropped, then short shared
  // rules get private copies (rule_cloning.h).
  RuleTable table;
  for (size_t r = 0; r < grammar.rules().size(); ++r) {
    table.origin.push_back(static_cast<uint32_t>(r));
    auto& kept = table.alternatives.emplace_back();
    for (const Sequence& alt : grammar.rules()[r].alternatives) {
      bool keep = true;
      for (const Element& e : alt)
        keep = keep && (e.kind == Element::Kind::kBytes ? !grammar.byte_sets()[e.index].Empty() : productive[e.index]);
      if (keep) kept.push_back(alt);
    }
  }
  ClonePrivateCopies(&table);

  Program p;
  p.root_ = grammar.root();
  p.byte_sets_ = grammar.byte_sets();
  const size_t rules = table.alternatives.size();
  p.alt_starts_.resize(rules);
  p.names_.reserve(rules);
  for (size_t r = 0; r < rules; ++r) {
    p.names_.push_back(grammar.rules()[table.origin[r]].name);
    for (const Sequence& alt : table.alternatives[r]) {
      p.alt_starts_[r].push_back(static_cast<uint32_t>(p.code_.size()));
      for (const Element& e : alt)
        p.code_.push_back(Instr{e.kind == Element::Kind::kBytes ? Op::kBytes : Op::kRef, e.index});
      p.code_.push_back(Instr{Op::kEnd, static_cast<uint32_t>(r)});
      p.rule_of_.resize(p.code_.size(), static_cast<uint32_t>(r));
    }
  }

  // Nullable rules and FIRST sets over the pruned program.
  std::vector<std::vector<uint32_t>> users(rules);
  for (uint32_t pos = 0; pos < p.code_.size(); ++pos)
    if (p.code_[pos].op == Op::kRef) users[p.code_[pos].arg].push_back(p.rule_of_[pos]);
  std::vector<bool> nullable(rules, false);
  std::vector<ByteSet> first(rules);
  const auto scan_suffix = [&](uint32_t pos, ByteSet* out) {  // true when the suffix is nullable
    for (;; ++pos) {
      const Instr& in = p.code_[pos];
      if (in.op == Op::kEnd) return true;
      if (in.op == Op::kBytes) {
        out->AddAll(p.byte_sets_[in.arg]);
        return false;
      }
      out->AddAll(first[in.arg]);
      if (!nullable[in.arg]) return false;
    }
  };
  Propagate(users, [&](uint32_t r) {
    ByteSet f = first[r];
    bool n = nullable[r];
    for (uint32_t start : p.alt_starts_[r]) n = scan_suffix(start, &f) || n;
    const bool changed = !(f == first[r]) || n != nullable[r];
    first[r] = f;
    nullable[r] = n;
    return changed;
  });
  p.ComputeReturns();
  p.ComputeFollow(nullable, first);
  for (uint32_t pos = 0; pos < p.code_.size(); ++pos)
    if (p.code_[pos].op == Op::kBytes && p.return_of_[p.rule_of_[pos]] != kUnreached) p.byte_positions_.push_back(pos);
  return p;
}

void Program::ComputeReturns() {
  // Returns flow from a caller to the rules it references: a worklist of
  // rules whose return changed, each pushing its contribution to its callees.
  return_of_.assign(alt_starts_.size(), kUnreached);
  return_of_[root_] = kReturnsToRoot;
  std::vector<uint32_t> work = {root_};
  while (!work.empty()) {
    const uint32_t caller = work.back();
    work.pop_back();
    for (uint32_t start : alt_starts_[caller])
      for (uint32_t pos = start; code_[pos].op != Op::kEnd; ++pos) {
        if (code_[pos].op != Op::kRef) continue;
        // Mirrors the matcher: a reference that ends its alternative pushes
        // nothing, so the callee returns wherever the caller does.
        const uint32_t ret = code_[pos + 1].op == Op::kEnd ? return_of_[caller] : pos + 1;
        uint32_t& callee = return_of_[code_[pos].arg];
        const uint32_t joined = JoinReturn(callee, ret);
        if (joined != callee) {
          callee = joined;
          work.push_back(code_[pos].arg);
        }
      }
  }
}

void Program::ComputeFollow(const std::vector<bool>& nullable, const std::vector<ByteSet>& first) {
  // FOLLOW(R) = the bytes that can start what comes after each reference
  // to R, plus FOLLOW(caller) where that rest can be empty: a fixed part
  // per rule, then propagation along caller -> callee edges.
  follow_.assign(alt_starts_.size(), ByteSet());
  std::vector<std::vector<uint32_t>> inherits_to(alt_starts_.size());
  for (uint32_t pos = 0; pos < code_.size(); ++pos) {
    if (code_[pos].op != Op::kRef) continue;
    ByteSet& f = follow_[code_[pos].arg];
    bool rest_nullable = true;
    for (uint32_t q = pos + 1; rest_nullable && code_[q].op != Op::kEnd; ++q) {
      if (code_[q].op == Op::kBytes) {
        f.AddAll(byte_sets_[code_[q].arg]);
        rest_nullable = false;
      } else {
        f.AddAll(first[code_[q].arg]);
        rest_nullable = nullable[code_[q].arg];
      }
    }
    if (rest_nullable) inherits_to[rule_of_[pos]].push_back(code_[pos].arg);
  }
  std::vector<uint32_t> work(alt_starts_.size());
  for (uint32_t r = 0; r < work.size(); ++r) work[r] = r;
  while (!work.empty()) {
    const uint32_t from = work.back();
    work.pop_back();
    for (uint32_t to : inherits_to[from]) {
      ByteSet f = follow_[to];
      f.AddAll(follow_[from]);
      if (!(f == follow_[to])) {
        follow_[to] = f;
        work.push_back(to);
      }
    }
  }
}

size_t Program::MemoryBytes() const {
  size_t n = sizeof(*this) + code_.capacity() * sizeof(Instr) + rule_of_.capacity() * 4 +
             byte_sets_.capacity() * sizeof(ByteSet) + return_of_.capacity() * 4 + follow_.capacity() * sizeof(ByteSet) +
             byte_positions_.capacity() * 4;
  for (const auto& a : alt_starts_) n += sizeof(a) + a.capacity() * 4;
  for (const auto& s : names_) n += sizeof(s) + s.capacity();
  return n;
}

}  // namespace floe::grammar
