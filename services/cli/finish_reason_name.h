// The lower-case finish-reason words the CLI and `floe bench` print ("length",
// "stop", ...), as OpenAI-style APIs and vLLM name them.
#pragma once

#include "floe/v1/generate.pb.h"

namespace floe {

inline const char* FinishReasonName(floe::v1::FinishReason reason) {
  switch (reason) {
    case floe::v1::FINISH_REASON_LENGTH: return "length";
    case floe::v1::FINISH_REASON_STOP: return "stop";
    case floe::v1::FINISH_REASON_ABORT: return "abort";
    case floe::v1::FINISH_REASON_CONTEXT: return "context";
    case floe::v1::FINISH_REASON_TOOL_CALLS: return "tool_calls";
    default: return "unspecified";
  }
}

}  // namespace floe
