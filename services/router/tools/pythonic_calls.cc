#include "services/router/tools/pythonic_calls.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace floe::tools {
namespace {

using nlohmann::ordered_json;

class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  std::optional<std::vector<PythonicCall>> Calls() {
    std::vector<PythonicCall> out;
    Space();
    if (!Eat('[')) return std::nullopt;
    Space();
    if (Eat(']')) {
      Space();
      if (!AtEnd()) return std::nullopt;
      return out;
    }
    for (;;) {
      PythonicCall call;
      if (!Name(&call.name)) return std::nullopt;
      Space();
      if (!Eat('(')) return std::nullopt;
      ordered_json args = ordered_json::object();
      Space();
      if (!Eat(')')) {
        for (;;) {
          std::string key;
          Space();
          if (!Name(&key)) return std::nullopt;
          Space();
          if (!Eat('=')) return std::nullopt;
          ordered_json value;
          if (!Value(&value, 0)) return std::nullopt;
          args[key] = std::move(value);
          Space();
          if (Eat(')')) break;
          if (!Eat(',')) return std::nullopt;
          Space();
          if (Eat(')')) break;  // a trailing comma
        }
      }
      call.arguments = args.dump();
      out.push_back(std::move(call));
      Space();
      if (Eat(']')) break;
      if (!Eat(',')) return std::nullopt;
      Space();
      if (Eat(']')) break;
    }
    Space();
    if (!AtEnd()) return std::nullopt;
    return out;
  }

 private:
  bool AtEnd() const { return i_ >= s_.size(); }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // A dotted Python name (module.function is kept whole).
  bool Name(std::string* out) {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' ||
                              (s_[i_] == '.' && i_ > start)))
      ++i_;
    if (i_ == start || std::isdigit(static_cast<unsigned char>(s_[start]))) return false;
    *out = std::string(s_.substr(start, i_ - start));
    return true;
  }
  bool Value(ordered_json* out, int depth) {
    if (depth > kMaxPythonicDepth) return false;
    Space();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"' || c == '\'') return String(out);
    if (c == '[' || c == '(') {
      const char close = c == '[' ? ']' : ')';
      ++i_;
      *out = ordered_json::array();
      Space();
      if (Eat(close)) return true;
      for (;;) {
        ordered_json item;
        if (!Value(&item, depth + 1)) return false;
        out->push_back(std::move(item));
        Space();
        if (Eat(close)) return true;
        if (!Eat(',')) return false;
        Space();
        if (Eat(close)) return true;
      }
    }
    if (c == '{') {
      ++i_;
      *out = ordered_json::object();
      Space();
      if (Eat('}')) return true;
      for (;;) {
        ordered_json key, value;
        Space();
        if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'') || !String(&key)) return false;
        Space();
        if (!Eat(':')) return false;
        if (!Value(&value, depth + 1)) return false;
        (*out)[key.get<std::string>()] = std::move(value);
        Space();
        if (Eat('}')) return true;
        if (!Eat(',')) return false;
        Space();
        if (Eat('}')) return true;
      }
    }
    for (const auto& [word, value] : {std::pair<std::string_view, ordered_json>{"True", true},
                                      {"False", false}, {"None", nullptr}}) {
      if (s_.substr(i_, word.size()) == word &&
          (i_ + word.size() == s_.size() || !std::isalnum(static_cast<unsigned char>(s_[i_ + word.size()])))) {
        i_ += word.size();
        *out = value;
        return true;
      }
    }
    return Number(out);
  }
  bool Number(ordered_json* out) {
    const size_t start = i_;
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
    bool digits = false, fraction = false;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_, digits = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      fraction = true;
      ++i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_, digits = true;
    }
    if (digits && i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      fraction = true;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
      bool exponent = false;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_, exponent = true;
      if (!exponent) return false;
    }
    if (!digits) return false;
    const std::string text(s_.substr(start, i_ - start));
    if (!fraction) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end == text.c_str() + text.size()) {
        *out = static_cast<int64_t>(v);
        return true;
      }
    }
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(v)) return false;
    *out = v;
    return true;
  }
  bool String(ordered_json* out) {
    const char quote = s_[i_++];
    if (s_.substr(i_, 2) == std::string(2, quote)) return false;  // a triple quote
    std::string text;
    while (i_ < s_.size() && s_[i_] != quote) {
      char c = s_[i_++];
      if (c == '\n') return false;
      if (c != '\\') {
        text += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      c = s_[i_++];
      switch (c) {
        case 'n': text += '\n'; break;
        case 't': text += '\t'; break;
        case 'r': text += '\r'; break;
        case '0': text += '\0'; break;
        case '\\': case '\'': case '"': text += c; break;
        case 'u': {
          if (i_ + 4 > s_.size()) return false;
          const std::string hex(s_.substr(i_, 4));
          char* end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (end != hex.c_str() + 4 || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
          i_ += 4;
          if (cp < 0x80) {
            text += static_cast<char>(cp);
          } else if (cp < 0x800) {
            text += static_cast<char>(0xC0 | (cp >> 6));
            text += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            text += static_cast<char>(0xE0 | (cp >> 12));
            text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            text += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: return false;
      }
    }
    if (!Eat(quote)) return false;
    *out = std::move(text);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<size_t> PythonicListEnd(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
  if (i >= text.size() || text[i] != '[') return std::nullopt;
  int depth = 0;
  char quote = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    else if (c == '[' || c == '(' || c == '{') ++depth;
    else if ((c == ']' || c == ')' || c == '}') && --depth == 0) return i + 1;
  }
  return std::nullopt;
}

std::optional<std::vector<PythonicCall>> ParsePythonicCalls(std::string_view text) {
  return Reader(text).Calls();
}

}  // namespace floe::tools
