// ApiKeys: the key file, Bearer parsing, admin rights.
#include "common/auth/api_keys.h"

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(ApiKeysTest, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeysTest, AuthenticatesBearerKeysByTheirDigest) {
  auto keys = ApiKeys::Parse("# tenants\n" + Sha256Hex("key-a") + " team-a\n\n" + Sha256Hex("key-b") +
                             " team-b admin\n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  auto a = keys->Authenticate("Bearer key-a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->name, "team-a");
  EXPECT_FALSE((*a)->admin);
  auto b = keys->Authenticate("bearer key-b");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*b)->admin);
  for (const char* bad : {"", "key-a", "Bearer ", "Basic a2V5LWE=", "Bearer key-c"}) {
    auto r = keys->Authenticate(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(r.status().message().find("key-c"), std::string::npos) << "a key is never echoed";
  }
  // The digest is not a key.
  EXPECT_FALSE(keys->Authenticate("Bearer " + Sha256Hex("key-a")).ok());
}

TEST(ApiKeysTest, BadFilesNameTheLine) {
  struct Case {
    std::string text, message;
  } cases[] = {
      {"", "no keys"},
      {"plain-key tenant\n", "line 1: the first field must be a key's SHA-256"},
      {Sha256Hex("k") + "\n", "line 1: 1 fields"},
      {"\n" + Sha256Hex("k") + " bad/tenant\n", "line 2: tenant must be"},
      {Sha256Hex("k") + " t root\n", "unknown flag \"root\""},
      {Sha256Hex("k") + " t\n" + Sha256Hex("k") + " u\n", "line 2: the same key appears twice"},
  };
  for (const Case& c : cases) {
    auto keys = ApiKeys::Parse(c.text);
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_NE(keys.status().message().find(c.message), std::string::npos) << keys.status();
  }
}

TEST(ApiKeysTest, AdminCallsNeedAnAdminKey) {
  auto keys = ApiKeys::Parse(Sha256Hex("user") + " team-a\n" + Sha256Hex("root") + " ops admin\n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->AuthorizeAdmin("Bearer root", "Worker.Abort").ok());
  absl::Status user = keys->AuthorizeAdmin("Bearer user", "Worker.Abort");
  EXPECT_EQ(user.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(user.message().find("Worker.Abort needs an admin key"), std::string::npos) << user;
  EXPECT_EQ(keys->AuthorizeAdmin("", "Worker.Abort").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys->AuthorizeAdmin("Bearer nobody", "Worker.Abort").code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace floe
