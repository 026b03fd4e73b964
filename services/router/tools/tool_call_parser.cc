#include "services/router/tools/tool_call_parser.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "common/json/bounded_json.h"
#include "services/router/tools/pythonic_calls.h"

namespace floe::tools {
namespace {

using nlohmann::ordered_json;

constexpr ToolCallFormat kFormats[] = {
    // Qwen 2.5/3, Hermes 2 Pro/3: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
    {"hermes", Layout::kTagged, "<tool_call>", "</tool_call>", "<tool_call>"},
    // Llama 3.1/3.2/3.3 JSON tool calling: {"name": ..., "parameters": ...}; the
    // <|python_tag|> marker is a special token, absent from skipped text.
    {"llama3_json", Layout::kLeadingJson, "<|python_tag|>", "", "<|python_tag|>"},
    // Llama 3.2/4 pythonic tool calling: [get_weather(city="Paris")]
    {"pythonic", Layout::kPythonic, "", "", ""},
    // Mistral v0.3 / Nemo: text, then [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...].
    {"mistral", Layout::kTaggedArray, "[TOOL_CALLS]", "", "[TOOL_CALLS]", /*keeps_special=*/true},
    // DeepSeek V3 / R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    // ```json {...} ```<｜tool▁call▁end｜>... <｜tool▁calls▁end｜>
    {"deepseek_v3", Layout::kBlocks, "", "", "<｜tool▁calls▁begin｜>", /*keeps_special=*/true,
     {"<｜tool▁call▁begin｜>"}, "```json\n",
     {"\n```<｜tool▁call▁end｜>", "```<｜tool▁call▁end｜>", "<｜tool▁call▁end｜>"}, "<｜tool▁sep｜>", "",
     {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>"}},
    // gpt-oss (harmony): <|channel|>analysis<|message|>...<|end|><|start|>assistant
    // <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>;
    // the final channel is the content, analysis is not.
    {"gpt_oss", Layout::kBlocks, "", "", "<|channel|>", /*keeps_special=*/true, {"<|start|>", "<|channel|>"},
     "<|message|>", {"<|end|>", "<|call|>", "<|return|>"}, "to=functions.", "<|channel|>analysis", {}},
};
constexpr ToolCallFormat kRequired = {"required", Layout::kJsonArray, "", "", ""};
constexpr ToolCallFormat kNamed = {"named", Layout::kArgumentsOnly, "", "", ""};

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialMarker(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  return 0;
}

// The earliest of `markers` in `text` (its position, and which in *found);
// npos when none is there.
template <size_t N>
size_t FindFirst(std::string_view text, const std::array<std::string_view, N>& markers, std::string_view* found) {
  size_t best = std::string_view::npos;
  for (std::string_view m : markers) {
    if (m.empty()) continue;
    const size_t at = text.find(m);
    if (at < best) {
      best = at;
      *found = m;
    }
  }
  return best;
}

template <size_t N>
size_t PartialMarkers(std::string_view text, const std::array<std::string_view, N>& markers) {
  size_t hold = 0;
  for (std::string_view m : markers) hold = std::max(hold, PartialMarker(text, m));
  return hold;
}

}  // namespace

const ToolCallFormat* FindFormat(std::string_view name) {
  for (const ToolCallFormat& f : kFormats)
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<std::string_view> FormatNames() {
  std::vector<std::string_view> out;
  for (const ToolCallFormat& f : kFormats) out.push_back(f.name);
  return out;
}

const ToolCallFormat* DetectFormat(std::string_view source) {
  for (const ToolCallFormat& f : kFormats)
    if (!f.detect.empty() && source.find(f.detect) != std::string_view::npos) return &f;
  return nullptr;
}

const ToolCallFormat& RequiredFormat() { return kRequired; }
const ToolCallFormat& NamedFormat() { return kNamed; }

ToolCallParser::ToolCallParser(const ToolCallFormat& format, std::string name)
    : format_(format), fixed_name_(std::move(name)) {}

void ToolCallParser::Feed(std::string_view text) {
  if (state_ == State::kDone) return;
  buffer_.append(text);
  Run();
}

void ToolCallParser::Finish() {
  if (finished_) return;
  finished_ = true;
  Run();
  switch (state_) {
    case State::kInCall:
      if (format_.layout == Layout::kArgumentsOnly) {
        ParsedCall& call = calls_.back();
        auto parsed = ParseUntrustedJson<ordered_json>(call.arguments);
        if (parsed.ok() && parsed->is_object()) {
          call.complete = true;
        } else {
          DropCall(call.arguments);
        }
      } else {
        // An unfinished call is not a call.
        DropCall(format_.layout == Layout::kTagged ? call_text_ + buffer_ : scan_.raw + buffer_);
      }
      break;
    default:
      content_ += buffer_;
      break;
  }
  buffer_.clear();
  state_ = State::kDone;
}

void ToolCallParser::StartCall() {
  calls_.emplace_back();
  call_open_ = true;
  scan_ = ObjectScan();
}

void ToolCallParser::DropCall(std::string_view text) {
  if (call_open_ || (!calls_.empty() && !calls_.back().complete)) {
    if (!calls_.back().name.empty()) ++dropped_after_name_;
    calls_.pop_back();
  }
  call_open_ = false;
  content_ += held_space_;
  held_space_.clear();
  content_ += consumed_;
  consumed_.clear();
  content_.append(text);
}

void ToolCallParser::ReportName() {
  if (!calls_.back().name.empty() || scan_.name_raw.empty()) return;
  auto name = ParseUntrustedJson<ordered_json>(scan_.name_raw);
  if (name.ok() && name->is_string() && !name->get_ref<const std::string&>().empty())
    calls_.back().name = name->get<std::string>();
}

void ToolCallParser::ReportArguments() {
  ParsedCall& call = calls_.back();
  if (call.name.empty() || scan_.arguments_start == std::string::npos) return;
  if (scan_.raw[scan_.arguments_start] != '{') return;  // not an object: refused at the end
  // Only what is new since the last piece (the arguments are a growing
  // prefix of the raw text): no copy of the whole per piece.
  const size_t end = scan_.arguments_end == std::string::npos ? scan_.raw.size() : scan_.arguments_end;
  const size_t from = scan_.arguments_start + call.arguments.size();
  if (end > from) call.arguments.append(scan_.raw, from, end - from);
}

void ToolCallParser::ScanByte(char c) {
  ObjectScan& s = scan_;
  s.raw += c;
  const size_t at = s.raw.size() - 1;
  auto end_value = [&](size_t end) {
    if (s.value_is_name) s.name_raw = s.raw.substr(s.value_start, end - s.value_start);
    if (s.value_is_arguments) s.arguments_end = end;
    s.part = ObjectScan::Part::kAfterValue;
  };
  if (s.in_string) {
    if (s.escaped) {
      s.escaped = false;
    } else if (c == '\\') {
      s.escaped = true;
    } else if (c == '"') {
      s.in_string = false;
      if (s.depth == 1 && s.part == ObjectScan::Part::kKey) {
        auto key = ParseUntrustedJson<ordered_json>(s.raw.substr(s.value_start));
        const std::string k = key.ok() && key->is_string() ? key->get<std::string>() : "";
        s.value_is_name = k == "name";
        s.value_is_arguments = k == "arguments" || k == "parameters";
        s.part = ObjectScan::Part::kColon;
        s.value_start = std::string::npos;
      } else if (s.depth == 1 && s.part == ObjectScan::Part::kValue) {
        end_value(at + 1);
      }
    }
    return;
  }
  const bool top_value = s.depth == 1 && s.part == ObjectScan::Part::kValue;
  switch (c) {
    case '"':
      s.in_string = true;
      if (s.depth == 1 && s.part == ObjectScan::Part::kKey) s.value_start = at;
      if (top_value && s.value_start == std::string::npos) {
        s.value_start = at;
        if (s.value_is_arguments) s.arguments_start = at;  // a string holding the arguments
      }
      break;
    case '{':
    case '[':
      if (top_value && s.value_start == std::string::npos) {
        s.value_start = at;
        if (s.value_is_arguments) s.arguments_start = at;
      }
      ++s.depth;
      break;
    case '}':
    case ']':
      if (top_value && s.value_start != std::string::npos) end_value(at);  // a scalar ends here
      --s.depth;
      if (s.depth == 1 && s.part == ObjectScan::Part::kValue) end_value(at + 1);
      break;
    case ':':
      if (s.depth == 1 && s.part == ObjectScan::Part::kColon) s.part = ObjectScan::Part::kValue;
      break;
    case ',':
      if (top_value && s.value_start != std::string::npos) end_value(at);
      if (s.depth == 1) s.part = ObjectScan::Part::kKey;
      break;
    default:
      if (top_value && s.value_start == std::string::npos && !IsSpace(c)) {
        s.value_start = at;
        if (s.value_is_arguments) s.arguments_start = at;
      }
      break;
  }
}

bool ToolCallParser::ScanObject() {
  size_t used = 0;
  bool done = false;
  for (; used < buffer_.size() && !done; ++used) {
    ScanByte(buffer_[used]);
    done = scan_.depth == 0;
  }
  if (format_.layout == Layout::kTagged) call_text_.append(buffer_, 0, used);
  buffer_.erase(0, used);
  ReportName();
  ReportArguments();
  return done;
}

void ToolCallParser::EndCall() {
  call_open_ = false;
  auto object = ParseUntrustedJson<ordered_json>(scan_.raw);
  ParsedCall& call = calls_.back();
  const bool ok = object.ok() && object->is_object() && !call.name.empty() &&
                  (scan_.arguments_start == std::string::npos || scan_.raw[scan_.arguments_start] == '{' ||
                   scan_.raw[scan_.arguments_start] == '"');
  if (!ok) {
    call_open_ = true;
    DropCall(format_.layout == Layout::kTagged ? call_text_ : scan_.raw);
    return;
  }
  consumed_.clear();
  if (scan_.arguments_start == std::string::npos) {
    call.arguments = "{}";
  } else if (scan_.raw[scan_.arguments_start] == '"') {
    // Some models write the arguments as a string holding the object.
    const std::string text = scan_.raw.substr(scan_.arguments_start, scan_.arguments_end - scan_.arguments_start);
    auto inner = ParseUntrustedJson<ordered_json>(text);
    std::optional<ordered_json> object;
    if (inner.ok() && inner->is_string()) {
      auto decoded = ParseUntrustedJson<ordered_json>(inner->get_ref<const std::string&>());
      if (decoded.ok() && decoded->is_object()) object = *std::move(decoded);
    }
    if (!object) {
      call_open_ = true;
      DropCall(format_.layout == Layout::kTagged ? call_text_ : scan_.raw);
      return;
    }
    call.arguments = inner->get<std::string>();
  }
  call.complete = true;
}

void ToolCallParser::AddContent(std::string_view text) {
  if ((format_.layout != Layout::kTagged && format_.layout != Layout::kBlocks) || calls_.empty()) {
    content_.append(text);
    return;
  }
  const size_t last = text.find_last_not_of(" \n\r\t");
  if (last == std::string_view::npos) {
    held_space_.append(text);
    return;
  }
  content_ += held_space_;
  held_space_.clear();
  content_.append(text.substr(0, last + 1));
  held_space_.append(text.substr(last + 1));
}

bool ToolCallParser::TakeContentUntilBegin() {
  const size_t at = buffer_.find(format_.begin);
  if (at != std::string::npos) {
    AddContent(std::string_view(buffer_).substr(0, at));
    held_space_.clear();  // layout between calls
    buffer_.erase(0, at + format_.begin.size());
    call_text_ = std::string(format_.begin);
    return true;
  }
  const size_t hold = finished_ ? 0 : PartialMarker(buffer_, format_.begin);
  AddContent(std::string_view(buffer_).substr(0, buffer_.size() - hold));
  buffer_.erase(0, buffer_.size() - hold);
  return false;
}

void ToolCallParser::Run() {
  if (format_.layout == Layout::kBlocks) {
    while (StepBlocks()) {
    }
    return;
  }
  for (;;) {
    switch (state_) {
      case State::kStart: {
        if (format_.layout == Layout::kTagged || format_.layout == Layout::kTaggedArray) {
          state_ = State::kContent;
          continue;
        }
        if (format_.layout == Layout::kArgumentsOnly) {
          StartCall();
          calls_.back().name = fixed_name_;
          state_ = State::kInCall;
          continue;
        }
        if (format_.layout == Layout::kPythonic) return RunPythonic(finished_);
        // kLeadingJson, kJsonArray: what the output starts with decides.
        size_t i = 0;
        while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
        std::string_view rest = std::string_view(buffer_).substr(i);
        if (!format_.begin.empty() && format_.layout == Layout::kLeadingJson) {
          if (rest.substr(0, format_.begin.size()) == format_.begin) {
            i += format_.begin.size();
            while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
            rest = std::string_view(buffer_).substr(i);
          } else if (!finished_ && !rest.empty() && std::string_view(format_.begin).substr(0, rest.size()) == rest) {
            return;  // maybe the marker, not yet whole
          }
        }
        if (rest.empty()) {
          if (!finished_) return;
          state_ = State::kContent;
          continue;
        }
        const char opener = format_.layout == Layout::kJsonArray ? '[' : '{';
        if (rest[0] != opener) {
          state_ = State::kContent;
          continue;
        }
        // What came before the calls (whitespace, the marker) is no content,
        // unless a call turns out not to be one.
        const size_t lead = i + (format_.layout == Layout::kJsonArray ? 1 : 0);
        consumed_.append(buffer_, 0, lead);
        buffer_.erase(0, lead);
        state_ = State::kOutside;
        continue;
      }
      case State::kContent:
        if (format_.layout == Layout::kTagged) {
          if (!TakeContentUntilBegin()) return;
          StartCall();
          state_ = State::kInCall;
          continue;
        }
        if (format_.layout == Layout::kTaggedArray) {
          if (!TakeContentUntilBegin()) return;
          consumed_ = call_text_;  // the marker: content again if no array follows
          state_ = State::kArrayOpen;
          continue;
        }
        content_ += buffer_;
        buffer_.clear();
        return;
      case State::kArrayOpen: {
        // kTaggedArray: after the marker, whitespace and the array's '['.
        size_t i = 0;
        while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
        consumed_.append(buffer_, 0, i);
        buffer_.erase(0, i);
        if (buffer_.empty() && !finished_) return;
        if (!buffer_.empty() && buffer_[0] == '[') {
          consumed_ += '[';
          buffer_.erase(0, 1);
          state_ = State::kOutside;
          continue;
        }
        content_ += consumed_;
        consumed_.clear();
        state_ = State::kContent;
        continue;
      }
      case State::kOutside: {
        // Between calls: whitespace and separators (';' between llama3_json
        // objects, ',' in an array), then the next '{'.
        size_t i = 0;
        const bool array = format_.layout == Layout::kJsonArray || format_.layout == Layout::kTaggedArray;
        const char separator = array ? ',' : ';';
        while (i < buffer_.size() && (IsSpace(buffer_[i]) || buffer_[i] == separator)) ++i;
        consumed_.append(buffer_, 0, i);
        if (i == buffer_.size()) {
          buffer_.clear();
          if (!finished_) return;
          state_ = State::kAfterCalls;
          continue;
        }
        if (buffer_[i] == '{') {
          buffer_.erase(0, i);
          StartCall();
          state_ = State::kInCall;
          continue;
        }
        if (array && buffer_[i] == ']') {
          consumed_.clear();
          buffer_.erase(0, i + 1);
          state_ = State::kAfterCalls;
          continue;
        }
        content_ += consumed_;  // the rest is text
        consumed_.clear();
        buffer_.erase(0, i);
        state_ = State::kContent;
        continue;
      }
      case State::kInCall: {
        if (format_.layout == Layout::kArgumentsOnly) {
          // The arguments are the output itself (leading whitespace aside).
          ParsedCall& call = calls_.back();
          size_t i = 0;
          if (call.arguments.empty())
            while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
          call.arguments.append(buffer_, i, std::string::npos);
          buffer_.clear();
          return;
        }
        if (scan_.raw.empty()) {
          size_t i = 0;
          while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
          if (format_.layout == Layout::kTagged) call_text_.append(buffer_, 0, i);
          buffer_.erase(0, i);
          if (buffer_.empty()) return;
          if (buffer_[0] != '{') {  // <tool_call> followed by something else
            DropCall(call_text_);
            state_ = State::kContent;
            continue;
          }
        }
        if (!ScanObject()) return;
        EndCall();
        state_ = format_.layout == Layout::kTagged ? State::kAfterCalls : State::kOutside;
        continue;
      }
      case State::kAfterCalls: {
        if (format_.layout == Layout::kTagged) {
          // After a call object: whitespace, then the end marker.
          size_t i = 0;
          while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
          std::string_view rest = std::string_view(buffer_).substr(i);
          if (rest.substr(0, format_.end.size()) == format_.end) {
            buffer_.erase(0, i + format_.end.size());
            state_ = State::kContent;
            continue;
          }
          if (!finished_ && std::string_view(format_.end).substr(0, rest.size()) == rest) return;
          state_ = State::kContent;  // no end marker: the text goes on as content
          continue;
        }
        // After the last call: only whitespace is expected; anything else is text.
        size_t i = 0;
        while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
        buffer_.erase(0, i);
        if (buffer_.empty()) return;
        state_ = State::kContent;
        continue;
      }
      case State::kDone:
        return;
      default:
        return;  // kBlocks' states, not reached here
    }
  }
}

bool ToolCallParser::StepBlocks() {
  switch (state_) {
    case State::kStart:
      state_ = State::kContent;
      return true;
    case State::kContent: {
      std::string_view begin, strip;
      const size_t at_begin = FindFirst(buffer_, format_.block_begin, &begin);
      const size_t at_strip = FindFirst(buffer_, format_.strip, &strip);
      const size_t at = std::min(at_begin, at_strip);
      if (at == std::string::npos) {
        const size_t hold =
            finished_ ? 0 : std::max(PartialMarkers(buffer_, format_.block_begin), PartialMarkers(buffer_, format_.strip));
        AddContent(std::string_view(buffer_).substr(0, buffer_.size() - hold));
        buffer_.erase(0, buffer_.size() - hold);
        return false;
      }
      AddContent(std::string_view(buffer_).substr(0, at));
      if (at_strip < at_begin) {
        buffer_.erase(0, at + strip.size());
        return true;
      }
      held_space_.clear();  // layout before a block
      call_text_ = std::string(begin);
      header_ = std::string(begin);  // the header's own marker counts (<|channel|>analysis)
      buffer_.erase(0, at + begin.size());
      state_ = State::kHeader;
      return true;
    }
    case State::kHeader: {
      const size_t at = buffer_.find(format_.body_begin);
      if (at == std::string::npos) {
        if (finished_) {  // a header that never ends: text
          AddContent(call_text_ + buffer_);
          buffer_.clear();
          call_text_.clear();
          state_ = State::kContent;
          return false;
        }
        const size_t take = buffer_.size() - PartialMarker(buffer_, format_.body_begin);
        header_.append(buffer_, 0, take);
        call_text_.append(buffer_, 0, take);
        buffer_.erase(0, take);
        return false;
      }
      header_.append(buffer_, 0, at);
      call_text_.append(buffer_, 0, at + format_.body_begin.size());
      buffer_.erase(0, at + format_.body_begin.size());
      std::string name;
      if (const size_t n = header_.find(format_.name_after); !format_.name_after.empty() && n != std::string::npos) {
        const size_t from = n + format_.name_after.size();
        const size_t to = header_.find_first_of(" \t\r\n<", from);
        name = header_.substr(from, to == std::string::npos ? std::string::npos : to - from);
      }
      if (!name.empty()) {
        StartCall();
        calls_.back().name = std::move(name);
        body_ = Body::kCall;
        body_started_ = false;
      } else if (!format_.hidden.empty() && header_.find(format_.hidden) != std::string::npos) {
        body_ = Body::kHidden;
      } else {
        body_ = Body::kContent;
      }
      state_ = State::kBody;
      return true;
    }
    case State::kBody: {
      std::string_view end;
      const size_t at = FindFirst(buffer_, format_.body_end, &end);
      const size_t take =
          at != std::string::npos ? at : buffer_.size() - (finished_ ? 0 : PartialMarkers(buffer_, format_.body_end));
      std::string_view text = std::string_view(buffer_).substr(0, take);
      switch (body_) {
        case Body::kCall: {
          call_text_.append(text);
          if (!body_started_) {
            while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
            body_started_ = !text.empty();
          }
          calls_.back().arguments.append(text);
          break;
        }
        case Body::kHidden:
          break;
        case Body::kContent:
          AddContent(text);
          break;
      }
      buffer_.erase(0, take);
      if (at != std::string::npos) {
        call_text_.append(end);
        buffer_.erase(0, end.size());
      } else if (!finished_) {
        return false;
      }
      EndBody();  // an end marker, or the output's end (gpt-oss stops on <|call|>)
      state_ = State::kContent;
      return true;
    }
    default:
      return false;
  }
}

void ToolCallParser::EndBody() {
  if (body_ == Body::kCall) {
    auto parsed = ParseUntrustedJson<ordered_json>(calls_.back().arguments);
    if (parsed.ok() && parsed->is_object()) {
      calls_.back().complete = true;
      call_open_ = false;
    } else {
      DropCall(call_text_);
    }
  }
  call_text_.clear();
}

void ToolCallParser::RunPythonic(bool finished) {
  // Nothing is known until the list closes: hold the text.
  size_t i = 0;
  while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
  if (i < buffer_.size() && buffer_[i] != '[') {
    state_ = State::kContent;
    content_ += buffer_;
    buffer_.clear();
    return;
  }
  const std::optional<size_t> end = PythonicListEnd(buffer_);
  if (!end && !finished) return;
  std::optional<std::vector<PythonicCall>> parsed;
  if (end) {
    bool only_space_after = true;
    for (size_t j = *end; j < buffer_.size(); ++j) only_space_after = only_space_after && IsSpace(buffer_[j]);
    if (only_space_after && finished) parsed = ParsePythonicCalls(std::string_view(buffer_).substr(0, *end));
    if (!finished) return;  // text may still follow the list
  }
  if (!parsed || parsed->empty()) {
    state_ = State::kContent;
    content_ += buffer_;
    buffer_.clear();
    return;
  }
  for (PythonicCall& call : *parsed) calls_.push_back({std::move(call.name), std::move(call.arguments), true});
  buffer_.clear();
  state_ = State::kDone;
}

}  // namespace floe::tools
