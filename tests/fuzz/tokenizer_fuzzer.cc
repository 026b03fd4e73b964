// Fuzzes the real tokenizers (the built-in tiny model's Llama 3.1 byte-level
// BPE and the Llama 2 SentencePiece BPE, loaded once) on arbitrary bytes and
// id lists, and the router's stop-string matcher. Input: byte 0 picks the
// mode, the rest is the payload.
//   0, 1  Encode the payload (Llama 3.1, Llama 2): fails exactly on invalid
//         UTF-8; otherwise every id is in the vocabulary, decode(encode(x)) ==
//         x (Llama 2: for text without "▁" or an added token's spelling),
//         add_special_tokens only adds BOS, and streaming detokenization of
//         the ids gives the same text.
//   2     Decode the payload as int32 ids (byte 1: tokenizer, skip special):
//         fails exactly when an id is outside the vocabulary; the text is
//         valid UTF-8, re-encodes, and equals the streamed detokenization
//         (IncrementalDetokenizer's promise), chunks each valid UTF-8.
//   3     Stop strings over chunked text: output is the text up to the first
//         completed stop string, held-back text stays shorter than the
//         longest stop string.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_string_matcher.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe {
namespace {

struct Loaded {
  std::unique_ptr<Tokenizer> llama3;
  std::unique_ptr<Tokenizer> llama2;
};

const Loaded& Tokenizers() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
    auto t3 = Tokenizer::Load(fuzz::TokenizerDir("tokenizer-llama3_1"));
    auto t2 = Tokenizer::Load(fuzz::TokenizerDir("tokenizer-llama2"));
    FUZZ_CHECK(t3.ok() && t2.ok(), "cannot load the reference tokenizers (run scripts/bootstrap.sh): %s %s",
               t3.status().ToString().c_str(), t2.status().ToString().c_str());
    l->llama3 = std::move(*t3);
    l->llama2 = std::move(*t2);
    return l;
  }();
  return *loaded;
}

bool ValidUtf8(absl::string_view s) { return utf8::FindInvalid(s) == s.size(); }

// Streams `ids` through an IncrementalDetokenizer in chunks of 1..4 ids
// (sizes from `shape`), checking each chunk; returns the whole text.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip, uint32_t shape) {
  IncrementalDetokenizer detok(&t, skip);
  std::string text;
  for (size_t i = 0; i < ids.size();) {
    const size_t n = std::min<size_t>(1 + (shape & 3), ids.size() - i);
    shape = shape * 1103515245u + 12345u;
    auto chunk = detok.Add(absl::MakeConstSpan(ids).subspan(i, n));
    FUZZ_CHECK(chunk.ok(), "detokenizer refused valid ids: %s", chunk.status().ToString().c_str());
    FUZZ_CHECK(ValidUtf8(*chunk), "detokenizer chunk is not valid UTF-8");
    FUZZ_CHECK(detok.pending_bytes() <= 3, "detokenizer holds %zu bytes", detok.pending_bytes());
    text += *chunk;
    i += n;
  }
  const std::string tail = detok.Finish();
  FUZZ_CHECK(ValidUtf8(tail), "detokenizer Finish is not valid UTF-8");
  return text + tail;
}

