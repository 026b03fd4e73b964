#include "common/jinja/lexer.h"

#include <cctype>

#include "common/jinja/value.h"

namespace floe::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string At(int line) { return " (line " + std::to_string(line) + ")"; }

// Python string-literal escapes, as jinja2 unescapes them.
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class TagLexer {
 public:
  TagLexer(std::string_view src, size_t pos, int line) : src_(src), pos_(pos), line_(line) {}

  // Tokens up to the end marker ("}}" or "%}"); sets strip_after for "-}}".
  std::vector<Token> Run(std::string_view end, bool* strip_after) {
    std::vector<Token> tokens;
    for (;;) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) Fail("unexpected end of template, expected '" + std::string(end) + "'" + At(line_));
      if (src_[pos_] == '-' && src_.substr(pos_ + 1, end.size()) == end) {
        *strip_after = true;
        pos_ += 1 + end.size();
        return tokens;
      }
      if (src_[pos_] == '+' && src_.substr(pos_ + 1, end.size()) == end) {
        pos_ += 1 + end.size();
        return tokens;
      }
      if (src_.substr(pos_, end.size()) == end) {
        pos_ += end.size();
        return tokens;
      }
      tokens.push_back(Next());
    }
  }
  size_t pos() const { return pos_; }
  int line() const { return line_; }

 private:
  Token Next() {
    const char c = src_[pos_];
    Token t;
    t.line = line_;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      t.type = Token::Type::kName;
      t.text = std::string(src_.substr(start, pos_ - start));
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      bool is_float = false;
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
        is_float = true;
        ++pos_;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
      if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
        is_float = true;
        ++pos_;
        if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
      t.type = is_float ? Token::Type::kFloat : Token::Type::kInt;
      for (char d : src_.substr(start, pos_ - start))
        if (d != '_') t.text += d;
      return t;
    }
    if (c == '\'' || c == '"') return String(c);
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                 "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
    for (const char* op : kOps) {
      const std::string_view o(op);
      if (src_.substr(pos_, o.size()) == o) {
        pos_ += o.size();
        t.type = Token::Type::kOp;
        t.text = std::string(o);
        return t;
      }
    }
    Fail(std::string("unexpected character '") + c + "'" + At(line_));
  }

  Token String(char quote) {
    Token t;
    t.type = Token::Type::kString;
    t.line = line_;
    ++pos_;
    for (;;) {
      if (pos_ >= src_.size()) Fail("unterminated string" + At(t.line));
      const char c = src_[pos_++];
      if (c == quote) return t;
      if (c == '\n') ++line_;
      if (c != '\\') {
        t.text += c;
        continue;
      }
      if (pos_ >= src_.size()) Fail("unterminated string" + At(t.line));
      const char e = src_[pos_++];
      switch (e) {
        case 'n': t.text += '\n'; break;
        case 't': t.text += '\t'; break;
        case 'r': t.text += '\r'; break;
        case '0': t.text += '\0'; break;
        case 'a': t.text += '\a'; break;
        case 'b': t.text += '\b'; break;
        case 'f': t.text += '\f'; break;
        case 'v': t.text += '\v'; break;
        case '\\': t.text += '\\'; break;
        case '\'': t.text += '\''; break;
        case '"': t.text += '"'; break;
        case '\n': ++line_; break;
        case 'x': case 'u': case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) Fail("bad escape" + At(line_));
          AppendUtf8(static_cast<uint32_t>(std::stoul(std::string(src_.substr(pos_, n)), nullptr, 16)), &t.text);
          pos_ += n;
          break;
        }
        default:
          t.text += '\\';
          t.text += e;
      }
    }
  }

  std::string_view src_;
  size_t pos_;
  int line_;
};

int CountLines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

