// Snapshot restore through tree images (SuffixCacheStore::ImportSnapshot):
// an image restores the exact tree (same drafts as the store that wrote it),
// drops the requests that were still active, honours a smaller response
// bound, and a damaged or missing image falls back to a rebuild from tokens.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_store.h"
#include "tests/services/suffix_cache/service/step_item.h"

namespace floe::suffix_cache {
namespace {

StepItem Item(const std::string& ns, const std::string& id, int64_t offset, absl::Span<const int32_t> appended) {
  StepItem item = MakeStepItem(ns, id, offset, appended, /*speculate=*/true);
  item.params.max_spec_tokens = 12;
  return item;
}

// Responses made of shared phrases, so the trees have real branching, ties
// and runs; two namespaces; `active` requests are left running.
void Fill(SuffixCacheStore& store, int responses, int active, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> phrases(12);
  for (auto& p : phrases) {
    for (int i = 0; i < 6 + static_cast<int>(rng() % 10); ++i) p.push_back(static_cast<int32_t>(rng() % 50));
  }
  for (int r = 0; r < responses + active; ++r) {
    const std::string ns = r % 3 == 0 ? "tenant-b" : "default";
    const std::string id = "r" + std::to_string(r);
    ASSERT_TRUE(store.StartRequest(ns, id, phrases[rng() % phrases.size()]).ok());
    std::vector<int32_t> out;
    for (int k = 0; k < 6; ++k) {
      const auto& p = phrases[rng() % phrases.size()];
      out.insert(out.end(), p.begin(), p.end());
    }
    ASSERT_TRUE(store.Step({Item(ns, id, 0, out)})[0].status.ok());
    if (r < responses) ASSERT_TRUE(store.EndRequest(ns, id).ok());
  }
}

// The snapshot a version 1 writer would have made: tokens only.
SnapshotData WithoutImages(SnapshotData snap) {
  for (auto& ns : snap.namespaces) ns.tree_image.clear();
  return snap;
}

// The drafts a fresh batch of requests gets, step by step.
std::vector<std::vector<int32_t>> Probe(SuffixCacheStore& store, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> drafts;
  for (int q = 0; q < 12; ++q) {
    const std::string ns = q % 2 ? "tenant-b" : "default";
    const std::string id = "probe" + std::to_string(q);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 4; ++i) prompt.push_back(static_cast<int32_t>(rng() % 50));
    EXPECT_TRUE(store.StartRequest(ns, id, prompt).ok());
    int64_t offset = 0;
    std::vector<int32_t> next;
    for (int step = 0; step < 8; ++step) {
      StepOutcome o = store.Step({Item(ns, id, offset, next)})[0];
      EXPECT_TRUE(o.status.ok()) << o.status;
      offset += static_cast<int64_t>(next.size());
      drafts.push_back(o.draft.token_ids);
      next = o.draft.token_ids.empty() ? std::vector<int32_t>{static_cast<int32_t>(rng() % 50)}
                                       : std::vector<int32_t>(o.draft.token_ids.begin(),
                                                              o.draft.token_ids.begin() + 1 + rng() % o.draft.token_ids.size());
    }
    EXPECT_TRUE(store.EndRequest(ns, id).ok());
  }
  return drafts;
}

TEST(StoreSnapshotTest, ImageRestoresTheExactTree) {
  StoreOptions so;
  SuffixCacheStore original(so);
  Fill(original, 60, 0, 1);
  for (const std::string id : {"empty-a", "empty-b"}) {  // ended before any token
    ASSERT_TRUE(original.StartRequest("default", id, {1, 2}).ok());
    ASSERT_TRUE(original.EndRequest("default", id).ok());
  }
  const SnapshotData snap = original.ExportSnapshot();
  ASSERT_EQ(snap.namespaces.size(), 2u);
  for (const auto& ns : snap.namespaces) EXPECT_FALSE(ns.tree_image.empty());
  SuffixCacheStore restored(so);
  const auto report = restored.ImportSnapshot(DecodeSnapshot(EncodeSnapshot(snap)).value());
  EXPECT_EQ(report.namespaces_from_image, 2);
  EXPECT_EQ(report.namespaces_rebuilt, 0);
  EXPECT_TRUE(report.image_problems.empty());
  EXPECT_EQ(restored.Stats().cached_tokens, original.Stats().cached_tokens);
  EXPECT_EQ(restored.Stats().nodes, original.Stats().nodes);
  // The same later traffic gets the same drafts, ties included.
  const auto drafts = Probe(original, 9);
  EXPECT_EQ(Probe(restored, 9), drafts);
  int drafted = 0;
  for (const auto& d : drafts) drafted += !d.empty();
  EXPECT_GT(drafted, 20);  // the probe does exercise the global trees
}

// Requests still active at export are not cached: the image's copies of
// their partial responses are removed, leaving the tree a rebuild from the
// cached tokens has (same shape and counts; sibling order may differ).
TEST(StoreSnapshotTest, ImageDropsActiveRequestsAndMatchesARebuild) {
  StoreOptions so;
  SuffixCacheStore original(so);
  Fill(original, 50, 7, 2);
  SnapshotData snap = original.ExportSnapshot();
  const SnapshotData tokens_only = WithoutImages(snap);
  SuffixCacheStore from_image(so), rebuilt(so);
  EXPECT_EQ(from_image.ImportSnapshot(snap).namespaces_from_image, 2);
  const auto report = rebuilt.ImportSnapshot(tokens_only);
  EXPECT_EQ(report.namespaces_rebuilt, 2);
  EXPECT_TRUE(report.image_problems.empty());  // no image is not a problem
  const StoreStats a = from_image.Stats(), b = rebuilt.Stats();
  EXPECT_EQ(a.cached, 50);
  EXPECT_EQ(a.cached, b.cached);
  EXPECT_EQ(a.cached_tokens, b.cached_tokens);
  EXPECT_EQ(a.nodes, b.nodes);
  // New requests start cleanly on both (seq ids do not collide).
  for (SuffixCacheStore* s : {&from_image, &rebuilt}) {
    ASSERT_TRUE(s->StartRequest("default", "new", {1, 2, 3}).ok());
    ASSERT_TRUE(s->Step({Item("default", "new", 0, std::vector<int32_t>{4, 5, 6})})[0].status.ok());
    ASSERT_TRUE(s->EndRequest("default", "new").ok());
    EXPECT_EQ(s->Stats().cached, 51);
  }
}

TEST(StoreSnapshotTest, SmallerBoundKeepsTheNewestFromTheImage) {
  StoreOptions so;
  SuffixCacheStore original(so);
  Fill(original, 40, 0, 3);
  const SnapshotData snap = original.ExportSnapshot();
  StoreOptions small = so;
  small.max_cached_responses = 5;
  const SnapshotData tokens_only = WithoutImages(snap);
  SuffixCacheStore from_image(small), rebuilt(small);
  EXPECT_EQ(from_image.ImportSnapshot(snap).namespaces_from_image, 2);
  rebuilt.ImportSnapshot(tokens_only);
  EXPECT_EQ(from_image.Stats().cached, 10);
  EXPECT_EQ(from_image.Stats().cached_tokens, rebuilt.Stats().cached_tokens);
  EXPECT_EQ(from_image.Stats().nodes, rebuilt.Stats().nodes);
}

TEST(StoreSnapshotTest, DamagedOrForeignImageFallsBackToARebuild) {
  StoreOptions so;
  SuffixCacheStore original(so);
  Fill(original, 30, 0, 4);
  const SnapshotData snap = original.ExportSnapshot();
  const SnapshotData tokens_only = WithoutImages(snap);
  SuffixCacheStore rebuilt(so);
  rebuilt.ImportSnapshot(tokens_only);

  SnapshotData damaged = snap;
  damaged.namespaces[0].tree_image.resize(damaged.namespaces[0].tree_image.size() / 2);  // truncated
  damaged.namespaces[1].responses[0].tokens.push_back(7);  // image no longer holds it
  SuffixCacheStore restored(so);
  const auto report = restored.ImportSnapshot(damaged);
  EXPECT_EQ(report.namespaces_from_image, 0);
  EXPECT_EQ(report.namespaces_rebuilt, 2);
  ASSERT_EQ(report.image_problems.size(), 2u);
  EXPECT_EQ(restored.Stats().cached_tokens, rebuilt.Stats().cached_tokens + 1);

  StoreOptions no_images = so;
  no_images.max_image_bytes_per_token = 0;  // images off: tokens only
  SuffixCacheStore writer(no_images);
  Fill(writer, 30, 0, 4);
  for (const auto& ns : writer.ExportSnapshot().namespaces) EXPECT_TRUE(ns.tree_image.empty());

  StoreOptions deeper = so;
  deeper.max_depth = 32;  // another depth: the image does not apply
  SuffixCacheStore other(deeper);
  const auto r2 = other.ImportSnapshot(snap);
  EXPECT_EQ(r2.namespaces_rebuilt, 2);
  EXPECT_NE(r2.image_problems[0].find("max_depth"), std::string::npos) << r2.image_problems[0];
  EXPECT_EQ(other.Stats().cached, rebuilt.Stats().cached);
}

}  // namespace
}  // namespace floe::suffix_cache
