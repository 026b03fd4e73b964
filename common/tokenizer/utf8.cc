#include "common/tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace floe::utf8 {
namespace {

// Length of the valid sequence starting at text[i] (1..4), or 0 when invalid;
// `*maximal_subpart` gets how many bytes form the maximal invalid subpart
// (at least 1) and `*truncated` whether the sequence was only cut short by the
// end of the input.
size_t SequenceAt(const uint8_t* s, size_t n, size_t i, size_t* maximal_subpart, bool* truncated) {
  *truncated = false;
  *maximal_subpart = 1;
  const uint8_t c = s[i];
  if (c < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // Bounds for the second byte.
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n) {
      *truncated = true;
      *maximal_subpart = k;
      return 0;
    }
    const uint8_t b = s[i + k];
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *maximal_subpart = k;
      return 0;
    }
  }
  return len;
}

}  // namespace

size_t FindInvalid(absl::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    size_t subpart;
    bool truncated;
    const size_t len = SequenceAt(s, n, i, &subpart, &truncated);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

size_t CompletePrefixLength(absl::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // Only the last three bytes can start an unfinished sequence.
  const size_t start = n > 3 ? n - 3 : 0;
  for (size_t i = start; i < n; ++i) {
    if ((s[i] & 0xC0) == 0x80) continue;  // Continuation byte.
    size_t subpart;
    bool truncated;
    const size_t len = SequenceAt(s, n, i, &subpart, &truncated);
    if (len == 0 && truncated) return i;
    if (len > 0) i += len - 1;
  }
  return n;
}

void AppendLossy(absl::string_view bytes, std::string* out) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0, run_start = 0;
  while (i < n) {
    size_t subpart;
    bool truncated;
    const size_t len = s[i] < 0x80 ? 1 : SequenceAt(s, n, i, &subpart, &truncated);
    if (len > 0) {
      i += len;
      continue;
    }
    out->append(bytes.data() + run_start, i - run_start);
    out->append("\xEF\xBF\xBD");
    i += subpart;
    run_start = i;
  }
  out->append(bytes.data() + run_start, n - run_start);
}

}  // namespace floe::utf8
