#include "common/grammar/front_end.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace floe::grammar {

Expr Expr::Chars(CodePointSet set) {
  Expr e;
  e.kind = Kind::kChars;
  e.chars = std::move(set);
  return e;
}

Expr Expr::Bytes(const ByteSet& set) {
  Expr e;
  e.kind = Kind::kBytes;
  e.bytes = set;
  return e;
}

Expr Expr::Literal(std::string bytes) {
  Expr e;
  e.kind = Kind::kLiteral;
  e.text = std::move(bytes);
  return e;
}

Expr Expr::Seq(std::vector<Expr> children) {
  Expr e;
  e.kind = Kind::kSeq;
  e.children = std::move(children);
  return e;
}

Expr Expr::Alt(std::vector<Expr> children) {
  if (children.size() == 1) return std::move(children[0]);
  Expr e;
  e.kind = Kind::kAlt;
  e.children = std::move(children);
  return e;
}

Expr Expr::Repeat(Expr child, int min, int max) {
  Expr e;
  e.kind = Kind::kRepeat;
  e.children.push_back(std::move(child));
  e.min = min;
  e.max = max;
  return e;
}

Expr Expr::Rule(uint32_t rule) {
  Expr e;
  e.kind = Kind::kRule;
  e.rule = rule;
  return e;
}

std::optional<Expr> PruneEmpty(Expr e) {
  switch (e.kind) {
    case Expr::Kind::kChars:
      if (e.chars.Empty()) return std::nullopt;
      return e;
    case Expr::Kind::kBytes:
      if (e.bytes.Empty()) return std::nullopt;
      return e;
    case Expr::Kind::kRule:
    case Expr::Kind::kLiteral:
      return e;
    case Expr::Kind::kSeq:
      for (Expr& c : e.children) {
        std::optional<Expr> p = PruneEmpty(std::move(c));
        if (!p) return std::nullopt;
        c = std::move(*p);
      }
      return e;
    case Expr::Kind::kAlt: {
      std::vector<Expr> kept;
      for (Expr& c : e.children)
        if (std::optional<Expr> p = PruneEmpty(std::move(c))) kept.push_back(std::move(*p));
      if (kept.empty()) return std::nullopt;
      return Expr::Alt(std::move(kept));
    }
    case Expr::Kind::kRepeat: {
      std::optional<Expr> p = PruneEmpty(std::move(e.children[0]));
      if (p) {
        e.children[0] = std::move(*p);
        return e;
      }
      // Zero repetitions of nothing is "".
      if (e.min == 0) return Expr::Seq();
      return std::nullopt;
    }
  }
  return std::nullopt;
}

absl::Status Lowering::Charge(size_t rules, size_t elements) {
  if (g_->rules().size() - base_rules_ + rules > static_cast<size_t>(limits_.max_rules))
    return absl::InvalidArgumentError(
        absl::StrCat(what_, ": the grammar needs more than max_rules=", limits_.max_rules, " rules"));
  elements_ += elements;
  if (elements_ > limits_.max_elements)
    return absl::InvalidArgumentError(
        absl::StrCat(what_, ": the grammar needs more than max_elements=", limits_.max_elements, " elements"));
  return absl::OkStatus();
}

void Lowering::AppendRepeat(Element item, int min, int max, std::string_view name, Sequence* out) {
  for (int i = 0; i < min; ++i) out->push_back(item);
  if (max < 0) {
    // star ::= item star | "" (Grammar::Star), remembered for Finish().
    const Element star = g_->Star(item, name);
    if (item.kind == Element::Kind::kRule) stars_.push_back({star.index, item.index});
    out->push_back(star);
  } else if (max > min) {
    out->push_back(g_->Repeat(item, 0, max - min, name));
  }
}

