// Fuzzes SuffixTree::LoadImage (services/suffix_cache/suffix_tree), which
// restores a snapshot's tree image and promises "any bytes are safe to
// load": an accepted image can neither read out of bounds nor loop. The
// input is an image; the tree's max_depth is taken from the image header
// (1..256) so depth mismatches do not hide the rest.
// Invariants: an accepted image re-images to an image that loads and
// re-images identically; the integrity
// check terminates; the lookups the suffix-cache store runs on a restored
// tree (Contains/IsFinished/Tokens/SeqIds, Speculate, CountOccurrences) stay
// in bounds and terminate. On an image that also passes CheckIntegrity,
// every live sequence's tail is found by CountOccurrences, and the
// mutations the store goes on with (Remove of sequences, Extend and Finish
// of new ones) keep it passing, and removing every sequence empties it.
// Mutations are not run on images that pass LoadImage's O(size) checks but
// not CheckIntegrity: LoadImage does not promise those are consistent
// enough to mutate (docs/security.md, "Sanitizers and fuzzing");
// FLOE_FUZZ_IMAGE_MUTATE_ALL=1 runs them anyway, to hunt for what
// ValidateLoaded should check next.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe::suffix_cache {
namespace {

void CheckDraft(const Draft& d, const DraftParams& params) {
  FUZZ_CHECK(d.token_ids.size() == d.parents.size() && d.token_ids.size() == d.probs.size(),
             "draft arrays differ: %zu ids, %zu parents, %zu probs", d.token_ids.size(), d.parents.size(),
             d.probs.size());
  FUZZ_CHECK(static_cast<int>(d.token_ids.size()) <= params.max_spec_tokens, "draft of %zu tokens > %d",
             d.token_ids.size(), params.max_spec_tokens);
  for (size_t i = 0; i < d.parents.size(); ++i) {
    FUZZ_CHECK(d.parents[i] >= -1 && d.parents[i] < static_cast<int32_t>(i), "draft parent %d at %zu",
               d.parents[i], i);
  }
}

}  // namespace
}  // namespace floe::suffix_cache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe::suffix_cache;
  const absl::string_view image(reinterpret_cast<const char*>(data), size);
  uint32_t depth = 64;
  if (size >= 20) std::memcpy(&depth, data + 16, sizeof(depth));
  if (depth < 1 || depth > 256) depth = 64;
  SuffixTree tree(static_cast<int>(depth));
  if (!tree.LoadImage(image).ok()) {
    FUZZ_CHECK(tree.num_seqs() == 0 && tree.num_nodes() == 1, "a refused image left %d sequences, %lld nodes",
               tree.num_seqs(), static_cast<long long>(tree.num_nodes()));
    return 0;
  }
  // Re-imaging is a fixed point after one round (a flag byte of 91 loads as
  // true and is written back as 1, so the first round may normalize).
  std::string again;
  tree.AppendImage(&again);
  FUZZ_CHECK(again.size() == image.size(), "re-imaged %zu bytes as %zu bytes", image.size(), again.size());
  {
    SuffixTree copy(static_cast<int>(depth));
    FUZZ_CHECK(copy.LoadImage(again).ok(), "a tree's own image does not load");
    std::string third;
    copy.AppendImage(&third);
    FUZZ_CHECK(third == again, "image -> load -> image is not a fixed point");
  }
  const bool consistent = tree.CheckIntegrity().ok();

  DraftParams params;
  params.max_spec_tokens = 8;
  params.use_tree_spec = (size & 1) != 0;
  std::vector<int32_t> ids = tree.SeqIds();
  std::sort(ids.begin(), ids.end());
  FUZZ_CHECK(static_cast<int>(ids.size()) == tree.num_seqs(), "SeqIds has %zu of %d", ids.size(), tree.num_seqs());
  for (int32_t id : ids) {
    FUZZ_CHECK(tree.Contains(id), "SeqIds lists %d, Contains says no", id);
    const absl::Span<const int32_t> tokens = tree.Tokens(id);
    const std::vector<int32_t> context(tokens.end() - std::min<size_t>(tokens.size(), depth), tokens.end());
    CheckDraft(tree.Speculate(context, params), params);
    CheckDraft(tree.Speculate(context, params, tree.IsFinished(id) ? -1 : id), params);
    for (size_t len = 1; len <= context.size(); ++len) {
      const int64_t n = tree.CountOccurrences(absl::MakeConstSpan(context).subspan(context.size() - len));
      if (consistent) FUZZ_CHECK(n >= 1, "sequence %d's last %zu tokens occur %lld times", id, len, (long long)n);
    }
  }
  static const bool mutate_all = std::getenv("FLOE_FUZZ_IMAGE_MUTATE_ALL") != nullptr;
  if (!consistent && !mutate_all) return 0;
  // What the store does with a restored tree: drop some sequences, then keep
  // serving (new responses appended and finished, old ones evicted).
  for (size_t i = 0; i < ids.size(); i += 2) {
    FUZZ_CHECK(tree.Remove(ids[i]).ok(), "Remove(%d) of a listed sequence failed", ids[i]);
  }
  int32_t fresh = 0;
  while (tree.Contains(fresh)) ++fresh;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < std::min<size_t>(size, 64); ++i) tokens.push_back(data[i] % 5);
  tree.Extend(fresh, tokens);
  CheckDraft(tree.Speculate(tokens, params, fresh), params);
  tree.Finish(fresh);
  if (consistent) FUZZ_CHECK(tree.CheckIntegrity().ok(), "%s", tree.CheckIntegrity().ToString().c_str());
  for (int32_t id : tree.SeqIds()) FUZZ_CHECK(tree.Remove(id).ok(), "Remove(%d) failed", id);
  FUZZ_CHECK(tree.num_seqs() == 0, "%d sequences left", tree.num_seqs());
  if (!consistent) return 0;
  FUZZ_CHECK(tree.num_tokens() == 0 && tree.num_nodes() == 1, "empty tree holds %lld tokens, %lld nodes",
             static_cast<long long>(tree.num_tokens()), static_cast<long long>(tree.num_nodes()));
  FUZZ_CHECK(tree.CheckIntegrity().ok(), "%s", tree.CheckIntegrity().ToString().c_str());
  return 0;
}
