// Fuzzes ResolveRequest (services/request/), the one check the router and
// the worker both run on a GenerateRequest before the engine trusts it.
// Input: 6 bytes of limits (vocab size, context, max_tokens limit; u16 each),
// then a serialized floe.v1.GenerateRequest.
// Invariants of an accepted request: everything the header promises
// (strings bounded, prompt 1..max_context-1 ids in the vocabulary,
// 1 <= max_tokens <= limit, prompt + max_tokens <= context, min_tokens in
// [0, max_tokens], stop ids bounded and in the vocabulary, top_n in range,
// every sampling value in range and not NaN); and resolving again changes
// nothing (the worker re-resolves what the router resolved).
#include <cstdint>

#include "floe/v1/generate.pb.h"
#include "services/request/resolve_request.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/request_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  if (size < 6) return 0;
  auto u16 = [&](size_t at) { return static_cast<int32_t>(data[at] | (data[at + 1] << 8)); };
  RequestLimits limits;
  limits.vocab_size = 1 + u16(0);
  limits.max_context = 2 + u16(2);
  limits.max_tokens_limit = 1 + u16(4);
  floe::v1::GenerateRequest request;
  if (!request.ParseFromArray(data + 6, static_cast<int>(size - 6))) return 0;
  const absl::Status status = ResolveRequest(limits, request);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kOutOfRange,
               "%s", status.ToString().c_str());
    return 0;
  }
  CheckResolved(limits, request);
  return 0;
}
