// A gRPC chat's output read for tool calls (GenerateRequest.chat with
// tools): a Sink that wraps the caller's, passing each choice's text
// through its own ToolCallStream (services/router/tools/), so chunks carry
// the content as text and the calls as tool_calls deltas, what the reader
// held back comes out before the choice's Complete, and a choice that made
// calls (and was not cut) finishes FINISH_REASON_TOOL_CALLS. The HTTP front
// does the same on its own JSON (openai/).
//
// The wrapped sink's callbacks run as GenerateCall runs them (serialized).
#pragma once

#include <string>

#include "services/router/generate_call.h"
#include "services/router/tools/tool_call_parser.h"

namespace floe {

GenerateCall::Sink WithToolCalls(GenerateCall::Sink sink, const tools::ToolCallFormat& format, std::string tool_name,
                                 bool parallel_tool_calls, int choices);

}  // namespace floe
