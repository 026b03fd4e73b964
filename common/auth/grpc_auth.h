// API keys on gRPC calls: the "authorization" metadata, and the check the
// admin calls (Worker.Abort, the suffix-cache's Snapshot and ClearNamespace)
// make. Stateless; thread-safe as ApiKeys is.
#pragma once

#include <string_view>

#include <grpcpp/grpcpp.h>

#include "common/auth/api_keys.h"
#include "common/rpc/status_conversion.h"

namespace floe {

// The first value of a call's metadata `key` (lower-case), or "".
inline std::string_view CallMetadata(const grpc::ServerContextBase& context, std::string_view key) {
  auto it = context.client_metadata().find(grpc::string_ref(key.data(), key.size()));
  if (it == context.client_metadata().end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

// OK when `keys` is null (no --admin-key-file: the operator trusts the
// network, as the startup log says) or the caller sent an admin key;
// UNAUTHENTICATED or PERMISSION_DENIED naming `call` otherwise.
inline grpc::Status AuthorizeAdminCall(const ApiKeys* keys, const grpc::ServerContext& context,
                                       std::string_view call) {
  if (!keys) return grpc::Status::OK;
  return ToGrpcStatus(keys->AuthorizeAdmin(CallMetadata(context, "authorization"), call));
}

}  // namespace floe
