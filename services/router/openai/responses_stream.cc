#include "services/router/openai/responses_stream.h"

namespace floe::openai {

using nlohmann::ordered_json;

ResponsesStream::ResponsesStream(ordered_json response, std::function<std::string(const char*)> make_id)
    : response_(std::move(response)), make_id_(std::move(make_id)) {
  response_["object"] = "response";
  response_["status"] = "in_progress";
  response_["error"] = nullptr;
  response_["incomplete_details"] = nullptr;
  response_["output"] = ordered_json::array();
  response_["usage"] = nullptr;
}

ordered_json ResponsesStream::Event(const char* type, ordered_json fields) {
  ordered_json event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : fields.items()) event[key] = std::move(value);
  return event;
}

std::vector<ordered_json> ResponsesStream::Start() {
  return {Event("response.created", {{"response", response_}}), Event("response.in_progress", {{"response", response_}})};
}

std::vector<ordered_json> ResponsesStream::Add(const tools::ToolCallDelta& delta) {
  std::vector<ordered_json> events;
  if (!delta.content.empty()) {
    if (message_index_ < 0) {
      message_index_ = static_cast<int>(items_.size());
      items_.push_back({{"id", make_id_("msg_")},
                        {"type", "message"},
                        {"status", "in_progress"},
                        {"role", "assistant"},
                        {"content", ordered_json::array()}});
      events.push_back(Event("response.output_item.added", {{"output_index", message_index_}, {"item", items_.back()}}));
      ordered_json& item = items_[message_index_];
      item["content"].push_back({{"type", "output_text"}, {"text", ""}, {"annotations", ordered_json::array()}});
      events.push_back(Event("response.content_part.added", {{"item_id", item["id"]},
                                                              {"output_index", message_index_},
                                                              {"content_index", 0},
                                                              {"part", item["content"][0]}}));
    }
    ordered_json& item = items_[message_index_];
    item["content"][0]["text"].get_ref<std::string&>() += delta.content;
    events.push_back(Event("response.output_text.delta", {{"item_id", item["id"]},
                                                           {"output_index", message_index_},
                                                           {"content_index", 0},
                                                           {"delta", delta.content},
                                                           {"logprobs", ordered_json::array()}}));
  }
  for (const tools::ToolCallDelta::Call& call : delta.calls) {
    auto at = call_items_.find(call.index);
    if (at == call_items_.end()) {
      const int index = static_cast<int>(items_.size());
      at = call_items_.emplace(call.index, index).first;
      items_.push_back({{"id", make_id_("fc_")},
                        {"type", "function_call"},
                        {"status", "in_progress"},
                        {"arguments", ""},
                        {"call_id", call.id},
                        {"name", call.name}});
      events.push_back(Event("response.output_item.added", {{"output_index", index}, {"item", items_.back()}}));
    }
    if (call.arguments.empty()) continue;
    ordered_json& item = items_[at->second];
    item["arguments"].get_ref<std::string&>() += call.arguments;
    events.push_back(Event("response.function_call_arguments.delta",
                           {{"item_id", item["id"]}, {"output_index", at->second}, {"delta", call.arguments}}));
  }
  return events;
}

std::vector<ordered_json> ResponsesStream::Finish(const floe::v1::Complete& complete) {
  std::vector<ordered_json> events;
  for (size_t i = 0; i < items_.size(); ++i) {
    ordered_json& item = items_[i];
    const int index = static_cast<int>(i);
    if (item["type"] == "message") {
      ordered_json& part = item["content"][0];
      events.push_back(Event("response.output_text.done", {{"item_id", item["id"]},
                                                           {"output_index", index},
                                                           {"content_index", 0},
                                                           {"text", part["text"]},
                                                           {"logprobs", ordered_json::array()}}));
      events.push_back(Event("response.content_part.done",
                             {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    } else {
      events.push_back(Event("response.function_call_arguments.done",
                             {{"item_id", item["id"]}, {"output_index", index}, {"arguments", item["arguments"]}}));
    }
    item["status"] = "completed";
    events.push_back(Event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  }
  const bool cut = complete.finish_reason() == floe::v1::FINISH_REASON_LENGTH ||
                   complete.finish_reason() == floe::v1::FINISH_REASON_CONTEXT;
  response_["status"] = cut ? "incomplete" : "completed";
  if (cut) response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response_["output"] = items_;
  const floe::v1::Usage& usage = complete.usage();
  response_["usage"] = {{"input_tokens", usage.prompt_tokens()},
                        {"input_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens()}}},
                        {"output_tokens", usage.completion_tokens()},
                        {"output_tokens_details", {{"reasoning_tokens", 0}}},
                        {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()}};
  events.push_back(Event(cut ? "response.incomplete" : "response.completed", {{"response", response_}}));
  return events;
}

}  // namespace floe::openai
