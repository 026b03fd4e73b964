// The weight cache file against its oracle, PackMatrix: what a writer packs
// in place and Open maps back is byte for byte what PackMatrix gives, and
// every file that is not exactly for its key is refused, never used.
#include "services/worker/backend/weight_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

struct Source {
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  std::vector<uint8_t> bytes;   // 8-bit types
  std::vector<float> scales;    // their row scales
  TensorView view;
};

Source RandomMatrix(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  Source s;
  std::mt19937 rng(seed);
  if (dtype == DType::kBF16) {
    s.bf16.resize(n * k);
    for (uint16_t& x : s.bf16) x = static_cast<uint16_t>(rng());
    s.view.data = s.bf16.data();
  } else if (IsQuantized(dtype)) {
    s.bytes.resize(n * k);
    for (uint8_t& x : s.bytes) x = static_cast<uint8_t>(rng() & 0xBF);  // no NaN codes
    s.scales.resize(n);
    for (float& x : s.scales) x = std::uniform_real_distribution<float>(0.001f, 1)(rng);
    s.view.data = s.bytes.data();
    s.view.row_scale = s.scales.data();
  } else {
    s.f32.resize(n * k);
    for (float& x : s.f32) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    s.view.data = s.f32.data();
  }
  s.view.dtype = dtype;
  s.view.shape = {n, k};
  return s;
}

class WeightCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("floe-weight-cache-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    // Odd shapes: padding rows, an odd k, one matrix smaller than a panel.
    // 8-bit matrices carry their row scales inside the packing.
    shapes_ = {{DType::kBF16, 37, 21}, {DType::kBF16, 64, 64}, {DType::kF32, 5, 3}, {DType::kF32, 130, 17},
               {DType::kI8, 40, 22}, {DType::kF8E4M3, 17, 9}};
    for (size_t i = 0; i < shapes_.size(); ++i)
      sources_.push_back(RandomMatrix(shapes_[i].dtype, shapes_[i].n, shapes_[i].k, 7 + i));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path() const { return (dir_ / WeightCacheFile::FileName("key")).string(); }

  // Packs every source into a new file for `key` and commits it, the
  // folder bounded to folder_max_bytes; `evicted` gets what Create deleted.
  void WriteFile(const std::string& key, uint64_t folder_max_bytes = UINT64_MAX,
                 std::vector<std::string>* evicted = nullptr) {
    auto writer = WeightCacheWriter::Create(Path(), key, shapes_, folder_max_bytes);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const absl::Status s = (*writer)->Write(i, cpu::PackMatrix({&sources_[i].view, 1}, pool_));
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE((*writer)->Commit().ok());
    if (evicted) *evicted = (*writer)->evicted();
  }

  fs::path dir_;
  std::vector<WeightCacheWriter::Shape> shapes_;
  std::vector<Source> sources_;
  cpu::ThreadPool pool_{2};
};

// PackMatrixInto a caller's buffer gives PackMatrix's bytes.
TEST_F(WeightCacheTest, PackMatrixIntoEqualsPackMatrix) {
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const cpu::PackedMatrix expected = cpu::PackMatrix({&sources_[i].view, 1}, pool_);
    std::vector<uint8_t> buffer(expected.bytes() + 64, 0xAB);  // dirty: padding must be zeroed
    void* dest = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
    const cpu::PackedMatrix into = cpu::PackMatrixInto({&sources_[i].view, 1}, pool_, dest, nullptr);
    ASSERT_EQ(into.bytes(), expected.bytes());
    EXPECT_EQ(0, std::memcmp(into.data(), expected.data(), expected.bytes())) << i;
  }
}

TEST_F(WeightCacheTest, MappedMatricesAreWhatPackMatrixGives) {
  WriteFile("key");
  auto cache = WeightCacheFile::Open(Path(), "key");
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_EQ((*cache)->size(), static_cast<int>(shapes_.size()));
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const cpu::PackedMatrix expected = cpu::PackMatrix({&sources_[i].view, 1}, pool_);
    auto mapped = (*cache)->Matrix(i, shapes_[i].dtype, shapes_[i].n, shapes_[i].k);
    ASSERT_TRUE(mapped.has_value()) << i;
    ASSERT_EQ(mapped->bytes(), expected.bytes()) << i;
    EXPECT_EQ(0, std::memcmp(mapped->data(), expected.data(), expected.bytes())) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mapped->data()) % 64, 0u) << i;
    if (IsQuantized(shapes_[i].dtype)) {
      ASSERT_NE(mapped->scales(), nullptr);
      for (int64_t r = 0; r < shapes_[i].n; ++r) EXPECT_EQ(mapped->scales()[r], sources_[i].scales[r]) << i;
    }
  }
  // The views outlive the file object (they hold the mapping).
  auto view = (*cache)->Matrix(0, shapes_[0].dtype, shapes_[0].n, shapes_[0].k);
  cache->reset();
  const cpu::PackedMatrix expected = cpu::PackMatrix({&sources_[0].view, 1}, pool_);
  EXPECT_EQ(0, std::memcmp(view->data(), expected.data(), expected.bytes()));
}

TEST_F(WeightCacheTest, AnEntryOfAnotherShapeIsNotHandedOut) {
  WriteFile("key");
  auto cache = WeightCacheFile::Open(Path(), "key");
  ASSERT_TRUE(cache.ok());
  EXPECT_FALSE((*cache)->Matrix(0, DType::kF32, 37, 21).has_value());
  EXPECT_FALSE((*cache)->Matrix(0, DType::kBF16, 38, 21).has_value());
  EXPECT_FALSE((*cache)->Matrix(0, DType::kBF16, 37, 22).has_value());
  EXPECT_FALSE((*cache)->Matrix(4, DType::kBF16, 37, 21).has_value());
  EXPECT_FALSE((*cache)->Matrix(-1, DType::kBF16, 37, 21).has_value());
}

