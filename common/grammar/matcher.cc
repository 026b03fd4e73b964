#include "common/grammar/matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/mask_precompute.h"

namespace floe::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options)
    : grammar_(std::move(grammar)),
      options_(options),
      stepper_(&grammar_->program()),
      compact_threshold_(options.compact_after_nodes) {
  options_.max_rollback = std::max(options_.max_rollback, 0);
  history_.resize(static_cast<size_t>(options_.max_rollback));
  if (grammar_->vocab() != nullptr) walk_.resize(grammar_->vocab()->max_token_bytes() + 1);
  Reset();
}

void GrammarMatcher::Reset() {
  arena_.Clear();
  stack_tokens_.clear();
  history_head_ = history_count_ = 0;
  stepper_.StartRule(arena_, grammar_->program().root(), &state_);
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  const Frontier* cur = &state_;
  Frontier* next = &scratch_a_;
  Frontier* spare = &scratch_b_;
  for (char c : bytes) {
    stepper_.Step(arena_, cur->tops, static_cast<uint8_t>(c), next);
    if (next->Dead()) return false;
    cur = next;
    std::swap(next, spare);
  }
  PushHistory();
  if (!bytes.empty()) std::swap(state_, *spare);  // the last result
  MaybeCompact();
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const TokenVocab* vocab = grammar_->vocab();
  if (vocab == nullptr || !vocab->allowed(id)) return false;
  return AcceptBytes(vocab->bytes(id));
}

void GrammarMatcher::PushHistory() {
  if (history_.empty()) return;
  const int size = static_cast<int>(history_.size());
  if (history_count_ == size) {
    history_head_ = (history_head_ + 1) % size;
    --history_count_;
  }
  history_[(history_head_ + history_count_) % size] = state_;  // reuses the slot's capacity
  ++history_count_;
}

absl::Status GrammarMatcher::Rollback(int steps) {
  if (steps < 0 || steps > history_count_)
    return absl::InvalidArgumentError(absl::StrCat("grammar matcher: rollback of ", steps, " steps; ", history_count_,
                                                   " can be undone (max_rollback is ", options_.max_rollback, ")"));
  if (steps == 0) return absl::OkStatus();
  history_count_ -= steps;
  std::swap(state_, history_[(history_head_ + history_count_) % history_.size()]);
  return absl::OkStatus();
}

std::string GrammarMatcher::ForcedBytes(size_t max) const {
  std::string forced;
  const Frontier* cur = &state_;
  Frontier* next = &scratch_a_;
  Frontier* spare = &scratch_b_;
  while (forced.size() < max && !cur->reached_root && !cur->tops.empty()) {
    const ByteSet bytes = stepper_.NextBytes(arena_, cur->tops);
    if (bytes.Count() != 1) break;
    int b = 0;
    while (!bytes.Has(static_cast<uint8_t>(b))) ++b;
    stepper_.Step(arena_, cur->tops, static_cast<uint8_t>(b), next);
    forced.push_back(static_cast<char>(b));
    cur = next;
    std::swap(next, spare);
  }
  return forced;
}

void GrammarMatcher::FillNextTokenMask(uint32_t* bitmask) {
  if (grammar_->vocab() == nullptr) return;  // no vocabulary, no mask words
  const TokenVocab& vocab = *grammar_->vocab();
  const size_t words = vocab.mask_words();
  ++stats_.masks;
  // Stacks that share a top position share its classification.
  positions_.clear();
  for (uint32_t top : state_.tops) positions_.push_back(arena_.pos(top));
  std::sort(positions_.begin(), positions_.end());
  positions_.erase(std::unique(positions_.begin(), positions_.end()), positions_.end());
  if (positions_.size() == 1) {
    WritePositionMask(grammar_->Classified(positions_[0]), vocab, bitmask);
  } else {
    // Several large masks (inside a string: each kind of UTF-8 lead byte
    // is a top) cost a pass over the vocabulary each; their union is
    // cached, so the common case is one copy.
    size_t list_ids = 0, large = 0;
    for (uint32_t pos : positions_) {
      const PositionMask& mask = grammar_->Classified(pos);
      if (mask.kind == PositionMask::Kind::kAcceptList) {
        list_ids += mask.data->size();
      } else {
        ++large;
      }
    }
    const std::vector<uint32_t>* combined = nullptr;
    if (large >= 2 || (large == 1 && list_ids > words / 4)) {
      // A local map in front of the shared one keeps the grammar's lock
      // off the steady state.
      auto it = unions_.find(positions_);
      if (it == unions_.end()) it = unions_.emplace(positions_, grammar_->Union(positions_)).first;
      combined = it->second;
    }
    if (combined != nullptr) {
      std::copy(combined->begin(), combined->end(), bitmask);
    } else {
      std::fill(bitmask, bitmask + words, 0);
      for (uint32_t pos : positions_) AddPositionMask(grammar_->Classified(pos), vocab, bitmask, &scratch_bits_);
    }
  }
  for (uint32_t top : state_.tops) {
    const PositionMask& mask = grammar_->Classified(arena_.pos(top));
    if (mask.uncertain.empty()) continue;
    const StackTokens& tokens = ResolveUncertain(top, mask);
    if (tokens.shared != nullptr) {
      for (int32_t id : tokens.shared->accepted) SetTokenBit(bitmask, id);
      const std::vector<uint32_t>& bits = tokens.shared->accepted_bits;
      for (size_t w = 0; w < bits.size(); ++w) bitmask[w] |= bits[w];
    }
    for (int32_t id : tokens.own) SetTokenBit(bitmask, id);
  }
}

