// Splits a template into jinja2's token stream: template data, tag
// delimiters, and the names, literals and operators inside tags. Whitespace
// control is applied here exactly as jinja2's lexer does in transformers'
// environment: trim_blocks (the newline after a block or comment tag goes),
// lstrip_blocks (indentation before one goes), "-" and "+" markers, one
// trailing newline of the source dropped, \r\n and \r read as \n.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace floe::jinja {

struct Token {
  enum class Type { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // data, name, operator, or the unescaped string
  int line = 0;
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws Error, naming the line, on what jinja2's lexer rejects (and on
// what this subset does not read: non-ASCII names, \N{...} escapes).
std::vector<Token> Lex(std::string_view source);

}  // namespace floe::jinja
