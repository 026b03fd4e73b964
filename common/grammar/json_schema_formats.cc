#include "common/grammar/json_schema_formats.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace floe::grammar::json_schema_internal {
namespace {

struct Table {
  std::vector<std::string> regexes;
  std::vector<StringFormat> formats;
};

const Table& Formats() {
  static const Table* table = [] {
    // Leap years: divisible by 4 and not by 100, or by 400 (RFC 3339
    // appendix C): YYxx with xx a nonzero multiple of 4, or YY00 with YY one.
    const std::string leap = "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
    const std::string date = absl::StrCat(
        "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
        "02-(?:0[1-9]|1\\d|2[0-8]))|",
        leap, "-02-29)");
    const std::string time =
        "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:[Zz]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
    const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
    const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
    const std::string email = absl::StrCat(atext, "+(?:\\.", atext, "+)*@(?:", label, "\\.)+[A-Za-z]{2,}");
    const std::string hex4 = "[0-9a-fA-F]{4}";
    const std::string uuid = absl::StrCat("[0-9a-fA-F]{8}-", hex4, "-", hex4, "-", hex4, "-[0-9a-fA-F]{12}");
    const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    const std::string ipv4 = absl::StrCat("(?:", octet, "\\.){3}", octet);
    const std::string ipv6 = absl::StrReplaceAll(
        "(?:(?:H:){7}H|(?:H:){1,7}:|(?:H:){1,6}:H|(?:H:){1,5}(?::H){1,2}|(?:H:){1,4}(?::H){1,3}|"
        "(?:H:){1,3}(?::H){1,4}|(?:H:){1,2}(?::H){1,5}|H:(?::H){1,6}|:(?:(?::H){1,7}|:))",
        {{"H", "[0-9a-fA-F]{1,4}"}});
    const std::string pct = "%[0-9A-Fa-f]{2}";
    const std::string unreserved_sub = "A-Za-z0-9._~!$&'()*+,;=\\-";
    const std::string uri = absl::StrCat(
        "[A-Za-z][A-Za-z0-9+.-]*://(?:[", unreserved_sub, "]|", pct, ")*(?::\\d*)?",
        "(?:/(?:[", unreserved_sub, ":@]|", pct, ")*)*",
        "(?:\\?(?:[", unreserved_sub, ":@/?]|", pct, ")*)?",
        "(?:#(?:[", unreserved_sub, ":@/?]|", pct, ")*)?");
    auto* t = new Table;
    t->regexes = {date, time, absl::StrCat(date, "[Tt]", time), email, uuid, ipv4, ipv6, uri};
    const std::vector<StringFormat> shapes = {
        {"date", "", 10, 10},  {"time", "", 9, 24}, {"date-time", "", 20, 35}, {"email", "", 6, -1},
        {"uuid", "", 36, 36},  {"ipv4", "", 7, 15}, {"ipv6", "", 2, 39},       {"uri", "", 4, -1}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      StringFormat f = shapes[i];
      f.regex = t->regexes[i];
      t->formats.push_back(f);
    }
    return t;
  }();
  return *table;
}

}  // namespace

std::optional<StringFormat> FindStringFormat(std::string_view name) {
  for (const StringFormat& f : Formats().formats)
    if (f.name == name) return f;
  return std::nullopt;
}

std::string_view StringFormatNames() { return "date, time, date-time, email, uuid, ipv4, ipv6, uri"; }

}  // namespace floe::grammar::json_schema_internal
