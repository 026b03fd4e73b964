#include "services/suffix_cache/snapshot.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

SnapshotData Sample() {
  SnapshotData d;
  d.max_depth = 64;
  d.namespaces.push_back({"default", {{"r1", {1, 2, 3}}, {"r2", {}}}});
  d.namespaces.push_back({"tenant-b", {{"x", {7, 8, 9, 10}}}});
  return d;
}

TEST(SnapshotTest, RoundTrip) {
  auto d = DecodeSnapshot(EncodeSnapshot(Sample()));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->max_depth, 64u);
  ASSERT_EQ(d->namespaces.size(), 2u);
  EXPECT_EQ(d->namespaces[0].name, "default");
  ASSERT_EQ(d->namespaces[0].responses.size(), 2u);
  EXPECT_EQ(d->namespaces[0].responses[0].request_id, "r1");
  EXPECT_EQ(d->namespaces[0].responses[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d->namespaces[1].responses[0].tokens, (std::vector<int32_t>{7, 8, 9, 10}));
}

// Version 2 carries each response's sequence id and the tree images;
// version 1 files (neither) still decode.
TEST(SnapshotTest, VersionTwoCarriesImagesAndVersionOneStillLoads) {
  SnapshotData with = Sample();
  with.namespaces[0].responses[0].seq_id = 41;
  with.namespaces[0].tree_image = std::string("SXTI\0image", 10);
  auto v2 = DecodeSnapshot(EncodeSnapshot(with));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->namespaces[0].responses[0].seq_id, 41);
  EXPECT_EQ(v2->namespaces[0].responses[1].seq_id, -1);
  EXPECT_EQ(v2->namespaces[0].tree_image, with.namespaces[0].tree_image);
  EXPECT_TRUE(v2->namespaces[1].tree_image.empty());
  auto v1 = DecodeSnapshot(EncodeSnapshot(with, 1));
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->namespaces[0].responses[0].seq_id, -1);
  EXPECT_TRUE(v1->namespaces[0].tree_image.empty());
  EXPECT_EQ(v1->namespaces[1].responses[0].tokens, (std::vector<int32_t>{7, 8, 9, 10}));
}

TEST(SnapshotTest, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeSnapshot(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeSnapshot(absl::string_view(bytes).substr(0, n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << n;
  }
}

TEST(SnapshotTest, FlippedByteIsDataLoss) {
  const std::string bytes = EncodeSnapshot(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x5a;
    auto d = DecodeSnapshot(bad);
    EXPECT_FALSE(d.ok()) << i;
  }
  EXPECT_FALSE(DecodeSnapshot(bytes + "x").ok());
}

TEST(SnapshotTest, WriteFileAtomicallyReplaces) {
  const std::string dir = ::testing::TempDir() + "/snap_atomic";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/s.snap";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  auto read = ReadWholeFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "second");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  EXPECT_EQ(ReadWholeFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace floe::suffix_cache
