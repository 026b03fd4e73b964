#include "common/tokenizer/bpe_model.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace floe {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
// Pieces up to this many bytes use the quadratic scan, which beats a heap on
// the short pieces that make up almost all text.
constexpr size_t kSmallPiece = 48;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const Options& options) {
  std::unique_ptr<BpeModel> model(new BpeModel);
  model->vocab_ = std::move(vocab);
  model->options_ = options;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    auto it = model->vocab_.find(absl::string_view(&c, 1));
    model->byte_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
    it = model->vocab_.find(absl::StrCat("<0x", absl::AsciiStrToUpper(absl::StrCat(absl::Hex(b, absl::kZeroPad2))), ">"));
    model->byte_fallback_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
  }
  model->merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = model->vocab_.find(left);
    auto r = model->vocab_.find(right);
    joined.assign(left).append(right);
    auto m = model->vocab_.find(joined);
    if (l == model->vocab_.end() || r == model->vocab_.end() || m == model->vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.merges[", rank, "]: token '", left, "', '", right, "' or their "
                       "concatenation is not in model.vocab"));
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                         static_cast<uint32_t>(r->second);
    model->merges_.insert_or_assign(key, Merge{static_cast<int32_t>(rank), m->second});
  }
  return model;
}

std::optional<int32_t> BpeModel::Find(absl::string_view bytes) const {
  auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::Encode(absl::string_view piece, Scratch* s, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges || (piece.size() == 1 && options_.byte_level)) {
    if (piece.size() == 1 && options_.byte_level) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
      if (id >= 0) out->push_back(id);
      return;
    }
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (piece.size() <= PieceCache::kMaxPieceBytes && cache_.Lookup(piece, out)) return;
  const size_t first = out->size();
  s->ids.clear();
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) s->ids.push_back(id);
    }
  } else {
    InitialCharSymbols(piece, &s->ids);
  }
  if (s->ids.size() <= kSmallPiece) {
    MergeSmall(s, out);
  } else {
    MergeLarge(s, out);
  }
  cache_.Insert(piece, out->data() + first, out->size() - first);
}

// Mirrors Hugging Face's BPE::merge_word, including where a pending unknown
// token is flushed (not before byte-fallback tokens).
void BpeModel::InitialCharSymbols(absl::string_view piece, std::vector<int32_t>* ids) const {
  bool unk_pending = false;
  for (size_t i = 0; i < piece.size();) {
    const auto lead = static_cast<uint8_t>(piece[i]);
    const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    const absl::string_view c = piece.substr(i, len);
    i += len;
    auto it = vocab_.find(c);
    if (it != vocab_.end()) {
      if (unk_pending) ids->push_back(*options_.unk_id);
      unk_pending = false;
      ids->push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char b : c) all = all && byte_fallback_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        for (char b : c) ids->push_back(byte_fallback_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (!options_.unk_id) continue;
    if (unk_pending && !options_.fuse_unk) ids->push_back(*options_.unk_id);
    unk_pending = true;
  }
  if (unk_pending) ids->push_back(*options_.unk_id);
}

void BpeModel::MergeSmall(Scratch* s, std::vector<int32_t>* out) const {
  std::vector<int32_t>& ids = s->ids;
  // ranks[i] / merged[i]: the merge of pair (ids[i], ids[i+1]), if any.
  std::vector<int32_t>& ranks = s->ranks;
  std::vector<int32_t>& merged = s->merged;
  const auto update = [&](size_t i) {
    const Merge* m = FindMerge(ids[i], ids[i + 1]);
    ranks[i] = m == nullptr ? kNoRank : m->rank;
    merged[i] = m == nullptr ? -1 : m->merged_id;
  };
  size_t n = ids.size();
  ranks.resize(n);
  merged.resize(n);
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (n > 1) {
    size_t best = 0;
    int32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) update(best);
    if (best > 0) update(best - 1);
  }
  out->insert(out->end(), ids.begin(), ids.begin() + n);
}

// Linked list of symbols plus a min-heap of candidate merges ordered by
// (rank, position): the same order as Hugging Face's BPE, so ties between
// overlapping equal pairs resolve to the leftmost one.
void BpeModel::MergeLarge(Scratch* s, std::vector<int32_t>* out) const {
  std::vector<int32_t>& ids = s->ids;
  const int32_t n = static_cast<int32_t>(ids.size());
  s->prev.resize(n);
  s->next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s->prev[i] = i - 1;
    s->next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto& heap = s->heap;
  heap.clear();
  const auto cmp = [](const Scratch::Candidate& a, const Scratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  const auto push = [&](int32_t pos) {
    const int32_t nx = s->next[pos];
    if (nx < 0) return;
    const Merge* m = FindMerge(ids[pos], ids[nx]);
    if (m == nullptr) return;
    heap.push_back({m->rank, pos, ids[pos], ids[nx], m->merged_id});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Scratch::Candidate c = heap.back();
    heap.pop_back();
    const int32_t nx = s->next[c.pos];
    // Stale entries: the left symbol was absorbed (ids[pos] == -1) or either side changed.
    if (ids[c.pos] != c.left || nx < 0 || ids[nx] != c.right) continue;
    ids[c.pos] = c.merged;
    ids[nx] = -1;
    const int32_t after = s->next[nx];
    s->next[c.pos] = after;
    if (after >= 0) s->prev[after] = c.pos;
    if (s->prev[c.pos] >= 0) push(s->prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = s->next[i]) out->push_back(ids[i]);
}

}  // namespace floe