void CheckEncode(const Tokenizer& t, absl::string_view text, bool promises_round_trip) {
  auto ids = t.Encode(text, /*add_special_tokens=*/false);
  FUZZ_CHECK(ids.ok() == ValidUtf8(text), "Encode ok=%d on %s UTF-8 (%s)", ids.ok(),
             ValidUtf8(text) ? "valid" : "invalid", ids.status().ToString().c_str());
  if (!ids.ok()) {
    FUZZ_CHECK(ids.status().code() == absl::StatusCode::kInvalidArgument, "%s", ids.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(t.ValidateIds(*ids).ok(), "Encode produced an id outside the vocabulary");
  FUZZ_CHECK(text.empty() == ids->empty(), "%zu bytes encode to %zu ids", text.size(), ids->size());
  auto decoded = t.Decode(*ids, /*skip_special_tokens=*/false);
  FUZZ_CHECK(decoded.ok(), "Decode(Encode(x)) failed: %s", decoded.status().ToString().c_str());
  if (promises_round_trip) {
    FUZZ_CHECK(*decoded == text, "round trip: %zu bytes in, %zu bytes out", text.size(), decoded->size());
  }
  FUZZ_CHECK(Stream(t, *ids, false, static_cast<uint32_t>(text.size())) == *decoded,
             "streamed detokenization differs from Decode");
  auto with_special = t.Encode(text, /*add_special_tokens=*/true);
  FUZZ_CHECK(with_special.ok(), "add_special_tokens made Encode fail");
  FUZZ_CHECK(t.bos_id().has_value() && with_special->size() == ids->size() + 1 &&
                 with_special->front() == *t.bos_id() && std::equal(ids->begin(), ids->end(), with_special->begin() + 1),
             "add_special_tokens did more than add BOS");
}

void CheckDecode(const Tokenizer& t, const uint8_t* data, size_t size, bool skip, uint32_t shape) {
  std::vector<int32_t> ids;
  bool all_valid = true;
  for (size_t i = 0; i + 4 <= size; i += 4) {
    uint32_t v;
    std::memcpy(&v, data + i, 4);
    // Mostly ids near the vocabulary; a set top bit keeps the raw value
    // (negative or far out of range).
    const int32_t id = (v >> 31) ? static_cast<int32_t>(v) : static_cast<int32_t>(v % (t.vocab_size() + 2u));
    all_valid = all_valid && id >= 0 && id < t.vocab_size();
    ids.push_back(id);
  }
  auto text = t.Decode(ids, skip);
  FUZZ_CHECK(text.ok() == all_valid && t.ValidateIds(ids).ok() == all_valid, "Decode ok=%d, ids valid=%d",
             text.ok(), all_valid);
  if (!text.ok()) {
    FUZZ_CHECK(text.status().code() == absl::StatusCode::kOutOfRange, "%s", text.status().ToString().c_str());
    IncrementalDetokenizer detok(&t, skip);
    FUZZ_CHECK(!detok.Add(ids).ok() && detok.pending_bytes() == 0, "detokenizer accepted an invalid id");
    return;
  }
  FUZZ_CHECK(ValidUtf8(*text), "Decode output is not valid UTF-8");
  FUZZ_CHECK(Stream(t, ids, skip, shape) == *text, "streamed detokenization differs from Decode");
  auto again = t.Encode(*text, false);
  FUZZ_CHECK(again.ok(), "decoded text does not re-encode: %s", again.status().ToString().c_str());
  if (&t == Tokenizers().llama3.get()) {
    auto twice = t.Decode(*again, false);
    FUZZ_CHECK(twice.ok() && *twice == *text, "decode(encode(decode(ids))) != decode(ids)");
  }
}

void CheckStopStrings(const uint8_t* data, size_t size) {
  // Byte 0: number of stop strings (0..3) and the chunk-size seed; then each
  // stop string as a length byte (0..7) and its bytes; the rest is the text.
  if (size < 1) return;
  const int num_stops = data[0] & 3;
  uint32_t shape = data[0] >> 2;
  size_t pos = 1;
  std::vector<std::string> stops;
  size_t longest = 0;
  for (int i = 0; i < num_stops && pos < size; ++i) {
    const size_t want = data[pos++] & 7;
    const size_t len = std::min<size_t>(want, size - pos);
    stops.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    longest = std::max(longest, len);
    pos += len;
  }
  const absl::string_view full(reinterpret_cast<const char*>(data + pos), size - pos);
  // Oracle: the first position where some non-empty stop string ends.
  size_t first_end = absl::string_view::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t at = full.find(s);
    if (at != absl::string_view::npos) first_end = std::min(first_end, at + s.size());
  }
  StopStringMatcher matcher(stops);
  std::string emitted, matched;
  bool stopped = false;
  for (size_t i = 0; i < full.size();) {
    const size_t n = std::min<size_t>(1 + (shape % 7), full.size() - i);
    shape = shape * 1103515245u + 12345u;
    auto r = matcher.Consume(full.substr(i, n));
    FUZZ_CHECK(!stopped || (r.text.empty() && !r.stopped), "output after a stop");
    emitted += r.text;
    if (r.stopped) {
      stopped = true;
      matched = r.matched;
    }
    FUZZ_CHECK(matcher.held().size() < std::max<size_t>(longest, 1), "holds %zu bytes, longest stop %zu",
               matcher.held().size(), longest);
    i += n;
  }
  if (first_end == absl::string_view::npos) {
    FUZZ_CHECK(!stopped, "stopped without a stop string in the text");
    emitted += matcher.Flush();
    FUZZ_CHECK(emitted == full, "text without stop strings changed");
    return;
  }
  FUZZ_CHECK(stopped, "missed a stop string ending at %zu", first_end);
  FUZZ_CHECK(std::find(stops.begin(), stops.end(), matched) != stops.end(), "matched an unknown stop string");
  FUZZ_CHECK(emitted.size() + matched.size() == first_end &&
                 full.substr(0, first_end) == emitted + matched,
             "emitted %zu bytes + stop %zu, first stop ends at %zu", emitted.size(), matched.size(), first_end);
}

}  // namespace
}  // namespace floe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  if (size < 1) return 0;
  const Loaded& t = Tokenizers();
  const uint8_t mode = data[0] & 3;
  const absl::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
      CheckEncode(*t.llama3, payload, /*promises_round_trip=*/true);
      break;
    case 1: {
      // Llama 2's decoder turns every "▁" into a space and its added tokens
      // (<unk>, <s>, </s>) get a "▁" prepended after them, so only other text
      // round-trips.
      const bool round_trip = !absl::StrContains(payload, "\xE2\x96\x81") && !absl::StrContains(payload, "<unk>") &&
                              !absl::StrContains(payload, "<s>") && !absl::StrContains(payload, "</s>");
      CheckEncode(*t.llama2, payload, round_trip);
      break;
    }
    case 2:
      if (size < 2) return 0;
      CheckDecode((data[1] & 1) ? *t.llama2 : *t.llama3, data + 2, size - 2, (data[1] & 2) != 0, data[1] >> 2);
      break;
    case 3:
      CheckStopStrings(data + 1, size - 1);
      break;
  }
  return 0;
}
