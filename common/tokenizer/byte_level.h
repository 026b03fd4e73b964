// GPT-2 byte-level alphabet: every byte is written as one printable Unicode
// character in vocabulary files ("Ġ" for a space). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace floe::byte_level {

// The UTF-8 encoding of the character that stands for byte `b`.
absl::string_view ByteToChars(uint8_t b);

// Maps a vocabulary string back to the raw bytes it stands for. Returns false
// (and leaves `out` unspecified) if some character is outside the alphabet.
bool CharsToBytes(absl::string_view token, std::string* out);

// Inverse of CharsToBytes, for building vocabulary strings in tests and tools.
std::string BytesToChars(absl::string_view bytes);

}  // namespace floe::byte_level
