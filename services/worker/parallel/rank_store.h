// The rendezvous store rank 0 serves to ranks started elsewhere (another
// pod or machine): floe.v1.RankStore on rank 0's worker port, in memory,
// bounded (keys <= 256 bytes, values <= 64 KiB, <= 4096 keys), closed once
// every rank has connected. RankStoreService::Local() is rank 0's own view;
// RemoteRankStore is the other ranks' (a gRPC client with deadlines).
// With internal trust on (common/auth/internal_trust.h) every call needs the
// cluster's internal key, which RemoteRankStore sends: a stranger can
// neither read the ranks' addresses nor plant its own.
//
// Thread-safe: gRPC threads serve, a rank's thread reads.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "common/auth/internal_trust.h"
#include "floe/v1/rank_store.grpc.pb.h"
#include "services/worker/parallel/rendezvous_store.h"

namespace floe {

class RankStoreService final : public floe::v1::RankStore::Service {
 public:
  static constexpr size_t kMaxKeyBytes = 256, kMaxValueBytes = 64 << 10, kMaxKeys = 4096;
  static constexpr std::chrono::minutes kMaxWait{10};

  // `internal_trust` null or disabled: the calls are open.
  explicit RankStoreService(std::shared_ptr<const InternalTrust> internal_trust = nullptr)
      : internal_trust_(std::move(internal_trust)) {}

  grpc::Status Set(grpc::ServerContext* context, const floe::v1::RankStoreSetRequest* request,
                   floe::v1::RankStoreSetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const floe::v1::RankStoreGetRequest* request,
                   floe::v1::RankStoreGetResponse* response) override;

  // Every later call fails with FAILED_PRECONDITION (waiting ones too).
  void Close();
  // Rank 0's store: the same map, no RPC.
  RendezvousStore& Local() { return local_; }

 private:
  absl::Status DoSet(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> DoGet(const std::string& key, std::chrono::milliseconds wait);
  grpc::Status Authorize(const grpc::ServerContext& context, std::string_view call) const {
    return internal_trust_ ? internal_trust_->Authorize(context, call) : grpc::Status::OK;
  }

  class LocalStore final : public RendezvousStore {
   public:
    explicit LocalStore(RankStoreService& s) : s_(s) {}
    absl::Status Set(const std::string& key, const std::string& value) override { return s_.DoSet(key, value); }
    absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds wait) override {
      return s_.DoGet(key, wait);
    }

   private:
    RankStoreService& s_;
  };

  const std::shared_ptr<const InternalTrust> internal_trust_;  // null: none
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  bool closed_ = false;
  LocalStore local_{*this};
};

class RemoteRankStore final : public RendezvousStore {
 public:
  // `address`: rank 0's worker address (host:port).
  // `credentials`: TLS towards it (common/rpc/tls.h); null: plaintext.
  // `internal_trust`: its key goes on every call; null: none.
  explicit RemoteRankStore(const std::string& address,
                           std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                           std::shared_ptr<const InternalTrust> internal_trust = nullptr);
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds wait) override;

 private:
  std::unique_ptr<floe::v1::RankStore::Stub> stub_;
  const std::shared_ptr<const InternalTrust> internal_trust_;
};

}  // namespace floe
