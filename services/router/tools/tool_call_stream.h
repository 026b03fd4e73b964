// A response's tool calls as OpenAI streams them: ToolCallParser's state
// after each piece of output, turned into what is new since the last piece
// (content text, a call's index, id and name once, then fragments of its
// arguments), so the deltas of a stream add up to the whole response's
// content and tool_calls. Ids ("chatcmpl-tool-" + hex) come from `make_id`,
// one per call, in order. With parallel_tool_calls false only the first
// call is reported.
//
// Not thread-safe: one per response, on its relay's callbacks.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "services/router/tools/tool_call_parser.h"

namespace floe::tools {

struct ToolCallDelta {
  std::string content;
  struct Call {
    int index = 0;
    std::string id, name;  // set on a call's first delta only
    std::string arguments;
  };
  std::vector<Call> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

struct ReportedCall {
  std::string id, name, arguments;
};

class ToolCallStream {
 public:
  ToolCallStream(const ToolCallFormat& format, std::string forced_name, bool parallel,
                 std::function<std::string()> make_id);

  ToolCallDelta Feed(std::string_view text);
  ToolCallDelta Finish();

  // After Finish: the whole response.
  const std::string& content() const { return parser_.content(); }
  std::vector<ReportedCall> calls() const;
  bool called() const { return !ids_.empty(); }

 private:
  ToolCallDelta Diff();

  ToolCallParser parser_;
  bool parallel_;
  std::function<std::string()> make_id_;
  size_t sent_content_ = 0;
  std::vector<std::string> ids_;          // per reported call
  std::vector<std::string> sent_names_;   // the name each id was sent with
  std::vector<size_t> sent_arguments_;    // bytes of arguments sent per call
};

}  // namespace floe::tools
