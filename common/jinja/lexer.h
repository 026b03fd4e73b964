// Splits a template into text and tags, applying whitespace control as
// transformers' environment does (trim_blocks, lstrip_blocks, `-` markers),
// and tokenizes each tag.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace floe::jinja {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOp };
  Type type;
  std::string text;  // name, operator, or the unescaped string
  int line = 0;
};

struct Piece {
  enum class Kind { kText, kVar, kBlock };
  Kind kind;
  std::string text;  // kText
  std::vector<Token> tokens;
  int line = 0;
};

// Throws Error (line-numbered) on a lexical error.
std::vector<Piece> Lex(std::string_view source);

}  // namespace floe::jinja
