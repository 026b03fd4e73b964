#include "common/tokenizer/incremental_detokenizer.h"

#include "common/status/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"

namespace floe {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      strip_spaces_(tokenizer->decoder_strip_spaces()) {}

absl::StatusOr<std::string> IncrementalDetokenizer::Add(absl::Span<const int32_t> ids) {
  FLOE_RETURN_IF_ERROR(tokenizer_->ValidateIds(ids));
  std::string bytes = std::move(pending_);
  pending_.clear();
  for (int32_t id : ids) {
    if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) continue;
    const absl::string_view token = tokenizer_->TokenBytes(id);
    bytes.append(token.data(), token.size());
  }
  const size_t complete = utf8::CompletePrefixLength(bytes);
  pending_.assign(bytes, complete, std::string::npos);
  std::string out;
  utf8::AppendLossy(absl::string_view(bytes).substr(0, complete), &out);
  // The decoder strips leading spaces of the whole text, i.e. of the stream's start.
  size_t strip = 0;
  while (strip_spaces_ > 0 && strip < out.size() && out[strip] == ' ') {
    ++strip;
    --strip_spaces_;
  }
  out.erase(0, strip);
  if (!out.empty()) strip_spaces_ = 0;
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out;
  utf8::AppendLossy(pending_, &out);
  pending_.clear();
  if (!out.empty()) strip_spaces_ = 0;
  return out;
}

}  // namespace floe
