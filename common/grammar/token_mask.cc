#include "common/grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/mask_precompute.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace {

// Guards the static-frame walk; chains of unique returns are acyclic for
// reachable rules, and real grammars nest far less deep than this.
constexpr size_t kMaxStaticFrames = 256;
constexpr int kMaxRefineDepth = 64;

// The top position and the frames below it that every stack with that top
// shares: the returns of rules entered from only one place.
KnownStack StaticStack(const Program& program, uint32_t pos) {
  KnownStack stack;
  stack.positions.push_back(pos);
  uint32_t rule = program.rule_of(pos);
  while (stack.positions.size() <= kMaxStaticFrames) {
    const uint32_t ret = program.return_of(rule);
    if (ret == Program::kReturnsToRoot) {
      stack.rooted = true;
      break;
    }
    if (ret == Program::kReturnsToMany || ret == Program::kUnreached) break;
    stack.positions.push_back(ret);
    rule = program.rule_of(ret);
  }
  return stack;
}

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Create(const Grammar& grammar,
                                                                                std::shared_ptr<const TokenVocab> vocab,
                                                                                CompileOptions options) {
  if (options.refine_depth < 0 || options.refine_depth > kMaxRefineDepth)
    return absl::InvalidArgumentError(absl::StrCat("compile options: refine_depth is ", options.refine_depth,
                                                   "; it must lie in [0, ", kMaxRefineDepth, "]"));
  FLOE_ASSIGN_OR_RETURN(Program program, Program::Build(grammar));
  std::shared_ptr<CompiledGrammar> compiled(new CompiledGrammar(std::move(program), std::move(vocab), options));
  if (compiled->vocab_ != nullptr && options.precompute_all) {
    std::lock_guard<std::mutex> lock(compiled->mu_);
    for (uint32_t pos : compiled->program_.byte_positions()) compiled->ClassifyLocked(pos);
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(compiled));
}

CompiledGrammar::CompiledGrammar(Program program, std::shared_ptr<const TokenVocab> vocab, CompileOptions options)
    : program_(std::move(program)), vocab_(std::move(vocab)), options_(options) {
  masks_ = std::make_unique<std::atomic<const PositionMask*>[]>(program_.size());
  for (size_t i = 0; i < program_.size(); ++i) masks_[i].store(nullptr, std::memory_order_relaxed);
  if (vocab_ != nullptr) precompute_ = std::make_unique<MaskPrecompute>(&program_, vocab_.get());
}

CompiledGrammar::~CompiledGrammar() = default;

const PositionMask& CompiledGrammar::Classified(uint32_t pos) const {
  if (const PositionMask* mask = masks_[pos].load(std::memory_order_acquire)) return *mask;
  std::lock_guard<std::mutex> lock(mu_);
  return ClassifyLocked(pos);
}

const PositionMask& CompiledGrammar::ClassifyLocked(uint32_t pos) const {
  if (const PositionMask* mask = masks_[pos].load(std::memory_order_relaxed)) return *mask;
  const auto start = std::chrono::steady_clock::now();
  owned_masks_.push_back(std::make_unique<PositionMask>(MakePositionMask(pos)));
  precompute_ms_ += MillisSince(start);
  masks_[pos].store(owned_masks_.back().get(), std::memory_order_release);
  return *owned_masks_.back();
}

PositionMask CompiledGrammar::MakePositionMask(uint32_t pos) const {
  const KnownStack stack = StaticStack(program_, pos);
  TokenClasses classes = precompute_->ClassifyAll(stack);
  PositionMask mask;
  mask.static_frames = static_cast<uint32_t>(stack.positions.size() - 1);
  mask.uncertain = std::move(classes.uncertain);
  mask.accepted_count = static_cast<uint32_t>(classes.accepted.size());
  // Lists cost a scattered write per id, the bitset a sequential OR per
  // word: a list wins below about a quarter of the words.
  const size_t words = vocab_->mask_words();
  const size_t rejected = static_cast<size_t>(vocab_->size()) - classes.accepted.size();
  std::vector<uint32_t> data;
  if (classes.accepted.size() <= words / 4) {
    mask.kind = PositionMask::Kind::kAcceptList;
    data.assign(classes.accepted.begin(), classes.accepted.end());
    std::sort(data.begin(), data.end());
  } else if (rejected <= words / 4) {
    mask.kind = PositionMask::Kind::kRejectList;
    std::vector<uint32_t> bits(words, 0);
    for (int32_t id : classes.accepted) SetTokenBit(bits.data(), id);
    for (int32_t id = 0; id < vocab_->size(); ++id)
      if (!TokenBit(bits.data(), id)) data.push_back(static_cast<uint32_t>(id));
  } else {
    mask.kind = PositionMask::Kind::kBitset;
    data.assign(words, 0);
    for (int32_t id : classes.accepted) SetTokenBit(data.data(), id);
  }
  mask.data = &*mask_data_.insert(std::move(data)).first;
  return mask;
}