std::vector<Piece> Lex(std::string_view src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // a "-" closed the previous tag
  auto add_text = [&](std::string text) {
    if (strip_next) {
      size_t i = 0;
      while (i < text.size() && IsSpace(text[i])) ++i;
      text = text.substr(i);
      strip_next = false;
    }
    if (!text.empty()) pieces.push_back({Piece::Kind::kText, std::move(text), {}, line});
  };
  while (pos <= src.size()) {
    size_t p = std::string_view::npos;
    for (const char* open : {"{{", "{%", "{#"}) p = std::min(p, src.find(open, pos));
    if (p == std::string_view::npos) {
      add_text(std::string(src.substr(pos)));
      break;
    }
    const char kind = src[p + 1];
    const char marker = p + 2 < src.size() ? src[p + 2] : '\0';
    std::string before(src.substr(pos, p - pos));
    // Whitespace control before the tag.
    if (marker == '-') {
      while (!before.empty() && IsSpace(before.back())) before.pop_back();
    } else if (marker != '+' && kind != '{') {
      // lstrip_blocks: a block or comment tag alone at the start of its line.
      const size_t nl = src.rfind('\n', p == 0 ? 0 : p - 1);
      const size_t line_start = (nl == std::string_view::npos || p == 0) ? 0 : nl + 1;
      if (line_start >= pos) {
        bool blank = true;
        for (size_t i = line_start; i < p; ++i) blank &= src[i] == ' ' || src[i] == '\t';
        if (blank) before.resize(before.size() - (p - line_start));
      }
    }
    const int tag_line = line + CountLines(src.substr(pos, p - pos));
    add_text(std::move(before));
    line = tag_line;
    size_t body = p + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
    bool strip_after = false;
    bool is_block_like = kind != '{';
    if (kind == '#') {
      const size_t end = src.find("#}", body);
      if (end == std::string_view::npos) Fail("unterminated comment" + At(line));
      strip_after = end > body && src[end - 1] == '-';
      line += CountLines(src.substr(p, end - p));
      pos = end + 2;
    } else {
      TagLexer lexer(src, body, line);
      std::vector<Token> tokens = lexer.Run(kind == '{' ? "}}" : "%}", &strip_after);
      pos = lexer.pos();
      line = lexer.line();
      if (kind == '%' && tokens.size() == 1 && tokens[0].type == Token::Type::kName && tokens[0].text == "raw") {
        // Verbatim up to {% endraw %}.
        size_t search = pos;
        for (;;) {
          const size_t open = src.find("{%", search);
          if (open == std::string_view::npos) Fail("missing endraw" + At(line));
          size_t q = open + 2;
          const bool strip_before = q < src.size() && src[q] == '-';
          if (strip_before || (q < src.size() && src[q] == '+')) ++q;
          while (q < src.size() && IsSpace(src[q])) ++q;
          if (src.substr(q, 6) == "endraw") {
            std::string raw(src.substr(pos, open - pos));
            if (strip_after) {
              size_t i = 0;
              while (i < raw.size() && IsSpace(raw[i])) ++i;
              raw = raw.substr(i);
            }
            if (strip_before)
              while (!raw.empty() && IsSpace(raw.back())) raw.pop_back();
            if (!raw.empty()) pieces.push_back({Piece::Kind::kText, raw, {}, line});
            line += CountLines(src.substr(pos, open - pos));
            TagLexer end_lexer(src, q + 6, line);
            strip_after = false;
            end_lexer.Run("%}", &strip_after);
            pos = end_lexer.pos();
            break;
          }
          search = open + 2;
        }
      } else {
        pieces.push_back({kind == '{' ? Piece::Kind::kVar : Piece::Kind::kBlock, "", std::move(tokens), tag_line});
      }
    }
    strip_next = strip_after;
    // trim_blocks: the first newline after a block or comment tag goes.
    if (is_block_like && !strip_after && pos < src.size()) {
      if (src[pos] == '\n') {
        ++pos;
        ++line;
      } else if (src[pos] == '\r' && pos + 1 < src.size() && src[pos + 1] == '\n') {
        pos += 2;
        ++line;
      }
    }
  }
  return pieces;
}

}  // namespace floe::jinja
