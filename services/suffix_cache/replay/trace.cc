#include "services/suffix_cache/replay/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace floe::suffix_cache {
namespace {

// Cursor over one JSON value at a time; errors carry the byte offset.
class Scanner {
 public:
  explicit Scanner(absl::string_view s) : s_(s) {}

  bool done() { SkipSpace(); return i_ >= s_.size(); }
  size_t offset() const { return i_; }

  bool Consume(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  char Peek() {
    SkipSpace();
    return i_ < s_.size() ? s_[i_] : '\0';
  }

  bool String(std::string* out) {
    if (!Consume('"')) return false;
    out->clear();
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) return false;
        const char e = s_[i_];
        out->push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);  // ids only: no \u decoding
      } else {
        out->push_back(s_[i_]);
      }
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    ++i_;
    return true;
  }

  bool Int(int64_t* out) {
    SkipSpace();
    bool neg = false;
    if (i_ < s_.size() && s_[i_] == '-') {
      neg = true;
      ++i_;
    }
    const size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_] - '0');
      if (v > std::numeric_limits<int32_t>::max() + int64_t{1}) return false;
      ++i_;
    }
    if (i_ == start) return false;
    *out = neg ? -v : v;
    return true;
  }

  bool IntArray(std::vector<int32_t>* out) {
    if (!Consume('[')) return false;
    out->clear();
    if (Consume(']')) return true;
    while (true) {
      int64_t v;
      if (!Int(&v) || v < std::numeric_limits<int32_t>::min() ||
          v > std::numeric_limits<int32_t>::max()) {
        return false;
      }
      out->push_back(static_cast<int32_t>(v));
      if (Consume(']')) return true;
      if (!Consume(',')) return false;
    }
  }

  // Any value, kept as text (numbers, strings) or skipped (the rest).
  bool Scalar(std::string* out) {
    const char c = Peek();
    if (c == '"') return String(out);
    const size_t start = i_;
    if (!Skip()) return false;
    out->assign(s_.data() + start, i_ - start);
    return true;
  }

  bool Skip() {
    const char c = Peek();
    if (c == '"') {
      std::string tmp;
      return String(&tmp);
    }
    if (c == '[' || c == '{') {
      int depth = 0;
      bool in_string = false;
      for (; i_ < s_.size(); ++i_) {
        const char x = s_[i_];
        if (in_string) {
          if (x == '\\') ++i_;
          else if (x == '"') in_string = false;
        } else if (x == '"') {
          in_string = true;
        } else if (x == '[' || x == '{') {
          ++depth;
        } else if (x == ']' || x == '}') {
          if (--depth == 0) {
            ++i_;
            return true;
          }
        }
      }
      return false;
    }
    const size_t start = i_;
    while (i_ < s_.size() && std::strchr(",}] \t\r\n", s_[i_]) == nullptr) ++i_;
    return i_ > start;
  }

 private:
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  absl::string_view s_;
  size_t i_ = 0;
};

absl::Status ParseLine(absl::string_view line, size_t line_no, TraceRequest* out) {
  Scanner sc(line);
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace line ", line_no, ", byte ", sc.offset(), ": ", what));
  };
  if (!sc.Consume('{')) return bad("expected '{'");
  bool has_prompt = false, has_output = false;
  std::string key;
  if (!sc.Consume('}')) {
    while (true) {
      if (!sc.String(&key)) return bad("expected a field name");
      if (!sc.Consume(':')) return bad("expected ':'");
      if (key == "prompt") {
        if (!sc.IntArray(&out->prompt)) return bad("field 'prompt' must be an array of int32");
        has_prompt = true;
      } else if (key == "output") {
        if (!sc.IntArray(&out->output)) return bad("field 'output' must be an array of int32");
        has_output = true;
      } else if (key == "id") {
        if (!sc.Scalar(&out->id)) return bad("bad 'id'");
      } else if (key == "session") {
        if (!sc.Scalar(&out->session)) return bad("bad 'session'");
      } else if (!sc.Skip()) {
        return bad(absl::StrCat("bad value for field '", key, "'"));
      }
      if (sc.Consume('}')) break;
      if (!sc.Consume(',')) return bad("expected ',' or '}'");
    }
  }
  if (!has_prompt) return bad("missing field 'prompt'");
  if (!has_output) return bad("missing field 'output'");
  if (!sc.done()) return bad("trailing characters");
  if (out->id.empty()) out->id = absl::StrCat("line-", line_no);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text) {
  std::vector<TraceRequest> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    absl::string_view line = text.substr(0, nl);
    text = nl == absl::string_view::npos ? absl::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    TraceRequest r;
    absl::Status st = ParseLine(line, line_no, &r);
    if (!st.ok()) return st;
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open trace '", path, "': ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return ParseTrace(text);
}

}  // namespace floe::suffix_cache
