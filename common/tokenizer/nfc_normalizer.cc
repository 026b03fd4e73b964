#include "common/tokenizer/nfc_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

const icu::Normalizer2* Icu(const void* p) { return static_cast<const icu::Normalizer2*>(p); }

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NfcNormalizer>> NfcNormalizer::Create() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status) || nfc == nullptr) {
    return absl::InternalError(absl::StrCat("ICU NFC normalizer unavailable: ", u_errorName(status)));
  }
  return std::unique_ptr<NfcNormalizer>(new NfcNormalizer(nfc));
}

absl::string_view NfcNormalizer::Normalize(absl::string_view text, std::string* storage) const {
  if (IsAscii(text)) return text;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (Icu(icu_normalizer_)->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return text;
  storage->clear();
  icu::StringByteSink<std::string> sink(storage);
  status = U_ZERO_ERROR;
  Icu(icu_normalizer_)->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) return text;  // Only on allocation failure; keep the input.
  return *storage;
}

}  // namespace floe
