#include "services/router/tools/tool_call_stream.h"

namespace floe::tools {

ToolCallStream::ToolCallStream(const ToolCallFormat& format, std::string forced_name, bool parallel,
                               std::function<std::string()> make_id)
    : parser_(format, std::move(forced_name)), parallel_(parallel), make_id_(std::move(make_id)) {}

ToolCallDelta ToolCallStream::Feed(std::string_view text) {
  parser_.Feed(text);
  return Diff();
}

ToolCallDelta ToolCallStream::Finish() {
  parser_.Finish();
  return Diff();
}

ToolCallDelta ToolCallStream::Diff() {
  ToolCallDelta delta;
  const std::string& content = parser_.content();
  delta.content = content.substr(sent_content_);
  sent_content_ = content.size();
  const std::vector<ParsedCall>& calls = parser_.calls();
  const size_t limit = parallel_ ? calls.size() : std::min<size_t>(calls.size(), 1);
  for (size_t i = 0; i < limit; ++i) {
    const ParsedCall& call = calls[i];
    if (call.name.empty()) break;  // later calls wait for this one's name
    ToolCallDelta::Call out;
    out.index = static_cast<int>(i);
    if (i >= ids_.size() || sent_names_[i] != call.name) {
      // A new call (or, after a malformed one was dropped, another in its slot).
      if (i >= ids_.size()) {
        ids_.push_back(make_id_());
        sent_names_.push_back(call.name);
        sent_arguments_.push_back(0);
      } else {
        ids_[i] = make_id_();
        sent_names_[i] = call.name;
        sent_arguments_[i] = 0;
      }
      out.id = ids_[i];
      out.name = call.name;
    }
    if (call.arguments.size() > sent_arguments_[i]) {
      out.arguments = call.arguments.substr(sent_arguments_[i]);
      sent_arguments_[i] = call.arguments.size();
    }
    if (!out.id.empty() || !out.arguments.empty()) delta.calls.push_back(std::move(out));
  }
  return delta;
}

std::vector<ReportedCall> ToolCallStream::calls() const {
  std::vector<ReportedCall> out;
  const std::vector<ParsedCall>& calls = parser_.calls();
  for (size_t i = 0; i < calls.size() && i < ids_.size(); ++i) {
    if (!calls[i].complete) continue;
    out.push_back({ids_[i], calls[i].name, calls[i].arguments});
  }
  return out;
}

}  // namespace floe::tools
