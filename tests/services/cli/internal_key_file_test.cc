#include "services/cli/internal_key_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

mode_t Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

TEST(InternalKeyFileTest, AFreshHexKeyOnlyItsOwnerCanReadInAPrivateFolderRemovedAfterwards) {
  auto file = InternalKeyFile::Create();
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string path = (*file)->path();
  const std::string dir = fs::path(path).parent_path().string();
  EXPECT_TRUE(S_ISREG(Mode(path)));
  EXPECT_EQ(Mode(path) & 0777, 0600u);
  EXPECT_TRUE(S_ISDIR(Mode(dir)));
  EXPECT_EQ(Mode(dir) & 0777, 0700u);
  // 32 random bytes as hex, one line without a newline: what
  // --internal-key-file reads and what travels in the bearer header.
  const std::string key = (*file)->key();
  EXPECT_EQ(key.size(), 2u * InternalKeyFile::kKeyBytes);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(Contents(path), key);

  auto other = InternalKeyFile::Create();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->key(), key) << "two runs got the same key";
  EXPECT_NE((*other)->path(), path);

  file->reset();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(fs::exists((*other)->path()));
}

TEST(InternalKeyFileTest, GoesUnderTmpdirAndNamesItWhenItCannot) {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  const fs::path base = fs::temp_directory_path() / ("floe_key_test_" + std::to_string(::getpid()));
  fs::create_directories(base);
  ::setenv("TMPDIR", base.c_str(), 1);
  auto file = InternalKeyFile::Create();
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(fs::path((*file)->path()).parent_path().parent_path(), base);
  file->reset();

  const std::string missing = (base / "missing").string();
  ::setenv("TMPDIR", missing.c_str(), 1);
  auto refused = InternalKeyFile::Create();
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(missing), std::string::npos) << refused.status();

  if (old) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  fs::remove_all(base);
}

}  // namespace
}  // namespace floe
