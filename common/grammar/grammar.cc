#include "common/grammar/grammar.h"

#include <bit>
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace floe::grammar {

ByteSet ByteSet::Of(uint8_t b) {
  ByteSet s;
  s.Add(b);
  return s;
}

ByteSet ByteSet::Range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.AddRange(lo, hi);
  return s;
}

ByteSet ByteSet::All() { return ByteSet().Complement(); }

void ByteSet::AddRange(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
}

void ByteSet::AddAll(const ByteSet& other) {
  for (int i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
}

ByteSet ByteSet::Complement() const {
  ByteSet s;
  for (int i = 0; i < 4; ++i) s.bits_[i] = ~bits_[i];
  return s;
}

bool ByteSet::Empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }

int ByteSet::Count() const {
  int n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

uint32_t Grammar::AddRule(std::string_view name) {
  const std::string base(name.empty() ? "rule" : name);
  std::string unique = base;
  if (auto it = names_.find(base); it != names_.end()) {
    // Suffixes below the stored one were taken once, and names stay taken.
    int suffix = it->second;
    do {
      unique = absl::StrCat(base, "-", suffix++);
    } while (names_.contains(unique));
    names_[base] = suffix;
  }
  names_.emplace(unique, 2);
  rules_.push_back(Rule{std::move(unique), {}});
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::AddAlternative(uint32_t rule, Sequence alternative) {
  rules_[rule].alternatives.push_back(std::move(alternative));
}

uint32_t Grammar::InternBytes(const ByteSet& set) {
  for (size_t i = 0; i < byte_sets_.size(); ++i)
    if (byte_sets_[i] == set) return static_cast<uint32_t>(i);
  byte_sets_.push_back(set);
  return static_cast<uint32_t>(byte_sets_.size() - 1);
}

Sequence Grammar::Literal(std::string_view text) {
  Sequence seq;
  seq.reserve(text.size());
  for (char c : text) seq.push_back(Byte(static_cast<uint8_t>(c)));
  return seq;
}

Element Grammar::Star(Element item, std::string_view name) {
  // star ::= item star | ""
  const uint32_t star = AddRule(absl::StrCat(std::string(name), "-star"));
  AddAlternative(star, {item, Ref(star)});
  AddAlternative(star, {});
  return Ref(star);
}

Element Grammar::Plus(Element item, std::string_view name) {
  // plus ::= item star
  return Group({item, Star(item, name)}, absl::StrCat(std::string(name), "-plus"));
}

Element Grammar::Optional(Element item, std::string_view name) {
  const uint32_t opt = AddRule(absl::StrCat(std::string(name), "-opt"));
  AddAlternative(opt, {item});
  AddAlternative(opt, {});
  return Ref(opt);
}

Element Grammar::Repeat(Element item, int min, int max, std::string_view name) {
  if (min == 1 && max == 1) return item;
  // The optional tail, {0, max - min}: tail_k ::= item tail_{k-1} | "";
  // unbounded: a star.
  std::optional<Element> tail;
  if (max < 0) {
    tail = Star(item, name);
  } else if (max > min) {
    const uint32_t first = AddRule(absl::StrCat(std::string(name), "-upto"));
    uint32_t prev = first;
    AddAlternative(prev, {item});
    AddAlternative(prev, {});
    for (int k = 2; k <= max - min; ++k) {
      const uint32_t next = AddRule(absl::StrCat(std::string(name), "-upto"));
      AddAlternative(next, {item, Ref(prev)});
      AddAlternative(next, {});
      prev = next;
    }
    tail = Ref(prev);
  }
  Sequence seq(static_cast<size_t>(std::max(min, 0)), item);
  if (tail) seq.push_back(*tail);
  if (seq.size() == 1) return seq[0];
  return Group(std::move(seq), absl::StrCat(std::string(name), "-rep"));
}

Element Grammar::Group(Sequence seq, std::string_view name) {
  const uint32_t rule = AddRule(name);
  AddAlternative(rule, std::move(seq));
  return Ref(rule);
}

Element Grammar::Choice(std::vector<Sequence> alternatives, std::string_view name) {
  const uint32_t rule = AddRule(name);
  for (Sequence& alt : alternatives) AddAlternative(rule, std::move(alt));
  return Ref(rule);
}

std::vector<bool> Grammar::NullableRules() const {
  std::vector<bool> nullable(rules_.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alt : rules_[r].alternatives) {
        bool all = true;
        for (const Element& e : alt)
          if (e.kind == Element::Kind::kBytes || !nullable[e.index]) {
            all = false;
            break;
          }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

absl::Status Grammar::CheckIntegrity() const {
  if (root_ >= rules_.size()) return absl::FailedPreconditionError("the grammar has no root rule");
  for (const Rule& r : rules_) {
    if (r.alternatives.empty())
      return absl::FailedPreconditionError(absl::StrCat("rule '", r.name, "' has no alternatives"));
    for (const Sequence& alt : r.alternatives)
      for (const Element& e : alt) {
        const size_t bound = e.kind == Element::Kind::kRule ? rules_.size() : byte_sets_.size();
        if (e.index >= bound)
          return absl::FailedPreconditionError(absl::StrCat("rule '", r.name, "' refers to a missing ",
                                                            e.kind == Element::Kind::kRule ? "rule" : "byte set"));
      }
  }
  // Left recursion: an edge r -> s where s appears in an alternative of r
  // after only nullable elements; a cycle in that graph is left recursion.
  const std::vector<bool> nullable = NullableRules();
  std::vector<std::vector<uint32_t>> left(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r)
    for (const Sequence& alt : rules_[r].alternatives)
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::kBytes) break;
        left[r].push_back(e.index);
        if (!nullable[e.index]) break;
      }
  // Iterative DFS with colours; the grey path names the cycle.
  std::vector<uint8_t> colour(rules_.size(), 0);
  for (size_t start = 0; start < rules_.size(); ++start) {
    if (colour[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
    colour[start] = 1;
    while (!path.empty()) {
      auto& [node, next] = path.back();
      if (next == left[node].size()) {
        colour[node] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t to = left[node][next++];
      if (colour[to] == 1) {
        std::vector<std::string> cycle;
        bool on = false;
        for (const auto& [n, unused] : path) {
          if (n == to) on = true;
          if (on) cycle.push_back(rules_[n].name);
        }
        cycle.push_back(rules_[to].name);
        return absl::FailedPreconditionError(
            absl::StrCat("left recursion: ", absl::StrJoin(cycle, " -> ")));
      }
      if (colour[to] == 0) {
        colour[to] = 1;
        path.push_back({to, 0});
      }
    }
  }
  return absl::OkStatus();
}

namespace {

std::string ByteText(uint8_t b, bool in_class) {
  if (b == '\\' || b == '"' || (in_class && (b == ']' || b == '-' || b == '^')))
    return absl::StrCat("\\", std::string(1, static_cast<char>(b)));
  if (b >= 0x20 && b < 0x7f) return std::string(1, static_cast<char>(b));
  static const char* kHex = "0123456789ABCDEF";
  return absl::StrCat("\\x", std::string(1, kHex[b >> 4]), std::string(1, kHex[b & 15]));
}

std::string SetText(const ByteSet& set) {
  if (set.Count() == 1)
    for (int b = 0; b < 256; ++b)
      if (set.Has(static_cast<uint8_t>(b))) return absl::StrCat("\"", ByteText(static_cast<uint8_t>(b), false), "\"");
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set.Has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set.Has(static_cast<uint8_t>(e + 1))) ++e;
    out += ByteText(static_cast<uint8_t>(b), true);
    if (e > b) absl::StrAppend(&out, "-", ByteText(static_cast<uint8_t>(e), true));
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::ToGbnf() const {
  std::string out;
  auto emit = [&](const Rule& r) {
    absl::StrAppend(&out, r.name, " ::= ");
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a) out += " | ";
      if (r.alternatives[a].empty()) out += "\"\"";
      for (size_t i = 0; i < r.alternatives[a].size(); ++i) {
        const Element& e = r.alternatives[a][i];
        if (i) out += ' ';
        out += e.kind == Element::Kind::kRule ? rules_[e.index].name : SetText(byte_sets_[e.index]);
      }
    }
    out += '\n';
  };
  if (root_ < rules_.size()) emit(rules_[root_]);
  for (size_t r = 0; r < rules_.size(); ++r)
    if (r != root_) emit(rules_[r]);
  return out;
}

}  // namespace floe::grammar
