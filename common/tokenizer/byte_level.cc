#include "common/tokenizer/byte_level.h"

#include <array>

namespace floe::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_chars;
  // Code point (< 324) -> byte + 1, 0 for none.
  std::array<uint16_t, 324> code_point_to_byte{};
};

const Tables& GetTables() {
  static const Tables* const kTables = [] {
    auto* t = new Tables;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : 256 + extra++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      t->byte_to_chars[b] = s;
      t->code_point_to_byte[cp] = static_cast<uint16_t>(b + 1);
    }
    return t;
  }();
  return *kTables;
}

}  // namespace

absl::string_view ByteToChars(uint8_t b) { return GetTables().byte_to_chars[b]; }

bool CharsToBytes(absl::string_view token, std::string* out) {
  const Tables& t = GetTables();
  out->clear();
  out->reserve(token.size());
  const auto* s = reinterpret_cast<const uint8_t*>(token.data());
  const size_t n = token.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (s[i] < 0x80) {
      cp = s[i];
      i += 1;
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = ((s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;
    }
    if (cp >= t.code_point_to_byte.size() || t.code_point_to_byte[cp] == 0) return false;
    out->push_back(static_cast<char>(t.code_point_to_byte[cp] - 1));
  }
  return true;
}

std::string BytesToChars(absl::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    const absl::string_view chars = ByteToChars(static_cast<uint8_t>(c));
    out.append(chars.data(), chars.size());
  }
  return out;
}

}  // namespace floe::byte_level
