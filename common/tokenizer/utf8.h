// UTF-8 helpers shared by the tokenizer, the detokenizer and the stop-string matcher.
// Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace floe::utf8 {

// Returns the byte offset of the first invalid UTF-8 sequence in `text`, or
// `text.size()` when the whole text is valid. Overlong forms, surrogates and
// code points above U+10FFFF are invalid. A sequence cut off by the end of the
// text is invalid too.
size_t FindInvalid(absl::string_view text);

// Length of the longest prefix of `bytes` that does not end inside a multibyte
// sequence that could still be completed by more bytes. Invalid bytes count as
// complete (they will be replaced, not waited for).
size_t CompletePrefixLength(absl::string_view bytes);

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD
// (the WHATWG / Rust `from_utf8_lossy` policy, which Hugging Face decoding uses).
void AppendLossy(absl::string_view bytes, std::string* out);

}  // namespace floe::utf8