TEST_F(WeightCacheTest, AbsentStaleForeignAndBrokenFilesAreMisses) {
  EXPECT_TRUE(absl::IsNotFound(WeightCacheFile::Open(Path(), "key").status()));
  WriteFile("key");
  auto other = WeightCacheFile::Open(Path(), "another key");
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  EXPECT_NE(other.status().message().find("other weights"), std::string::npos) << other.status();

  const uintmax_t size = fs::file_size(Path());
  fs::resize_file(Path(), size - 4096);  // the last matrix cut short
  auto cut = WeightCacheFile::Open(Path(), "key");
  EXPECT_TRUE(absl::IsFailedPrecondition(cut.status())) << cut.status();

  fs::resize_file(Path(), 16);  // header cut short
  EXPECT_TRUE(absl::IsFailedPrecondition(WeightCacheFile::Open(Path(), "key").status()));

  std::ofstream(Path(), std::ios::trunc) << std::string(8192, 'x');  // not this format
  auto garbage = WeightCacheFile::Open(Path(), "key");
  EXPECT_TRUE(absl::IsFailedPrecondition(garbage.status())) << garbage.status();
}

TEST_F(WeightCacheTest, UncommittedWriterLeavesNoFile) {
  {
    auto writer = WeightCacheWriter::Create(Path(), "key", shapes_);
    ASSERT_TRUE(writer.ok());
    // Not the recorded shape, not an entry: refused.
    EXPECT_FALSE((*writer)->Write(0, cpu::PackMatrix({&sources_[1].view, 1}, pool_)).ok());
    EXPECT_FALSE((*writer)->Write(9, cpu::PackMatrix({&sources_[0].view, 1}, pool_)).ok());
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A file written with large writes and mapped 2 MiB-aligned gets 2 MiB page
// table entries where the kernel holds it in large folios (a hint: reported).
TEST_F(WeightCacheTest, MappingIsHugePageAligned) {
  WriteFile("key");
  auto cache = WeightCacheFile::Open(Path(), "key");
  ASSERT_TRUE(cache.ok());
  auto m = (*cache)->Matrix(0, shapes_[0].dtype, shapes_[0].n, shapes_[0].k);
  // Entry 0 sits right after the header (one 4 KiB page for this key), and
  // the mapping starts on a 2 MiB boundary.
  const uintptr_t base = reinterpret_cast<uintptr_t>(m->data());
  EXPECT_EQ(base % (uintptr_t{2} << 20), 4096u);
}

TEST_F(WeightCacheTest, TemporaryFileOfADeadWriterIsRemoved) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: its pid is free
  fs::create_directories(dir_);
  const std::string dead = Path() + ".tmp." + std::to_string(child);
  const std::string alive = Path() + ".tmp." + std::to_string(::getppid());
  std::ofstream(dead) << "partial";
  std::ofstream(alive) << "in progress";
  WriteFile("key");
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(WeightCacheFile::Open(Path(), "key").ok());
}

// The folder's bound: least recently used cache files go first, files used
// in the last kRecentUseSeconds never, other files are not the cache's.
TEST_F(WeightCacheTest, FolderIsBoundedByLeastRecentUse) {
  fs::create_directories(dir_);
  const auto now = fs::file_time_type::clock::now();
  constexpr uint64_t kMiB = 1 << 20;
  auto make = [&](const std::string& name, std::chrono::seconds age) {
    std::ofstream(dir_ / name) << std::string(kMiB, 'x');
    fs::last_write_time(dir_ / name, now - age);
  };
  using std::chrono::hours;
  make("packed-0000000000000001.bin", hours(4));
  make("packed-0000000000000002.bin", hours(3));
  make("packed-0000000000000003.bin", hours(2));
  make("packed-0000000000000004.bin", std::chrono::seconds(60));  // another rank, starting now
  make("notes.txt", hours(5));
  WriteFile("key");
  const uint64_t file = fs::file_size(Path());
  // Room for two of the old files besides the new one (which replaces its
  // own old copy, so that one does not count): the two oldest go.
  std::vector<std::string> evicted;
  WriteFile("key", 2 * kMiB + file + kMiB / 2, &evicted);
  EXPECT_EQ(evicted, (std::vector<std::string>{"packed-0000000000000001.bin", "packed-0000000000000002.bin"}));
  EXPECT_FALSE(fs::exists(dir_ / "packed-0000000000000001.bin"));
  EXPECT_TRUE(fs::exists(dir_ / "packed-0000000000000003.bin"));
  // No room at all: every file not recently used goes, the recent one stays.
  WriteFile("key", 0, &evicted);
  EXPECT_EQ(evicted, std::vector<std::string>{"packed-0000000000000003.bin"});
  EXPECT_TRUE(fs::exists(dir_ / "packed-0000000000000004.bin"));
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
  EXPECT_TRUE(WeightCacheFile::Open(Path(), "key").ok());
  // Open stamps its file as used.
  fs::last_write_time(Path(), now - hours(6));
  ASSERT_TRUE(WeightCacheFile::Open(Path(), "key").ok());
  EXPECT_GT(fs::last_write_time(Path()), now - std::chrono::seconds(60));
}

TEST_F(WeightCacheTest, FileNamesFollowTheKey) {
  EXPECT_EQ(WeightCacheFile::FileName("a"), WeightCacheFile::FileName("a"));
  EXPECT_NE(WeightCacheFile::FileName("rank 0 of 2 x 1"), WeightCacheFile::FileName("rank 1 of 2 x 1"));
  EXPECT_EQ(WeightCacheFile::FileName("a").rfind("packed-", 0), 0u);
}

}  // namespace
}  // namespace floe
