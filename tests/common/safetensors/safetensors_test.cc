#include "common/safetensors/safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/safetensors/safetensors_writer.h"
#include "common/safetensors/sharded_safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace floe {
namespace {

using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("floe_safetensors_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A raw file: 8-byte length, the header text as given, then `data_bytes` zero bytes.
  std::string WriteRaw(const std::string& header, size_t data_bytes,
                       uint64_t claimed_len = UINT64_MAX) {
    std::string path = Path("raw.safetensors");
    std::ofstream out(path, std::ios::binary);
    uint64_t len = claimed_len == UINT64_MAX ? header.size() : claimed_len;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
    return path;
  }

  std::filesystem::path dir_;
};

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST_F(SafetensorsTest, RoundTripsF32Bf16F16ZeroCopy) {
  SafetensorsWriter writer;
  std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f, 7.0f, -8.0f};
  std::vector<uint16_t> bf16 = {F32ToBf16(1.5f), F32ToBf16(-0.25f), F32ToBf16(42.0f)};
  std::vector<uint16_t> f16 = {F32ToF16(0.5f), F32ToF16(-3.0f)};
  ASSERT_TRUE(writer.Add("a.bf16", DType::kBF16, {3}, Bytes(bf16)).ok());
  ASSERT_TRUE(writer.Add("b.f32", DType::kF32, {2, 3}, Bytes(f32)).ok());
  ASSERT_TRUE(writer.AddLazy("c.f16", DType::kF16, {1, 2}, [&](uint8_t* out, size_t n) {
    std::memcpy(out, f16.data(), n);
  }).ok());
  writer.SetMetadata("origin", "test");
  ASSERT_TRUE(writer.Write(Path("x.safetensors")).ok());
  EXPECT_FALSE(std::filesystem::exists(Path("x.safetensors.tmp")));

  auto file = SafetensorsFile::Open(Path("x.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("origin"), "test");
  EXPECT_EQ((*file)->names(), (std::vector<std::string>{"a.bf16", "b.f32", "c.f16"}));

  auto a = (*file)->Get("a.bf16");
  auto b = (*file)->Get("b.f32");
  auto c = (*file)->Get("c.f16");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(0, std::memcmp(b->data, f32.data(), b->bytes()));
  // Aligned for the element type: the header is padded to 8 and f32 goes first.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 4, 0u);
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(Bf16ToF32(static_cast<const uint16_t*>(a->data)[2]), 42.0f);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(F16ToF32(static_cast<const uint16_t*>(c->data)[1]), -3.0f);

  // The header length is a multiple of 8.
  std::ifstream in(Path("x.safetensors"), std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);

  auto missing = (*file)->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));
}

TEST_F(SafetensorsTest, WriterRejectsWrongByteCountAndDuplicates) {
  SafetensorsWriter writer;
  auto status = writer.Add("w", DType::kF32, {2, 2}, std::vector<uint8_t>(15));
  EXPECT_THAT(status.message(), HasSubstr("w"));
  EXPECT_TRUE(writer.Add("w", DType::kF32, {2, 2}, std::vector<uint8_t>(16)).ok());
  EXPECT_FALSE(writer.Add("w", DType::kF32, {2, 2}, std::vector<uint8_t>(16)).ok());
  EXPECT_FALSE(writer.Add("q", "Q7", {1}, std::vector<uint8_t>(1)).ok());
}

