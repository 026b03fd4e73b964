#include "common/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "common/jinja/unicode.h"
#include "common/jinja/value.h"

namespace floe::jinja {
namespace {

std::string At(int line) { return " (line " + std::to_string(line) + ")"; }

int CountNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Python's `\s*`: the bytes of whitespace starting at pos.
size_t SpaceRun(std::string_view s, size_t pos) {
  size_t end = pos;
  while (size_t n = PySpaceAt(s, end)) end += n;
  return end - pos;
}

// jinja2 reads the source as lines split on \r\n, \r or \n, rejoined with
// \n, without its last newline (keep_trailing_newline is off).
std::string NormalizeNewlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// `(\d+_)*\d+` at pos (digits, single underscores between them): its length.
size_t DigitRun(std::string_view s, size_t pos, bool (*digit)(char) = IsDigit) {
  size_t end = pos;
  if (end >= s.size() || !digit(s[end])) return 0;
  for (;;) {
    while (end < s.size() && digit(s[end])) ++end;
    if (end + 1 < s.size() && s[end] == '_' && digit(s[end + 1])) {
      ++end;
      continue;
    }
    return end - pos;
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      const size_t p = NextTagStart();
      if (p == std::string_view::npos) {
        Data(std::string(src_.substr(pos_)), line_);
        line_ += CountNewlines(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[p + 1];
      const char sign = p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : '\0';
      std::string text(src_.substr(pos_, p - pos_));
      const int text_line = line_;
      line_ += CountNewlines(text);
      if (sign == '-') {
        text = std::string(PyStripSpace(text, false, true));
      } else if (sign != '+' && kind != '{') {
        LStripBlock(&text);
      }
      Data(std::move(text), text_line);
      const size_t body = p + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        Comment(body);
      } else if (kind == '%' && RawBegin(body)) {
        // handled
      } else {
        Tag(kind, body);
      }
    }
    tokens_.push_back({Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t NextTagStart() const {
    for (size_t p = src_.find('{', pos_); p != std::string_view::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string_view::npos;
  }

  void Data(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({Token::Type::kData, std::move(text), line});
  }

  // lstrip_blocks: whitespace between the line's start and a block or
  // comment tag goes, when the tag starts its line.
  void LStripBlock(std::string* text) const {
    const size_t nl = text->rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    const std::string_view tail = std::string_view(*text).substr(l_pos);
    if (!tail.empty() && SpaceRun(tail, 0) == tail.size()) text->resize(l_pos);
  }

  // After a block or comment end: "-" eats all whitespace, "+" nothing,
  // otherwise trim_blocks eats one newline.
  void AfterBlockEnd(char sign) {
    size_t end = pos_;
    if (sign == '-') end += SpaceRun(src_, end);
    else if (sign != '+' && end < src_.size() && src_[end] == '\n') ++end;
    line_ += CountNewlines(src_.substr(pos_, end - pos_));
    pos_ = end;
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void Comment(size_t body) {
    if (body >= src_.size()) {  // `{#` ending the source: jinja2's lexer just stops
      pos_ = src_.size();
      return;
    }
    for (size_t i = body; i + 1 < src_.size(); ++i) {
      char sign = '\0';
      if ((src_[i] == '+' || src_[i] == '-') && src_.compare(i + 1, 2, "#}") == 0) sign = src_[i];
      else if (src_.compare(i, 2, "#}") != 0) continue;
      line_ += CountNewlines(src_.substr(pos_, i - pos_));
      pos_ = i + (sign ? 3 : 2);
      AfterBlockEnd(sign);
      return;
    }
    Fail("missing end of comment tag" + At(line_));
  }

  // `{% raw %}` up to `{% endraw %}`, kept verbatim.
  bool RawBegin(size_t body) {
    size_t q = body + SpaceRun(src_, body);
    if (src_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    q += SpaceRun(src_, q);
    char sign = '\0';
    if (src_.compare(q, 3, "-%}") == 0) sign = '-', q += 3;
    else if (src_.compare(q, 2, "%}") == 0) q += 2;
    else return false;
    if (sign == '-') q += SpaceRun(src_, q);  // the raw tag itself never trims a newline
    line_ += CountNewlines(src_.substr(pos_, q - pos_));
    pos_ = q;
    line_starting_ = src_[pos_ - 1] == '\n';
    if (pos_ >= src_.size()) return true;  // `{% raw %}` ending the source: accepted as is
    for (size_t open = src_.find("{%", pos_); open != std::string_view::npos; open = src_.find("{%", open + 1)) {
      size_t r = open + 2;
      const char end_sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
      if (end_sign) ++r;
      r += SpaceRun(src_, r);
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      r += SpaceRun(src_, r);
      char close = '\0';
      if (src_.compare(r, 3, "+%}") == 0 || src_.compare(r, 3, "-%}") == 0) close = src_[r], r += 3;
      else if (src_.compare(r, 2, "%}") == 0) r += 2;
      else continue;
      std::string content(src_.substr(pos_, open - pos_));
      const int content_line = line_;
      if (end_sign == '-') content = std::string(PyStripSpace(content, false, true));
      else if (end_sign != '+') LStripBlock(&content);
      Data(std::move(content), content_line);
      line_ += CountNewlines(src_.substr(pos_, r - pos_));
      pos_ = r;
      AfterBlockEnd(close);
      return true;
    }
    Fail("missing end of raw directive" + At(line_));
  }

  void Tag(char kind, size_t body) {
    const bool block = kind == '%';
    tokens_.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
    pos_ = body;
    std::vector<char> balance;
    for (;;) {
      if (pos_ >= src_.size()) Fail(std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'" + At(line_));
      if (balance.empty() && TagEnd(block)) return;
      if (const size_t n = SpaceRun(src_, pos_)) {
        line_ += CountNewlines(src_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      Token t = Next();
      if (t.type == Token::Type::kOp) {
        const char c = t.text[0];
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (t.text.size() == 1 && (c == ')' || c == ']' || c == '}')) {
          if (balance.empty()) Fail("unexpected '" + t.text + "'" + At(line_));
          if (balance.back() != c) Fail("unexpected '" + t.text + "', expected '" + balance.back() + "'" + At(line_));
          balance.pop_back();
        }
      }
      tokens_.push_back(std::move(t));
    }
  }

  bool TagEnd(bool block) {
    const std::string_view end = block ? "%}" : "}}";
    char sign = '\0';
    if (block && src_.compare(pos_, 3, "+%}") == 0) sign = '+';
    else if (src_[pos_] == '-' && src_.compare(pos_ + 1, 2, end) == 0) sign = '-';
    else if (src_.compare(pos_, 2, end) != 0) return false;
    tokens_.push_back({block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
    pos_ += sign ? 3 : 2;
    if (block) {
      AfterBlockEnd(sign);
    } else {
      if (sign == '-') {
        const size_t n = SpaceRun(src_, pos_);
        line_ += CountNewlines(src_.substr(pos_, n));
        pos_ += n;
      }
      line_starting_ = src_[pos_ - 1] == '\n';
    }
    return true;
  }

  Token Next() {
    Token t;
    t.line = line_;
    if (size_t n = FloatAt()) {
      std::string digits;
      for (char c : src_.substr(pos_, n))
        if (c != '_') digits += c;
      t.type = Token::Type::kFloat;
      t.text = digits;
      t.float_value = std::strtod(digits.c_str(), nullptr);
      pos_ += n;
      return t;
    }
    if (size_t n = IntAt(&t.int_value)) {
      t.type = Token::Type::kInt;
      t.text = std::string(src_.substr(pos_, n));
      pos_ += n;
      return t;
    }
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      if (pos_ < src_.size() && static_cast<unsigned char>(src_[pos_]) >= 0x80)
        Fail("unsupported: a non-ASCII character in a name" + At(line_));
      t.type = Token::Type::kName;
      t.text = std::string(src_.substr(start, pos_ - start));
      return t;
    }
    if (c == '\'' || c == '"') return String(c);
    static const char* kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                 "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      const std::string_view o(op);
      if (src_.compare(pos_, o.size(), o) == 0) {
        pos_ += o.size();
        t.type = Token::Type::kOp;
        t.text = std::string(o);
        return t;
      }
    }
    const size_t n = CodePointLength(src_, pos_);
    Fail("unexpected char '" + std::string(src_.substr(pos_, n)) + "'" + At(line_));
  }

  // jinja2's float_re: digits, then a fraction and/or an exponent; never
  // right after a dot (so that `foo.0.1` is two subscripts).
  size_t FloatAt() const {
    if (pos_ > 0 && src_[pos_ - 1] == '.') return 0;
    size_t end = pos_ + DigitRun(src_, pos_);
    if (end == pos_) return 0;
    bool fraction = false;
    if (end < src_.size() && src_[end] == '.') {
      if (const size_t n = DigitRun(src_, end + 1)) {
        end += 1 + n;
        fraction = true;
      }
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (const size_t n = DigitRun(src_, e)) return e + n - pos_;
    }
    return fraction ? end - pos_ : 0;
  }

  // jinja2's integer_re: 0b.., 0o.., 0x.., decimal, or zeros.
  size_t IntAt(int64_t* value) const {
    if (pos_ >= src_.size() || !IsDigit(src_[pos_])) return 0;
    int base = 10;
    size_t start = pos_, end;
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
        std::string_view("bBoOxX").find(src_[pos_ + 1]) != std::string_view::npos) {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_ + 1])));
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      bool (*digit)(char) = base == 2    ? [](char c) { return c == '0' || c == '1'; }
                            : base == 8  ? [](char c) { return c >= '0' && c <= '7'; }
                                         : [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      // `(_?d)+`: an underscore may also come first.
      size_t e = pos_ + 2;
      while (e < src_.size()) {
        if (digit(src_[e])) ++e;
        else if (src_[e] == '_' && e + 1 < src_.size() && digit(src_[e + 1])) e += 2;
        else break;
      }
      if (e > pos_ + 2) {
        start = pos_ + 2;
        end = e;
      } else {
        base = 10;
        end = pos_ + 1;  // just "0"
      }
    } else if (src_[pos_] == '0') {
      end = pos_ + 1;  // 0(_?0)*
      while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
        end += src_[end] == '_' ? 2 : 1;
    } else {
      end = pos_ + DigitRun(src_, pos_);
    }
    std::string digits;
    for (char c : src_.substr(start, end - start))
      if (c != '_') digits += c;
    errno = 0;
    const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()))
      Fail("integer literal beyond 64 bits" + At(line_));
    *value = static_cast<int64_t>(v);
    return end - pos_;
  }

  // A string literal, unescaped as jinja2 does:
  // .encode("ascii", "backslashreplace").decode("unicode-escape").
  Token String(char quote) {
    Token t;
    t.type = Token::Type::kString;
    t.line = line_;
    size_t i = pos_ + 1;
    for (;;) {
      if (i >= src_.size()) Fail("unexpected char '" + std::string(1, quote) + "'" + At(line_));
      const char c = src_[i];
      if (c == quote) break;
      if (c == '\\' && i + 1 < src_.size()) i += CodePointLength(src_, i + 1);
      ++i;
    }
    const std::string_view raw = src_.substr(pos_ + 1, i - pos_ - 1);
    line_ += CountNewlines(raw);
    pos_ = i + 1;
    for (size_t k = 0; k < raw.size();) {
      if (raw[k] != '\\') {
        const size_t n = CodePointLength(raw, k);
        t.text.append(raw.substr(k, n));
        k += n;
        continue;
      }
      ++k;
      const char e = raw[k];
      if (static_cast<unsigned char>(e) >= 0x80) {
        // backslashreplace turned the character into "\xe9", whose escape
        // our backslash has now escaped: the text is "\" + "xe9".
        char32_t cp = Decode(raw.substr(k, CodePointLength(raw, k)))[0];
        char buf[16];
        if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
        else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
        else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
        t.text += buf;
        k += CodePointLength(raw, k);
        continue;
      }
      ++k;
      switch (e) {
        case '\n': break;
        case '\\': t.text += '\\'; break;
        case '\'': t.text += '\''; break;
        case '"': t.text += '"'; break;
        case 'a': t.text += '\a'; break;
        case 'b': t.text += '\b'; break;
        case 'f': t.text += '\f'; break;
        case 'n': t.text += '\n'; break;
        case 'r': t.text += '\r'; break;
        case 't': t.text += '\t'; break;
        case 'v': t.text += '\v'; break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t d = 0; d < n; ++d) {
            if (k + d >= raw.size() || !std::isxdigit(static_cast<unsigned char>(raw[k + d])))
              Fail(std::string("truncated \\") + e + " escape in a string" + At(t.line));
            cp = cp * 16 + static_cast<uint32_t>(std::stoi(std::string(1, raw[k + d]), nullptr, 16));
          }
          if (cp > 0x10FFFF) Fail("illegal Unicode character in a string" + At(t.line));
          AppendUtf8(cp, &t.text);
          k += n;
          break;
        }
        case 'N':
          Fail("unsupported: \\N{...} escapes in strings" + At(t.line));
        default:
          if (e >= '0' && e <= '7') {  // up to three octal digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k < raw.size() && raw[k] >= '0' && raw[k] <= '7'; ++d, ++k)
              cp = cp * 8 + static_cast<uint32_t>(raw[k] - '0');
            AppendUtf8(cp, &t.text);
          } else {
            t.text += '\\';
            t.text += e;
          }
      }
    }
    return t;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) {
  const std::string normalized = NormalizeNewlines(source);
  return Lexer(normalized).Run();
}

}  // namespace floe::jinja