const Refinement* CompiledGrammar::Refine(absl::Span<const uint32_t> frames, bool rooted) const {
  std::vector<uint32_t> key(frames.begin(), frames.end());
  key.push_back(rooted ? 1 : 0);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = refinements_.find(key);
  if (it != refinements_.end()) return it->second.get();
  if (refinements_.size() >= options_.max_refinements) return nullptr;
  const PositionMask& base = ClassifyLocked(frames[0]);
  const auto start = std::chrono::steady_clock::now();
  KnownStack stack{std::vector<uint32_t>(frames.begin(), frames.end()), rooted};
  TokenClasses classes = precompute_->ClassifySome(stack, base.uncertain);
  auto refinement = std::make_unique<Refinement>();
  refinement->uncertain = std::move(classes.uncertain);
  if (classes.accepted.size() <= vocab_->mask_words() / 4) {
    refinement->accepted = std::move(classes.accepted);
  } else {
    refinement->accepted_bits.assign(vocab_->mask_words(), 0);
    for (int32_t id : classes.accepted) SetTokenBit(refinement->accepted_bits.data(), id);
  }
  precompute_ms_ += MillisSince(start);
  return refinements_.emplace(std::move(key), std::move(refinement)).first->second.get();
}

const std::vector<uint32_t>* CompiledGrammar::Union(absl::Span<const uint32_t> positions) const {
  std::vector<uint32_t> key(positions.begin(), positions.end());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = unions_.find(key);
  if (it != unions_.end()) return it->second.get();
  const size_t bytes = vocab_->mask_words() * sizeof(uint32_t);
  if (union_bytes_ + bytes > options_.max_union_bytes) return nullptr;
  auto words = std::make_unique<std::vector<uint32_t>>(vocab_->mask_words(), 0);
  std::vector<uint32_t> scratch;
  for (uint32_t pos : positions) AddPositionMask(ClassifyLocked(pos), *vocab_, words->data(), &scratch);
  union_bytes_ += bytes;
  return unions_.emplace(std::move(key), std::move(words)).first->second.get();
}

CompiledGrammarStats CompiledGrammar::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompiledGrammarStats s;
  s.positions = program_.byte_positions().size();
  s.classified = owned_masks_.size();
  s.refinements = refinements_.size();
  s.unions = unions_.size();
  s.precompute_ms = precompute_ms_;
  s.memory_bytes = sizeof(*this) + program_.MemoryBytes() + program_.size() * sizeof(std::atomic<const PositionMask*>);
  for (const auto& m : owned_masks_) s.memory_bytes += sizeof(PositionMask) + m->uncertain.capacity() * 4;
  for (const auto& data : mask_data_) s.memory_bytes += sizeof(data) + data.capacity() * 4;
  for (const auto& [key, r] : refinements_)
    s.memory_bytes += key.capacity() * 4 + sizeof(Refinement) +
                      (r->accepted.capacity() + r->accepted_bits.capacity() + r->uncertain.capacity()) * 4;
  s.memory_bytes += union_bytes_ + unions_.size() * (sizeof(std::vector<uint32_t>) * 2 + 16);
  for (const auto& [key, words] : unions_) s.memory_bytes += key.capacity() * 4;
  if (precompute_ != nullptr) s.memory_bytes += precompute_->MemoryBytes();
  return s;
}

void WritePositionMask(const PositionMask& mask, const TokenVocab& vocab, uint32_t* bitmask) {
  const size_t words = vocab.mask_words();
  switch (mask.kind) {
    case PositionMask::Kind::kAcceptList:
      std::fill(bitmask, bitmask + words, 0);
      for (uint32_t id : *mask.data) SetTokenBit(bitmask, static_cast<int32_t>(id));
      break;
    case PositionMask::Kind::kBitset:
      std::copy(mask.data->begin(), mask.data->end(), bitmask);
      break;
    case PositionMask::Kind::kRejectList:
      std::fill(bitmask, bitmask + words, ~uint32_t{0});
      if (words > 0 && vocab.size() % 32 != 0) bitmask[words - 1] = (uint32_t{1} << (vocab.size() % 32)) - 1;
      for (uint32_t id : *mask.data) bitmask[id >> 5] &= ~(uint32_t{1} << (id & 31));
      break;
  }
}

void AddPositionMask(const PositionMask& mask, const TokenVocab& vocab, uint32_t* bitmask,
                     std::vector<uint32_t>* scratch) {
  const size_t words = vocab.mask_words();
  switch (mask.kind) {
    case PositionMask::Kind::kAcceptList:
      for (uint32_t id : *mask.data) SetTokenBit(bitmask, static_cast<int32_t>(id));
      break;
    case PositionMask::Kind::kBitset:
      for (size_t w = 0; w < words; ++w) bitmask[w] |= (*mask.data)[w];
      break;
    case PositionMask::Kind::kRejectList:
      scratch->resize(words);
      WritePositionMask(mask, vocab, scratch->data());
      for (size_t w = 0; w < words; ++w) bitmask[w] |= (*scratch)[w];
      break;
  }
}

}  // namespace floe::grammar
