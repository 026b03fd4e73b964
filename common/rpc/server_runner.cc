#include "common/rpc/server_runner.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <thread>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

// Linking grpc++_reflection registers its plugin for every server builder
// (a static initializer); this option takes it out of one builder again.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const auto& plugin) { return plugin->name() == "proto_server_reflection"; });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServerRunner>> ServerRunner::Start(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<ServerRunner> runner(new ServerRunner());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, *credentials, &runner->port_);
  // With SO_REUSEPORT, gRPC 1.51 clones a listener per polling thread by
  // binding the address it was given again: for port 0 that is a second,
  // unprinted free port serving the same services (issue 41). Without it,
  // one socket; a second process on a taken port fails to bind instead of
  // sharing it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!options.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  grpc::ResourceQuota quota("floe");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  for (grpc::Service* service : services) builder.RegisterService(service);
  runner->server_ = builder.BuildAndStart();
  if (!runner->server_ || runner->port_ == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  std::string host = options.address.substr(0, options.address.rfind(':'));
  runner->address_ = absl::StrCat(host, ":", runner->port_);
  runner->SetServing(false);
  return runner;
}

ServerRunner::~ServerRunner() { Shutdown(std::chrono::milliseconds(0)); }

void ServerRunner::SetServing(bool serving) {
  if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(serving);
}

void ServerRunner::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  SetServing(false);
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

void ServerRunner::DrainAndShutdown(const std::function<int()>& in_flight, std::chrono::milliseconds timeout) {
  SetServing(false);
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (in_flight() > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Shutdown(std::chrono::milliseconds(500));
}

}  // namespace floe
