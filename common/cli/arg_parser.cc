#include "common/cli/arg_parser.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace floe {
namespace {

template <typename T>
std::function<absl::Status(const std::string&)> Setter(const std::string& name, T* out) {
  return [name, out](const std::string& text) -> absl::Status {
    bool ok;
    if constexpr (std::is_same_v<T, int>) {
      ok = absl::SimpleAtoi(text, out);
    } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) {
      ok = absl::SimpleAtoi(text, out);
    } else if constexpr (std::is_same_v<T, double>) {
      ok = absl::SimpleAtod(text, out);
    } else {
      ok = absl::SimpleAtof(text, out);
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number: \"", text, "\""));
    return absl::OkStatus();
  };
}

}  // namespace

ArgParser::ArgParser(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void ArgParser::Add(Option option) { options_.push_back(std::move(option)); }

void ArgParser::AddString(const std::string& name, std::string* value, const std::string& help) {
  Add({name, help, *value, false, [value](const std::string& text) {
         *value = text;
         return absl::OkStatus();
       }});
}
void ArgParser::AddStringList(const std::string& name, std::vector<std::string>* values, const std::string& help) {
  Add({name, help, absl::StrJoin(*values, ","), false, [values](const std::string& text) {
         values->clear();
         for (absl::string_view item : absl::StrSplit(text, ',')) {
           item = absl::StripAsciiWhitespace(item);
           if (!item.empty()) values->emplace_back(item);
         }
         return absl::OkStatus();
       }});
}
void ArgParser::AddInt(const std::string& name, int* value, const std::string& help) {
  Add({name, help, std::to_string(*value), false, Setter(name, value)});
}
void ArgParser::AddInt64(const std::string& name, int64_t* value, const std::string& help) {
  Add({name, help, std::to_string(*value), false, Setter(name, value)});
}
void ArgParser::AddUint64(const std::string& name, uint64_t* value, const std::string& help) {
  Add({name, help, std::to_string(*value), false, Setter(name, value)});
}
void ArgParser::AddDouble(const std::string& name, double* value, const std::string& help) {
  Add({name, help, absl::StrCat(*value), false, Setter(name, value)});
}
void ArgParser::AddFloat(const std::string& name, float* value, const std::string& help) {
  Add({name, help, absl::StrCat(*value), false, Setter(name, value)});
}
void ArgParser::AddBool(const std::string& name, bool* value, const std::string& help) {
  Add({name, help, *value ? "true" : "false", true, [name, value](const std::string& text) -> absl::Status {
         if (text == "true" || text == "1" || text.empty()) {
           *value = true;
         } else if (text == "false" || text == "0") {
           *value = false;
         } else {
           return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected true or false, got \"", text, "\""));
         }
         return absl::OkStatus();
       }});
}

absl::Status ArgParser::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = std::find_if(options_.begin(), options_.end(), [&](const Option& o) { return o.name == name; });
    if (it == options_.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name, " (see --help)"));
    if (!has_value && !it->is_switch) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    absl::Status status = it->set(value);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::optional<int> ArgParser::ParseOrExitCode(int argc, char** argv, const std::string& program, int first) {
  if (absl::Status s = Parse(argc, argv, first); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(s.message()).c_str());
    return 2;
  }
  if (help_requested_) {
    std::printf("%s", Help().c_str());
    return 0;
  }
  return std::nullopt;
}

std::string ArgParser::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", summary_, "\n\noptions:\n");
  for (const Option& o : options_) {
    std::string head = absl::StrCat("  --", o.name, o.is_switch ? "" : " VALUE");
    if (head.size() < 28) head.resize(28, ' '); else head += "\n" + std::string(28, ' ');
    absl::StrAppend(&out, head, o.help);
    if (!o.default_text.empty() && o.default_text != "0" && o.default_text != "false")
      absl::StrAppend(&out, " (default: ", o.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                    this text\n");
  return out;
}

}  // namespace floe
