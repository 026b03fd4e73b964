// Stop strings over streamed text: consumes chunks, passes on only text that
// cannot be the start of a stop string, and reports a stop string as soon as it
// is complete, even when it spans several chunks. Output is truncated before
// the stop string; nothing is emitted after it.
//
// One instance per stream, used from one thread at a time.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace floe {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;     // Safe to emit now.
    bool stopped = false;  // A stop string matched; `text` ends right before it.
    std::string matched;   // The stop string, when stopped.
  };

  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Feeds the next chunk. After a stop, further chunks return nothing.
  Result Consume(absl::string_view chunk);

  // End of stream without a stop: returns the held-back text.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Text held back because it may begin a stop string.
  absl::string_view held() const { return held_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace floe