TEST_F(SafetensorsTest, UnsupportedDTypeNamesTensorAndDType) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("layer.qweight", "F8_E5M2", {4}, std::vector<uint8_t>(4)).ok());
  ASSERT_TRUE(writer.Add("layer.i8", "I8", {4}, std::vector<uint8_t>(4)).ok());
  ASSERT_TRUE(writer.Write(Path("f8.safetensors")).ok());
  auto file = SafetensorsFile::Open(Path("f8.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();  // F8_E5M2 is valid safetensors...
  auto view = (*file)->Get("layer.qweight");  // ...but not a dtype Floe computes in
  ASSERT_FALSE(view.ok());
  EXPECT_THAT(view.status().message(), HasSubstr("layer.qweight"));
  EXPECT_THAT(view.status().message(), HasSubstr("F8_E5M2"));
  // I8 is one (compressed-tensors int8 weights).
  auto i8 = (*file)->Get("layer.i8");
  ASSERT_TRUE(i8.ok()) << i8.status();
  EXPECT_EQ(i8->dtype, DType::kI8);
}

// GetRaw hands out any dtype's bytes (packed int32 weights, int64 shapes).
TEST_F(SafetensorsTest, RawTensorsOfAnyDType) {
  SafetensorsWriter writer;
  const std::vector<uint8_t> words = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(writer.Add("w.weight_packed", "I32", {1, 2}, words).ok());
  ASSERT_TRUE(writer.Add("w.weight_shape", "I64", {2}, std::vector<uint8_t>(16, 9)).ok());
  ASSERT_TRUE(writer.Write(Path("raw.safetensors")).ok());
  auto files = ShardedSafetensors::OpenSingle(Path("raw.safetensors"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_FALSE(files->Get("w.weight_packed").ok());
  auto raw = files->GetRaw("w.weight_packed");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->entry->dtype_name, "I32");
  EXPECT_EQ(raw->entry->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::vector<uint8_t>(raw->data, raw->data + raw->bytes()), words);
  EXPECT_EQ(files->GetRaw("w.weight_shape")->bytes(), 16u);
  EXPECT_EQ(files->GetRaw("absent").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, UnknownDTypeFailsAtOpen) {
  auto path = WriteRaw(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("tensor w"));
  EXPECT_THAT(file.status().message(), HasSubstr("Q4"));
  EXPECT_THAT(file.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  auto path = WriteRaw("{}", 0, /*claimed_len=*/1000);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("header length 1000"));
  EXPECT_THAT(file.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsTest, FileShorterThanLengthField) {
  std::string path = Path("short.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, InvalidJson) {
  auto path = WriteRaw(R"({"w":{"dtype":"F32",)", 0);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(file.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsTest, OffsetsBeyondDataSection) {
  auto path = WriteRaw(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("tensor w"));
  EXPECT_THAT(file.status().message(), HasSubstr("past the data section"));
}

TEST_F(SafetensorsTest, OffsetsNotMatchingShape) {
  auto path = WriteRaw(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("tensor w"));
  EXPECT_THAT(file.status().message(), HasSubstr("needs 12"));
}

TEST_F(SafetensorsTest, OffsetsReversedOrMalformed) {
  auto path = WriteRaw(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 8);
  EXPECT_THAT(SafetensorsFile::Open(path).status().message(), HasSubstr("end before"));
  path = WriteRaw(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", 8);
  EXPECT_THAT(SafetensorsFile::Open(path).status().message(), HasSubstr("data_offsets"));
  path = WriteRaw(R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", 8);
  EXPECT_THAT(SafetensorsFile::Open(path).status().message(), HasSubstr("shape"));
  path = WriteRaw(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8);
  EXPECT_THAT(SafetensorsFile::Open(path).status().message(), HasSubstr("2^64"));
}

TEST_F(SafetensorsTest, OutOfOrderAndSharedRangesInsideTheFileAreAllowed) {
  auto path = WriteRaw(
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("alias":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Get("a")->data, (*file)->Get("alias")->data);
}

TEST_F(SafetensorsTest, TruncatedDataSection) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("big", DType::kF32, {64}, std::vector<uint8_t>(256)).ok());
  ASSERT_TRUE(writer.Write(Path("t.safetensors")).ok());
  std::filesystem::resize_file(Path("t.safetensors"),
                               std::filesystem::file_size(Path("t.safetensors")) - 10);
  auto file = SafetensorsFile::Open(Path("t.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("tensor big"));
  EXPECT_THAT(file.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(Path("absent.safetensors"));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, ShardedIndexResolvesEachTensorToItsShard) {
  for (int shard = 0; shard < 2; ++shard) {
    SafetensorsWriter writer;
    std::vector<float> v = {static_cast<float>(shard)};
    ASSERT_TRUE(writer.Add("t" + std::to_string(shard), DType::kF32, {1}, Bytes(v)).ok());
    ASSERT_TRUE(writer.Write(Path("s" + std::to_string(shard) + ".safetensors")).ok());
  }
  std::ofstream(Path(kSafetensorsIndexFile))
      << R"({"metadata":{},"weight_map":{"t0":"s0.safetensors","t1":"s1.safetensors"}})";
  auto set = ShardedSafetensors::OpenDirectory(dir_.string());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->num_files(), 2u);
  EXPECT_EQ(set->names(), (std::vector<std::string>{"t0", "t1"}));
  EXPECT_EQ(*static_cast<const float*>(set->Get("t1")->data), 1.0f);
  EXPECT_THAT(set->Get("t2").status().message(), HasSubstr("t2"));

  std::ofstream(Path(kSafetensorsIndexFile))
      << R"({"weight_map":{"t0":"s1.safetensors"}})";
  auto wrong = ShardedSafetensors::OpenDirectory(dir_.string());
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("t0"));
  EXPECT_THAT(wrong.status().message(), HasSubstr("s1.safetensors"));

  std::ofstream(Path(kSafetensorsIndexFile)) << R"({"weight_map":{"t0":"../s0.safetensors"}})";
  EXPECT_FALSE(ShardedSafetensors::OpenDirectory(dir_.string()).ok());
  std::ofstream(Path(kSafetensorsIndexFile)) << R"({"weight_map":{"t0":"gone.safetensors"}})";
  EXPECT_THAT(ShardedSafetensors::OpenDirectory(dir_.string()).status().message(),
              HasSubstr("gone.safetensors"));
}

TEST_F(SafetensorsTest, DirectoryWithoutWeights) {
  auto set = ShardedSafetensors::OpenDirectory(dir_.string());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace floe