absl::Status Lowering::Append(const Expr& e, std::string_view name, Sequence* out) {
  switch (e.kind) {
    case Expr::Kind::kChars:
      if (e.chars.IsSingle()) {
        // One character: its bytes, inline.
        std::string bytes;
        AppendUtf8(e.chars.ranges()[0].lo, &bytes);
        FLOE_RETURN_IF_ERROR(Charge(0, bytes.size()));
        for (char b : bytes) out->push_back(g_->Byte(static_cast<uint8_t>(b)));
        return absl::OkStatus();
      }
    {
      FLOE_RETURN_IF_ERROR(Charge(1, 1));
      const Element chars = AddCodePoints(g_, e.chars, absl::StrCat(std::string(name), "-char"));
      out->push_back(chars);
      // Its size depends on how the ranges split into UTF-8 sequences:
      // charge what was added.
      size_t added = 0;
      if (chars.kind == Element::Kind::kRule)
        for (const Sequence& alt : g_->rules()[chars.index].alternatives) added += alt.size();
      return Charge(0, added);
    }
    case Expr::Kind::kBytes:
      FLOE_RETURN_IF_ERROR(Charge(0, 1));
      out->push_back(g_->Bytes(e.bytes));
      return absl::OkStatus();
    case Expr::Kind::kLiteral:
      FLOE_RETURN_IF_ERROR(Charge(0, e.text.size()));
      for (char b : e.text) out->push_back(g_->Byte(static_cast<uint8_t>(b)));
      return absl::OkStatus();
    case Expr::Kind::kRule:
      FLOE_RETURN_IF_ERROR(Charge(0, 1));
      out->push_back(Grammar::Ref(e.rule));
      return absl::OkStatus();
    case Expr::Kind::kSeq:
      for (const Expr& c : e.children) FLOE_RETURN_IF_ERROR(Append(c, name, out));
      return absl::OkStatus();
    case Expr::Kind::kAlt: {
      FLOE_RETURN_IF_ERROR(Charge(1, 1));
      const uint32_t rule = g_->AddRule(absl::StrCat(std::string(name), "-alt"));
      FLOE_RETURN_IF_ERROR(AddBody(rule, e, name));
      out->push_back(Grammar::Ref(rule));
      return absl::OkStatus();
    }
    case Expr::Kind::kRepeat: {
      if (e.max == 0) return absl::OkStatus();
      FLOE_ASSIGN_OR_RETURN(const Element item, ToElement(e.children[0], name));
      // Grammar::Repeat's tail costs a rule and two elements per optional
      // copy; a star two rules.
      const size_t optional = e.max < 0 ? 2 : static_cast<size_t>(e.max - e.min);
      FLOE_RETURN_IF_ERROR(Charge(optional + 1, e.min + 2 * optional + 1));
      AppendRepeat(item, e.min, e.max, name, out);
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown expression kind");
}

absl::StatusOr<Element> Lowering::ToElement(const Expr& e, std::string_view name) {
  Sequence seq;
  FLOE_RETURN_IF_ERROR(Append(e, name, &seq));
  if (seq.size() == 1) return seq[0];
  FLOE_RETURN_IF_ERROR(Charge(1, 0));
  return g_->Group(std::move(seq), absl::StrCat(std::string(name), "-group"));
}

absl::Status Lowering::AddBody(uint32_t rule, const Expr& e, std::string_view name) {
  if (e.kind != Expr::Kind::kAlt) {
    Sequence seq;
    FLOE_RETURN_IF_ERROR(Append(e, name, &seq));
    g_->AddAlternative(rule, std::move(seq));
    return absl::OkStatus();
  }
  for (const Expr& branch : e.children) {
    Sequence seq;
    FLOE_RETURN_IF_ERROR(Append(branch, name, &seq));
    g_->AddAlternative(rule, std::move(seq));
  }
  return absl::OkStatus();
}

namespace {

// Builds, for rules that match "" and more, rules matching the "more"
// part: for an alternative X1..Xn, L(X1..Xn) \ "" is the union over i, with
// X1..Xi-1 all nullable, of (Xi \ "") Xi+1..Xn.
class NonNullableBuilder {
 public:
  explicit NonNullableBuilder(Grammar* g) : g_(g) {
    const auto& rules = g->rules();
    nullable_ = g->NullableRules();
    // productive: derives some string; nonempty: some non-empty string.
    productive_.assign(rules.size(), false);
    nonempty_.assign(rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules.size(); ++r)
        for (const Sequence& alt : rules[r].alternatives) {
          if (!Productive(alt)) continue;
          if (!productive_[r]) productive_[r] = changed = true;
          bool some = false;
          for (const Element& e : alt) some = some || NonEmpty(e);
          if (some && !nonempty_[r]) nonempty_[r] = changed = true;
        }
    }
  }

  // Rules added after construction are Build's own: productive, non-empty
  // and not nullable by construction.
  bool Nullable(const Element& e) const {
    return e.kind == Element::Kind::kRule && e.index < nullable_.size() && nullable_[e.index];
  }

  // The rule for L(rule) \ "", or nullopt when that is empty. `stars`
  // maps each unbounded-repeat rule to its item: L(star) \ "" is
  // (item \ "") star, which keeps `star ::= item star` (left-recursive
  // while the item is nullable) out of the walk.
  absl::StatusOr<std::optional<uint32_t>> Build(uint32_t rule,
                                                const absl::flat_hash_map<uint32_t, uint32_t>& stars,
                                                int depth = 0) {
    if (rule >= nonempty_.size()) return rule;
    if (!nonempty_[rule]) return std::nullopt;
    if (auto it = memo_.find(rule); it != memo_.end()) return it->second;
    // The walk follows leftmost references, as deep as the grammar nests
    // them (repeat chains included): bound it rather than the stack.
    if (depth > kMaxDepth)
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar nests repetitions of optional items deeper than ", kMaxDepth, " rules"));
    // Registered before its body, so a left-recursive grammar (refused by
    // CheckIntegrity later) cannot recurse here forever.
    const uint32_t out = g_->AddRule(absl::StrCat(g_->rules()[rule].name, "-nonempty"));
    memo_[rule] = out;
    if (auto star = stars.find(rule); star != stars.end()) {
      FLOE_ASSIGN_OR_RETURN(const std::optional<uint32_t> item, Build(star->second, stars, depth + 1));
      // nonempty_[rule] implies the item matches something non-empty.
      if (item) g_->AddAlternative(out, {Grammar::Ref(*item), Grammar::Ref(rule)});
      return out;
    }
    const std::vector<Sequence> alternatives = g_->rules()[rule].alternatives;
    for (const Sequence& alt : alternatives) {
      if (!Productive(alt)) continue;
      for (size_t i = 0; i < alt.size(); ++i) {
        std::optional<Element> head;
        if (alt[i].kind == Element::Kind::kBytes) {
          head = alt[i];
        } else {
          FLOE_ASSIGN_OR_RETURN(const std::optional<uint32_t> sub, Build(alt[i].index, stars, depth + 1));
          if (sub) head = Grammar::Ref(*sub);
        }
        if (head) {
          Sequence seq{*head};
          seq.insert(seq.end(), alt.begin() + static_cast<std::ptrdiff_t>(i) + 1, alt.end());
          g_->AddAlternative(out, std::move(seq));
        }
        if (!Nullable(alt[i])) break;
      }
    }
    return out;
  }

 private:
  bool Productive(const Sequence& alt) const {
    for (const Element& e : alt)
      if (e.kind == Element::Kind::kBytes ? g_->byte_sets()[e.index].Empty()
                                          : e.index < productive_.size() && !productive_[e.index])
        return false;
    return true;
  }
  bool NonEmpty(const Element& e) const {
    if (e.kind == Element::Kind::kBytes) return !g_->byte_sets()[e.index].Empty();
    return e.index >= nonempty_.size() || nonempty_[e.index];
  }

  static constexpr int kMaxDepth = 4000;

  Grammar* g_;
  std::vector<bool> nullable_, productive_, nonempty_;
  absl::flat_hash_map<uint32_t, uint32_t> memo_;
};

}  // namespace

absl::Status Lowering::Finish() {
  if (stars_.empty()) return absl::OkStatus();
  NonNullableBuilder builder(g_);
  const absl::flat_hash_map<uint32_t, uint32_t> stars(stars_.begin(), stars_.end());
  for (const auto& [star, item] : stars_) {
    if (!builder.Nullable(Grammar::Ref(item))) continue;
    // Alternative 0 is {item, star} (Grammar::Star). When the item matches
    // only "", the star does too: both alternatives become "".
    absl::StatusOr<std::optional<uint32_t>> built = builder.Build(item, stars);
    if (!built.ok()) return absl::InvalidArgumentError(absl::StrCat(what_, ": ", built.status().message()));
    const std::optional<uint32_t> nonempty = *built;
    g_->SetAlternative(star, 0, nonempty ? Sequence{Grammar::Ref(*nonempty), Grammar::Ref(star)} : Sequence{});
    // At most one new rule per rule already there, but still counted.
    FLOE_RETURN_IF_ERROR(Charge(0, 0));
  }
  return absl::OkStatus();
}

}  // namespace floe::grammar