const GrammarMatcher::StackTokens& GrammarMatcher::ResolveUncertain(uint32_t top, const PositionMask& mask) {
  auto it = stack_tokens_.find(top);
  if (it != stack_tokens_.end()) return it->second;
  // The frames the classification knew, then up to refine_depth more.
  frames_.assign(1, arena_.pos(top));
  const size_t limit = 1 + mask.static_frames + static_cast<size_t>(grammar_->options().refine_depth);
  uint32_t node = arena_.parent(top);
  while (node != kRootNode && frames_.size() < limit) {
    frames_.push_back(arena_.pos(node));
    node = arena_.parent(node);
  }
  const bool rooted = node == kRootNode;
  StackTokens tokens;
  tokens.shared = grammar_->Refine(frames_, rooted);
  const std::vector<int32_t>& rest = tokens.shared != nullptr ? tokens.shared->uncertain : mask.uncertain;
  if (!rest.empty()) tokens.own = CheckAgainstStack(top, rest);
  return stack_tokens_.emplace(top, std::move(tokens)).first->second;
}

std::vector<int32_t> GrammarMatcher::CheckAgainstStack(uint32_t top, const std::vector<int32_t>& candidates) {
  std::vector<int32_t> accepted;
  const TokenVocab& vocab = *grammar_->vocab();
  stats_.stack_checked_tokens += candidates.size();
  walk_[0].Clear();
  walk_[0].tops.push_back(top);
  WalkSortedTokens(
      vocab, candidates,
      [&](size_t d, uint8_t byte) {
        stepper_.Step(arena_, walk_[d].tops, byte, &walk_[d + 1]);
        return !walk_[d + 1].Dead();
      },
      [&](int32_t id, size_t d) {
        if (d == vocab.bytes(id).size() && !walk_[d].Dead()) accepted.push_back(id);
      });
  return accepted;
}

void GrammarMatcher::MaybeCompact() {
  if (arena_.size() <= compact_threshold_) return;
  // Re-intern every node the state or the history still reaches, parents
  // first, into a fresh arena; everything else (dead branches, expansions
  // of abandoned drafts) is dropped.
  NodeArena fresh;
  absl::flat_hash_map<uint32_t, uint32_t> moved;
  std::vector<uint32_t> path;
  const auto move = [&](uint32_t node) {
    path.clear();
    for (uint32_t n = node; n > kUnknownNode && !moved.contains(n); n = arena_.parent(n)) path.push_back(n);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const uint32_t parent = arena_.parent(*it);
      moved[*it] = fresh.Intern(arena_.pos(*it), parent <= kUnknownNode ? parent : moved.at(parent));
    }
    return node <= kUnknownNode ? node : moved.at(node);
  };
  const auto rewrite = [&](Frontier* f) {
    for (uint32_t& top : f->tops) top = move(top);
    std::sort(f->tops.begin(), f->tops.end());
  };
  rewrite(&state_);
  for (int i = 0; i < history_count_; ++i) rewrite(&history_[(history_head_ + i) % history_.size()]);
  arena_ = std::move(fresh);
  stack_tokens_.clear();
  compact_threshold_ = std::max(options_.compact_after_nodes, 2 * arena_.size());
}

}  // namespace floe::grammar
