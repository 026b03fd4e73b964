// A /v1/responses answer built from what the model wrote, as OpenAI's
// Responses API shapes it: output items (a "message" with one output_text
// part, "function_call"s with call_id, name and arguments) and the stream
// events that build them (response.created, response.in_progress,
// response.output_item.added, response.content_part.added,
// response.output_text.delta, response.function_call_arguments.delta, the
// matching .done events, then response.completed or response.incomplete).
// A whole response is the same builder fed the whole output at once, so a
// stream's events always add up to the whole response. Items are opened in
// the order their first text or call arrives and closed at the end.
//
// Not thread-safe: one per response, on its relay's callbacks.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "floe/v1/generate.pb.h"
#include "services/router/tools/tool_call_stream.h"

namespace floe::openai {

class ResponsesStream {
 public:
  // `response`: the Response object's fixed fields (id, created_at, model,
  // instructions, tools, ...); `make_id` gives item ids ("msg_...", "fc_...").
  ResponsesStream(nlohmann::ordered_json response, std::function<std::string(const char* prefix)> make_id);

  // Each returns the events it produced, in order (each has "type" and
  // "sequence_number").
  std::vector<nlohmann::ordered_json> Start();
  std::vector<nlohmann::ordered_json> Add(const tools::ToolCallDelta& delta);
  std::vector<nlohmann::ordered_json> Finish(const floe::v1::Complete& complete);

  // After Finish: the whole Response object.
  const nlohmann::ordered_json& response() const { return response_; }

 private:
  nlohmann::ordered_json Event(const char* type, nlohmann::ordered_json fields);

  nlohmann::ordered_json response_;
  std::function<std::string(const char*)> make_id_;
  int sequence_ = 0;
  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();  // the output so far
  int message_index_ = -1;                 // the message item's output index
  std::map<int, int> call_items_;          // a call's index -> its output index
};

}  // namespace floe::openai
