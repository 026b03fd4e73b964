// InternalTrust: the key file's errors, the flags, and the checks on real
// gRPC calls over loopback: a probe service authorizes each call with the
// trust, callers send no key, the wrong key or the right one (Attach); under
// mTLS with certificates a test CA signs, the allow-list of SANs.
#include "common/auth/internal_trust.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <grpcpp/grpcpp.h>

#include "common/auth/api_keys.h"
#include "common/cli/arg_parser.h"
#include "common/rpc/tls.h"
#include "floe/v1/rank_store.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/common/auth/test_certs.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

constexpr char kKey[] = "0123456789abcdef-internal";

class KeyFiles {
 public:
  KeyFiles() : dir_(fs::temp_directory_path() / ("floe_internal_trust_" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
  }
  ~KeyFiles() { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

 private:
  fs::path dir_;
};

absl::Status LoadFile(KeyFiles& files, const std::string& text) {
  return InternalTrust::Load({.key_file = files.Write("key", text)}).status();
}

TEST(InternalTrustTest, KeyFileErrorsNameTheFlagAndTheLimit) {
  KeyFiles files;
  auto missing = InternalTrust::Load({.key_file = "/nonexistent/floe.key"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--internal-key-file"), std::string::npos) << missing.status();
  struct Case {
    std::string text;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{"", "empty"},
                                         {"\n\n", "empty"},
                                         {"short-key\n", "at least 16"},
                                         {std::string(kKey) + "\nsecond-line-of-key\n", "2 lines"},
                                         {"0123456789 abcdef-with-space", "printable ASCII without spaces"},
                                         {std::string(4097, 'k'), "the limit is 4096"},
                                         {std::string(9000, 'k'), "longer than 4096"}}) {
    const absl::Status s = LoadFile(files, c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(s.message().find("--internal-key-file"), std::string::npos) << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
    EXPECT_EQ(s.message().find("abcdef"), std::string::npos) << "the key is never echoed: " << s;
  }
  auto peers = InternalTrust::Load({.allowed_peers = {"router", " "}});
  EXPECT_EQ(peers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(peers.status().message().find("--tls-allowed-peers: entry 1"), std::string::npos) << peers.status();

  // One line, a final newline (and a CR) allowed.
  auto loaded = InternalTrust::Load({.key_file = files.Write("ok", std::string(kKey) + "\r\n")});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->enabled());
  EXPECT_TRUE((*loaded)->has_key());
  auto disabled = InternalTrust::Load({});
  ASSERT_TRUE(disabled.ok());
  EXPECT_FALSE((*disabled)->enabled());
}

TEST(InternalTrustTest, FlagsParseAndReproduceOnAChildsCommandLine) {
  InternalTrustOptions options;
  ArgParser parser("test", "test");
  AddInternalTrustFlags(parser, &options);
  const char* argv[] = {"test", "--internal-key-file", "/etc/floe/key", "--tls-allowed-peers",
                        "router.floe, ,10.0.0.7"};
  ASSERT_TRUE(parser.Parse(5, const_cast<char**>(argv)).ok());
  EXPECT_EQ(options.key_file, "/etc/floe/key");
  EXPECT_EQ(options.allowed_peers, (std::vector<std::string>{"router.floe", "10.0.0.7"}));
  EXPECT_EQ(InternalTrustFlags(options), (std::vector<std::string>{"--internal-key-file", "/etc/floe/key",
                                                                   "--tls-allowed-peers", "router.floe,10.0.0.7"}));
  EXPECT_TRUE(InternalTrustFlags({}).empty());
  const absl::Status no_mtls = ValidateInternalTrustOptions(options, TlsOptions{.cert_file = "c", .key_file = "k"});
  EXPECT_EQ(no_mtls.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_mtls.message().find("--tls-allowed-peers needs --tls-client-ca"), std::string::npos) << no_mtls;
  EXPECT_TRUE(
      ValidateInternalTrustOptions(options, TlsOptions{.cert_file = "c", .key_file = "k", .client_ca_file = "ca"}).ok());
  EXPECT_TRUE(ValidateInternalTrustOptions({.key_file = "/etc/floe/key"}, TlsOptions{}).ok());
  EXPECT_NE(parser.Help().find("--internal-key-file"), std::string::npos);
}

TEST(InternalTrustTest, MatchingHelpers) {
  EXPECT_TRUE(PeerAllowed({"router.floe", "spiffe://floe/router"}, {"10.0.0.1", "spiffe://floe/router"}));
  EXPECT_FALSE(PeerAllowed({"router.floe"}, {"Router.floe", "router.floe.evil", "router"}));
  EXPECT_FALSE(PeerAllowed({"router.floe"}, {}));
  EXPECT_TRUE(TenantOwnsNamespace("team-a", "team-a"));
  EXPECT_TRUE(TenantOwnsNamespace("team-a", "team-a/agents"));
  EXPECT_FALSE(TenantOwnsNamespace("team-a", "team-ab"));
  EXPECT_FALSE(TenantOwnsNamespace("team-a", "team-b/team-a"));
  EXPECT_FALSE(TenantOwnsNamespace("team-a", "default"));
  EXPECT_FALSE(TenantOwnsNamespace("", "anything"));
}

// A real service whose Set answers the trust's Authorize and whose Get says
// whether the caller counts as internal.
class Probe final : public floe::v1::RankStore::Service {
 public:
  explicit Probe(std::shared_ptr<const InternalTrust> trust, const ApiKeys* admin_keys = nullptr)
      : trust_(std::move(trust)), admin_keys_(admin_keys) {}
  grpc::Status Set(grpc::ServerContext* context, const floe::v1::RankStoreSetRequest* request,
                   floe::v1::RankStoreSetResponse*) override {
    if (request->key() == "admin") return AuthorizeAdminOrInternal(admin_keys_, trust_.get(), *context, "Probe.Admin");
    return trust_->Authorize(*context, "Probe.Set");
  }
  grpc::Status Get(grpc::ServerContext* context, const floe::v1::RankStoreGetRequest*,
                   floe::v1::RankStoreGetResponse* response) override {
    response->set_value(trust_->IsInternalCaller(*context) ? "internal" : "outside");
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<const InternalTrust> trust_;
  const ApiKeys* admin_keys_;
};

class ProbeServer {
 public:
  ProbeServer(std::shared_ptr<const InternalTrust> trust, std::shared_ptr<grpc::ServerCredentials> credentials,
              const ApiKeys* admin_keys = nullptr)
      : probe_(std::move(trust), admin_keys) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port);
    builder.RegisterService(&probe_);
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~ProbeServer() { server_->Shutdown(); }

  std::unique_ptr<floe::v1::RankStore::Stub> Stub(std::shared_ptr<grpc::ChannelCredentials> credentials =
                                                      grpc::InsecureChannelCredentials()) const {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return floe::v1::RankStore::NewStub(grpc::CreateCustomChannel(address_, credentials, args));
  }

 private:
  Probe probe_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// "authorization" as `sender` sets it: nothing, Attach, or a literal value.
grpc::Status Call(floe::v1::RankStore::Stub& stub, const InternalTrust* sender, const std::string& literal = "",
                  const std::string& key = "k") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (sender) sender->Attach(&context);
  if (!literal.empty()) context.AddMetadata("authorization", literal);
  floe::v1::RankStoreSetRequest request;
  request.set_key(key);
  floe::v1::RankStoreSetResponse response;
  return stub.Set(&context, request, &response);
}

std::string Who(floe::v1::RankStore::Stub& stub, const InternalTrust* sender) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (sender) sender->Attach(&context);
  floe::v1::RankStoreGetRequest request;
  floe::v1::RankStoreGetResponse response;
  const grpc::Status s = stub.Get(&context, request, &response);
  return s.ok() ? response.value() : s.error_message();
}

std::shared_ptr<const InternalTrust> Trust(std::string key, std::vector<std::string> peers = {}) {
  auto trust = InternalTrust::FromKey(std::move(key), std::move(peers));
  EXPECT_TRUE(trust.ok()) << trust.status();
  return *trust;
}

TEST(InternalTrustTest, OnlyCallersWithTheKeyPass) {
  auto trust = Trust(kKey);
  ProbeServer server(trust, grpc::InsecureServerCredentials());
  auto stub = server.Stub();

  EXPECT_TRUE(Call(*stub, trust.get()).ok());
  EXPECT_EQ(Who(*stub, trust.get()), "internal");
  const grpc::Status none = Call(*stub, nullptr);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("Probe.Set is an internal call"), std::string::npos) << none.error_message();
  EXPECT_NE(none.error_message().find("none was sent"), std::string::npos) << none.error_message();
  EXPECT_EQ(Who(*stub, nullptr), "outside");
  auto other = Trust("another-cluster-key-0123");
  for (const grpc::Status& wrong : {Call(*stub, other.get()), Call(*stub, nullptr, kKey),
                                    Call(*stub, nullptr, std::string("Basic ") + kKey),
                                    Call(*stub, nullptr, std::string("Bearer ") + kKey + "x"),
                                    Call(*stub, nullptr, "Bearer ")}) {
    EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(wrong.error_message().find("not the cluster's internal key"), std::string::npos)
        << wrong.error_message();
    EXPECT_EQ(wrong.error_message().find("0123456789"), std::string::npos) << "never echoes a key";
  }
  EXPECT_EQ(Who(*stub, other.get()), "outside");
  // The scheme is case-insensitive, as for API keys.
  EXPECT_TRUE(Call(*stub, nullptr, std::string("bearer ") + kKey).ok());
}

TEST(InternalTrustTest, DisabledTrustIsOpenAndSendsNothing) {
  auto disabled = InternalTrust::Load({});
  ASSERT_TRUE(disabled.ok());
  ProbeServer server(*disabled, grpc::InsecureServerCredentials());
  auto stub = server.Stub();
  EXPECT_TRUE(Call(*stub, nullptr).ok());
  EXPECT_TRUE(Call(*stub, nullptr, "Bearer anything-at-all").ok());
  EXPECT_EQ(Who(*stub, disabled->get()), "outside");  // nobody is "internal" without a trust
  // A disabled sender attaches nothing: a server with a key refuses it.
  auto trust = Trust(kKey);
  ProbeServer keyed(trust, grpc::InsecureServerCredentials());
  EXPECT_EQ(Call(*keyed.Stub(), disabled->get()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(InternalTrustTest, AdminCallsNeedAnAdminKeyElseTheInternalKey) {
  auto keys = ApiKeys::Parse(Sha256Hex("admin-key") + " ops admin\n" + Sha256Hex("user-key") + " team-a\n");
  ASSERT_TRUE(keys.ok());
  auto trust = Trust(kKey);
  {
    ProbeServer server(trust, grpc::InsecureServerCredentials(), &*keys);
    auto stub = server.Stub();
    EXPECT_TRUE(Call(*stub, nullptr, "Bearer admin-key", "admin").ok());
    EXPECT_EQ(Call(*stub, nullptr, "Bearer user-key", "admin").error_code(), grpc::StatusCode::PERMISSION_DENIED);
    // The internal key is no admin credential.
    EXPECT_EQ(Call(*stub, trust.get(), "", "admin").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Call(*stub, nullptr, "", "admin").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    ProbeServer server(trust, grpc::InsecureServerCredentials());  // no --admin-key-file
    auto stub = server.Stub();
    EXPECT_TRUE(Call(*stub, trust.get(), "", "admin").ok());
    const grpc::Status none = Call(*stub, nullptr, "", "admin");
    EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(none.error_message().find("Probe.Admin"), std::string::npos) << none.error_message();
  }
  {
    auto disabled = InternalTrust::Load({});
    ProbeServer server(*disabled, grpc::InsecureServerCredentials());  // neither: open, as before
    EXPECT_TRUE(Call(*server.Stub(), nullptr, "", "admin").ok());
  }
}

// mTLS: the cluster CA signs every certificate; the allow-list narrows which
// of them may make internal calls.
class MtlsTest : public ::testing::Test {
 protected:
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
    grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = ca_.cert_pem();
    options.pem_key_cert_pairs.push_back({server_.key_pem, server_.cert_pem});
    return grpc::SslServerCredentials(options);
  }
  std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const testing::TestCert& cert) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ca_.cert_pem();
    options.pem_private_key = cert.key_pem;
    options.pem_cert_chain = cert.cert_pem;
    return grpc::SslCredentials(options);
  }

  testing::TestCa ca_;
  testing::TestCert server_ = ca_.Issue("floe-worker", "DNS:localhost,IP:127.0.0.1");
  testing::TestCert router_ = ca_.Issue("floe-router", "DNS:router.floe.svc,URI:spiffe://floe/router");
  testing::TestCert rank_ = ca_.Issue("floe-rank", "IP:10.1.2.3");
  testing::TestCert rogue_ = ca_.Issue("some-pod", "DNS:rogue.floe.svc");
  testing::TestCert bare_ = ca_.Issue("no-sans", "");
};

TEST_F(MtlsTest, AllowListMatchesTheCallersSubjectAltNames) {
  auto trust = Trust(kKey, {"router.floe.svc", "10.1.2.3"});
  ProbeServer server(trust, ServerCredentials());

  EXPECT_TRUE(Call(*server.Stub(ClientCredentials(router_)), trust.get()).ok());
  EXPECT_EQ(Who(*server.Stub(ClientCredentials(router_)), trust.get()), "internal");
  EXPECT_TRUE(Call(*server.Stub(ClientCredentials(rank_)), trust.get()).ok()) << "an IP SAN";

  const grpc::Status rogue = Call(*server.Stub(ClientCredentials(rogue_)), trust.get());
  EXPECT_EQ(rogue.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(rogue.error_message().find("rogue.floe.svc"), std::string::npos) << rogue.error_message();
  EXPECT_NE(rogue.error_message().find("--tls-allowed-peers"), std::string::npos) << rogue.error_message();
  EXPECT_EQ(Who(*server.Stub(ClientCredentials(rogue_)), trust.get()), "outside");

  const grpc::Status bare = Call(*server.Stub(ClientCredentials(bare_)), trust.get());
  EXPECT_EQ(bare.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(bare.error_message().find("subjectAltNames: none"), std::string::npos) << bare.error_message();
  EXPECT_NE(bare.error_message().find("no-sans"), std::string::npos) << "names the peer: " << bare.error_message();

  // The key is still needed from an allowed peer.
  EXPECT_EQ(Call(*server.Stub(ClientCredentials(router_)), nullptr).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(MtlsTest, UriSansMatchAndAnAllowListWithoutAKeyChecksPeersOnly) {
  auto trust = Trust(kKey, {"spiffe://floe/router"});
  ProbeServer server(trust, ServerCredentials());
  EXPECT_TRUE(Call(*server.Stub(ClientCredentials(router_)), trust.get()).ok());

  auto peers_only = InternalTrust::Load({.allowed_peers = {"router.floe.svc"}});
  ASSERT_TRUE(peers_only.ok());
  EXPECT_TRUE((*peers_only)->enabled());
  ProbeServer peers_server(*peers_only, ServerCredentials());
  EXPECT_TRUE(Call(*peers_server.Stub(ClientCredentials(router_)), nullptr).ok());
  EXPECT_EQ(Call(*peers_server.Stub(ClientCredentials(rogue_)), nullptr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST(InternalTrustTest, AnAllowListRefusesACallerWithoutACertificate) {
  auto trust = Trust(kKey, {"router.floe.svc"});
  ProbeServer server(trust, grpc::InsecureServerCredentials());
  const grpc::Status s = Call(*server.Stub(), trust.get());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("presented none"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace floe
