// An in-process suffix-cache server on loopback (port 0) for tests, with the
// binary's lease reaper when store_options.request_lease > 0.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/rpc/server_runner.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "services/suffix_cache/lease_reaper.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe::suffix_cache {

struct TestServer {
  TestServer(const StoreOptions& store_options, const ServiceLimits& limits, bool restore = false)
      : store(store_options), service(&store, limits) {
    if (restore) restored = service.RestoreSnapshot();
    auto r = ServerRunner::Start({"127.0.0.1:0"}, {&service});
    if (!r.ok()) {
      std::fprintf(stderr, "TestServer: cannot start: %s\n", r.status().ToString().c_str());
      std::abort();
    }
    runner = std::move(r).value();
    if (store_options.request_lease > std::chrono::milliseconds::zero()) {
      reaper = std::make_unique<LeaseReaper>(&store, LeaseReaper::PeriodFor(store_options.request_lease));
    }
    service.SetAccepting(true);
    runner->SetServing(true);
    stub = floe::v1::SuffixCache::NewStub(
        grpc::CreateChannel(runner->address(), grpc::InsecureChannelCredentials()));
  }
  ~TestServer() { runner->Shutdown(std::chrono::milliseconds(100)); }

  SuffixCacheStore store;
  SuffixCacheService service;
  std::unique_ptr<ServerRunner> runner;
  std::unique_ptr<LeaseReaper> reaper;  // stopped before the store goes
  std::unique_ptr<floe::v1::SuffixCache::Stub> stub;
  int64_t restored = 0;
};

}  // namespace floe::suffix_cache
