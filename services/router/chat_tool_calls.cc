#include "services/router/chat_tool_calls.h"

#include <atomic>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/router/tools/tool_call_stream.h"

namespace floe {
namespace {

using floe::v1::GenerateResponse;

// Call ids: unique per router process, never a client's.
std::string NextCallId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t instance = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return absl::StrCat("call_", absl::Hex(instance, absl::kZeroPad16), "-", counter.fetch_add(1));
}

void AddDelta(const tools::ToolCallDelta& delta, floe::v1::Chunk* chunk) {
  chunk->set_text(delta.content);
  for (const tools::ToolCallDelta::Call& c : delta.calls) {
    floe::v1::ToolCallDelta* out = chunk->add_tool_calls();
    out->set_index(c.index);
    out->set_id(c.id);
    out->set_name(c.name);
    out->set_arguments(c.arguments);
  }
}

}  // namespace

GenerateCall::Sink WithToolCalls(GenerateCall::Sink sink, const tools::ToolCallFormat& format, std::string tool_name,
                                 bool parallel_tool_calls, int choices) {
  auto readers = std::make_shared<std::vector<std::unique_ptr<tools::ToolCallStream>>>();
  for (int i = 0; i < std::max(1, choices); ++i)
    readers->push_back(std::make_unique<tools::ToolCallStream>(format, tool_name, parallel_tool_calls, NextCallId));
  GenerateCall::Sink wrapped;
  wrapped.on_done = std::move(sink.on_done);
  wrapped.on_events = [readers, inner = std::move(sink.on_events)](GenerateCall& call,
                                                                   std::vector<GenerateResponse> events) {
    std::vector<GenerateResponse> out;
    for (GenerateResponse& e : events) {
      const int index = e.has_chunk() ? e.chunk().index() : e.has_complete() ? e.complete().index() : -1;
      if (index < 0 || index >= static_cast<int>(readers->size())) {
        out.push_back(std::move(e));
        continue;
      }
      tools::ToolCallStream& reader = *(*readers)[index];
      if (e.has_chunk()) {
        AddDelta(reader.Feed(e.chunk().text()), e.mutable_chunk());
        out.push_back(std::move(e));
        continue;
      }
      const tools::ToolCallDelta rest = reader.Finish();
      if (!rest.empty()) {
        GenerateResponse held;
        held.set_request_id(e.request_id());
        held.mutable_chunk()->set_index(index);
        AddDelta(rest, held.mutable_chunk());
        out.push_back(std::move(held));
      }
      if (reader.called() && e.complete().finish_reason() == floe::v1::FINISH_REASON_STOP)
        e.mutable_complete()->set_finish_reason(floe::v1::FINISH_REASON_TOOL_CALLS);
      out.push_back(std::move(e));
    }
    inner(call, std::move(out));
  };
  return wrapped;
}

}  // namespace floe
