#include "services/worker/parallel/rank_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return s.ok() ? grpc::Status::OK
                : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

absl::Status RankStoreService::DoSet(const std::string& key, const std::string& value) {
  if (key.empty() || key.size() > kMaxKeyBytes)
    return absl::InvalidArgumentError(absl::StrCat("key: ", key.size(), " bytes, must be 1-", kMaxKeyBytes));
  if (value.size() > kMaxValueBytes)
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.size(), " bytes, at most ", kMaxValueBytes));
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::FailedPreconditionError("the rank store is closed: every rank has connected");
  if (!values_.count(key) && values_.size() >= kMaxKeys)
    return absl::ResourceExhaustedError(absl::StrCat("the rank store holds its limit of ", kMaxKeys, " keys"));
  values_[key] = value;
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> RankStoreService::DoGet(const std::string& key, std::chrono::milliseconds wait) {
  if (key.empty() || key.size() > kMaxKeyBytes)
    return absl::InvalidArgumentError(absl::StrCat("key: ", key.size(), " bytes, must be 1-", kMaxKeyBytes));
  wait = std::clamp<std::chrono::milliseconds>(wait, std::chrono::milliseconds(0), kMaxWait);
  std::unique_lock<std::mutex> lock(mu_);
  const bool present = changed_.wait_for(lock, wait, [&] { return closed_ || values_.count(key) > 0; });
  if (closed_) return absl::FailedPreconditionError("the rank store is closed: every rank has connected");
  if (!present) return absl::DeadlineExceededError(absl::StrCat("key ", key, " not set within ", wait.count(), " ms"));
  return values_[key];
}

void RankStoreService::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  values_.clear();
  changed_.notify_all();
}

grpc::Status RankStoreService::Set(grpc::ServerContext* context, const floe::v1::RankStoreSetRequest* request,
                                   floe::v1::RankStoreSetResponse*) {
  if (grpc::Status s = Authorize(*context, "RankStore.Set"); !s.ok()) return s;
  return ToGrpc(DoSet(request->key(), request->value()));
}

grpc::Status RankStoreService::Get(grpc::ServerContext* context, const floe::v1::RankStoreGetRequest* request,
                                   floe::v1::RankStoreGetResponse* response) {
  if (grpc::Status s = Authorize(*context, "RankStore.Get"); !s.ok()) return s;
  // Never past the caller's deadline.
  auto wait = std::chrono::milliseconds(std::max<int64_t>(0, request->wait_ms()));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(context->deadline() -
                                                                          std::chrono::system_clock::now());
  wait = std::min(wait, std::max(left, std::chrono::milliseconds(0)));
  auto value = DoGet(request->key(), wait);
  if (!value.ok()) return ToGrpc(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

RemoteRankStore::RemoteRankStore(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                                 std::shared_ptr<const InternalTrust> internal_trust)
    : stub_(floe::v1::RankStore::NewStub(
          grpc::CreateChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials()))),
      internal_trust_(std::move(internal_trust)) {}

absl::Status RemoteRankStore::Set(const std::string& key, const std::string& value) {
  floe::v1::RankStoreSetRequest request;
  request.set_key(key);
  request.set_value(value);
  floe::v1::RankStoreSetResponse response;
  // Rank 0 may still be starting: wait for its port, within the deadline.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  context.set_wait_for_ready(true);
  if (internal_trust_) internal_trust_->Attach(&context);
  return FromGrpc(stub_->Set(&context, request, &response));
}

absl::StatusOr<std::string> RemoteRankStore::Get(const std::string& key, std::chrono::milliseconds wait) {
  floe::v1::RankStoreGetRequest request;
  request.set_key(key);
  request.set_wait_ms(wait.count());
  floe::v1::RankStoreGetResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + wait + std::chrono::seconds(10));
  context.set_wait_for_ready(true);
  if (internal_trust_) internal_trust_->Attach(&context);
  const grpc::Status s = stub_->Get(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response.value();
}

}  // namespace floe
