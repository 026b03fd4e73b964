// Tool calls out of a model's text, read incrementally: one parser over a
// table of formats (ToolCallFormat), not a copy of the code per model.
//
// A format says where calls sit in the output and how a call is spelled:
//   kTagged        calls anywhere, each between two markers, a JSON object
//                  {"name": ..., "arguments": {...}} inside (hermes:
//                  <tool_call>...</tool_call>); the text outside is content
//   kLeadingJson   the whole output is calls: an optional marker, then JSON
//                  call objects separated by ';' (llama3_json); an output
//                  that does not start with '{' is content
//   kJsonArray     the whole output is a JSON array of {"name", "parameters"}
//                  (what tool_choice "required" constrains the model to)
//   kArgumentsOnly the whole output is one call's arguments, its name known
//                  beforehand (tool_choice naming a function)
//   kPythonic      the whole output is [f(a=1, b="x"), g()] (pythonic);
//                  arguments are converted to JSON once the list closes
//   kTaggedArray   text, then a marker and a JSON array of call objects
//                  (mistral: [TOOL_CALLS][{"name": ..., "arguments": ...}])
//   kBlocks        the output is blocks: a begin marker, a header up to a
//                  body marker, a body up to an end marker. A header naming
//                  a function (after `name_after`) makes its body a call's
//                  JSON arguments; a header holding `hidden` makes its body
//                  not content (gpt-oss's analysis channel); any other body
//                  is content. Text outside blocks is content, less the
//                  `strip` markers (deepseek_v3: <｜tool▁call▁begin｜>
//                  function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//                  <｜tool▁call▁end｜>; gpt_oss: <|channel|>commentary
//                  to=functions.NAME<|message|>{...}<|call|>)
// Feed takes the output as it is decoded, in pieces of any size (a marker
// or a multi-byte character may be split anywhere); content() is the text
// known to be content so far (a possible marker's start is held back) and
// calls() the calls seen so far: a call's name is set once it is complete,
// its arguments (JSON text, exactly as the model wrote the value) only ever
// grow by appending. So a stream of the differences equals the state after
// the whole output (tool_call_stream.h). A call whose text turns out not to
// be a call (malformed JSON, no name, arguments that are not an object) is
// dropped and its text becomes content, once known; Finish ends the output
// (an unfinished call is dropped the same way). Whitespace between and
// after tagged calls is not content.
//
// Every piece of state is bounded by the output's length. Not thread-safe:
// one parser per response.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace floe::tools {

enum class Layout { kTagged, kLeadingJson, kJsonArray, kArgumentsOnly, kPythonic, kTaggedArray, kBlocks };

struct ToolCallFormat {
  std::string_view name;
  Layout layout;
  std::string_view begin;  // kTagged: before each call; kLeadingJson: an optional leading marker
  std::string_view end;    // kTagged: after each call
  // A marker in a chat template's source that makes `auto` pick this format
  // (empty: never picked by auto).
  std::string_view detect;
  // The markers are special tokens: the output must be decoded with them
  // (skip_special_tokens false), as vLLM does for these parsers.
  bool keeps_special = false;
  // kBlocks only (empty entries unused).
  std::array<std::string_view, 2> block_begin{};
  std::string_view body_begin;
  std::array<std::string_view, 3> body_end{};  // the first found ends a body
  std::string_view name_after;
  std::string_view hidden;
  std::array<std::string_view, 3> strip{};
};

// The formats --tool-call-parser names (hermes, llama3_json, pythonic,
// mistral, deepseek_v3, gpt_oss), or
// null. kJsonArray and kArgumentsOnly are the router's own (RequiredFormat,
// NamedFormat).
const ToolCallFormat* FindFormat(std::string_view name);
std::vector<std::string_view> FormatNames();
// What `auto` picks for a chat template: the first format whose `detect`
// marker the source contains; null when none does.
const ToolCallFormat* DetectFormat(std::string_view template_source);
const ToolCallFormat& RequiredFormat();
const ToolCallFormat& NamedFormat();

struct ParsedCall {
  std::string name;       // empty until the name is complete
  std::string arguments;  // JSON text of the arguments so far
  bool complete = false;
};

class ToolCallParser {
 public:
  // `name`: kArgumentsOnly's function.
  explicit ToolCallParser(const ToolCallFormat& format, std::string name = "");

  void Feed(std::string_view text);
  void Finish();

  const std::string& content() const { return content_; }
  const std::vector<ParsedCall>& calls() const { return calls_; }
  // Calls that were dropped after their name had been reported (a stream
  // had sent them): their text went to content instead.
  int dropped_after_name() const { return dropped_after_name_; }

 private:
  // The JSON call object being read ({"name": ..., "arguments": ...}).
  struct ObjectScan {
    std::string raw;                  // the object's text so far
    int depth = 0;                    // of brackets, outside strings
    bool in_string = false, escaped = false;
    enum class Part { kKey, kColon, kValue, kAfterValue } part = Part::kKey;
    std::string key;                  // the top-level key being read or last read (raw, in quotes)
    size_t value_start = std::string::npos;  // in raw
    bool value_is_arguments = false, value_is_name = false;
    std::string name_raw;             // the name's JSON string text
    size_t arguments_start = std::string::npos, arguments_end = std::string::npos;
  };
  enum class State { kStart, kContent, kArrayOpen, kOutside, kInCall, kAfterCalls, kHeader, kBody, kDone };
  enum class Body { kCall, kHidden, kContent };

  void Run();
  // kTagged: moves content up to a possible begin marker; true when a call starts.
  bool TakeContentUntilBegin();
  void AddContent(std::string_view text);
  // Reads bytes of buffer_ into the call object; true once it is complete.
  bool ScanObject();
  void ScanByte(char c);
  void StartCall();
  void EndCall();
  void DropCall(std::string_view text);
  void ReportName();
  void ReportArguments();
  void RunPythonic(bool finished);
  // kBlocks: one step of the block reader; false when it needs more input.
  bool StepBlocks();
  void EndBody();

  const ToolCallFormat& format_;
  std::string fixed_name_;
  State state_ = State::kStart;
  std::string buffer_;  // fed, not yet consumed
  std::string content_;
  std::vector<ParsedCall> calls_;
  bool call_open_ = false;
  ObjectScan scan_;
  std::string call_text_;  // kTagged: the whole call text (markers included), for DropCall
  // kTagged: whitespace after a call, content only if text follows it
  // (between and after calls it is layout, not an answer).
  std::string held_space_;
  // kLeadingJson, kJsonArray: the layout consumed since the last call (the
  // leading marker, whitespace, separators), content if what follows is not
  // a call.
  std::string consumed_;
  bool finished_ = false;
  int dropped_after_name_ = 0;
  // kBlocks: the block being read.
  std::string header_;
  Body body_ = Body::kContent;
  bool body_started_ = false;  // a call's arguments: leading whitespace skipped
};

}  // namespace floe::tools
