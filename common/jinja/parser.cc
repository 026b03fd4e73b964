// Template::Parse: pieces -> statements, tokens -> expressions, with
// jinja2's operator precedence. Unknown statements, filters, tests and
// methods are refused here.
#include <set>

#include "absl/strings/str_cat.h"
#include "common/jinja/ast.h"
#include "common/jinja/lexer.h"
#include "common/jinja/program.h"
#include "common/jinja/template.h"

namespace floe::jinja {
namespace {

const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> kFilters = {
      "trim", "tojson", "length", "count", "first", "last", "join", "default", "d", "upper", "lower", "capitalize",
      "title", "replace", "list", "items", "string", "int", "float", "abs", "round", "reverse", "unique", "map",
      "selectattr", "rejectattr", "select", "reject", "safe", "indent", "sort", "min", "max", "sum", "dictsort",
      "batch", "wordcount", "center", "striptags", "e", "escape"};
  return kFilters;
}

const std::set<std::string>& KnownTests() {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
      "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=",
      "in", "odd", "even", "divisibleby", "lower", "upper", "callable", "sameas"};
  return kTests;
}

const std::set<std::string>& KnownMethods() {
  static const std::set<std::string> kMethods = {
      "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "replace", "upper", "lower",
      "title", "capitalize", "find", "count", "join", "items", "keys", "values", "get", "splitlines", "isdigit",
      "isalpha", "isspace", "index"};
  return kMethods;
}

class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  Body ParseTemplate() {
    std::string stopped;
    Body body = ParseBody({}, &stopped);
    return body;
  }

 private:
  // --- statements ---------------------------------------------------------
  Body ParseBody(const std::set<std::string>& stops, std::string* stopped, int opened_at = 0) {
    Body body;
    while (at_ < pieces_.size()) {
      Piece& piece = pieces_[at_];
      if (piece.kind == Piece::Kind::kText) {
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kText;
        node->text = std::move(piece.text);
        node->line = piece.line;
        body.push_back(std::move(node));
        ++at_;
        continue;
      }
      BeginTokens(piece);
      if (piece.kind == Piece::Kind::kVar) {
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kOutput;
        node->line = piece.line;
        node->expr = ParseExpression();
        ExpectEnd();
        body.push_back(std::move(node));
        ++at_;
        continue;
      }
      if (tokens_->empty()) Fail("empty statement" + At(piece.line));
      const std::string keyword = Peek().text;
      if (stops.count(keyword)) {
        *stopped = keyword;
        return body;  // the caller consumes the stop tag
      }
      ++at_;
      body.push_back(ParseStatement(keyword, piece.line));
    }
    if (!stops.empty()) {
      std::string end;
      for (const std::string& s : stops)
        if (s.rfind("end", 0) == 0) end = s;
      Fail("unexpected end of template: missing {% " + end + " %} for the tag" + At(opened_at));
    }
    return body;
  }

  // Positions the token reader on `piece`.
  void BeginTokens(Piece& piece) {
    tokens_ = &piece.tokens;
    tok_ = 0;
    line_ = piece.line;
  }
  // After a stop tag was seen by ParseBody: reads it (its tokens) and advances.
  void TakeStop() {
    BeginTokens(pieces_[at_]);
    ++at_;
    Next();  // the keyword
  }

  NodePtr ParseStatement(const std::string& keyword, int line) {
    Next();
    auto node = std::make_unique<Node>();
    node->line = line;
    if (keyword == "if") {
      node->type = Node::Type::kIf;
      node->conditions.push_back(ParseExpression());
      ExpectEnd();
      for (;;) {
        std::string stopped;
        node->bodies.push_back(ParseBody({"elif", "else", "endif"}, &stopped, line));
        TakeStop();
        if (stopped == "elif") {
          node->conditions.push_back(ParseExpression());
          ExpectEnd();
        } else if (stopped == "else") {
          ExpectEnd();
          node->bodies.push_back(ParseBody({"endif"}, &stopped, line));
          TakeStop();
          ExpectEnd();
          break;
        } else {
          ExpectEnd();
          break;
        }
      }
      return node;
    }
    if (keyword == "for") {
      node->type = Node::Type::kFor;
      node->targets.push_back(ExpectName());
      while (PeekOp(",")) {
        Next();
        node->targets.push_back(ExpectName());
      }
      if (ExpectName() != "in") Fail("expected 'in' in for" + At(line_));
      node->expr = ParseCondExprNoIf();
      if (PeekName("if")) {
        Next();
        node->filter = ParseOr();
      }
      if (PeekName("recursive")) Fail("unsupported: recursive for loops" + At(line_));
      ExpectEnd();
      std::string stopped;
      node->bodies.push_back(ParseBody({"else", "endfor"}, &stopped, line));
      TakeStop();
      ExpectEnd();
      if (stopped == "else") {
        node->bodies.push_back(ParseBody({"endfor"}, &stopped, line));
        TakeStop();
        ExpectEnd();
      }
      return node;
    }
    if (keyword == "set") {
      std::string name = ExpectName();
      if (PeekOp(".")) {
        Next();
        node->attr = ExpectName();
      }
      node->targets.push_back(name);
      while (PeekOp(",")) {
        Next();
        node->targets.push_back(ExpectName());
      }
      if (PeekOp("=")) {
        Next();
        node->type = Node::Type::kSet;
        node->expr = ParseTupleOrExpression();
        ExpectEnd();
        return node;
      }
      if (!node->attr.empty() || node->targets.size() != 1) Fail("bad block set" + At(line_));
      if (PeekOp("|")) Fail("unsupported: filtered block set" + At(line_));
      ExpectEnd();
      node->type = Node::Type::kSetBlock;
      std::string stopped;
      node->bodies.push_back(ParseBody({"endset"}, &stopped, line));
      TakeStop();
      ExpectEnd();
      return node;
    }
    if (keyword == "macro") {
      node->type = Node::Type::kMacro;
      node->macro = std::make_shared<MacroDef>();
      node->macro->name = ExpectName();
      ExpectOp("(");
      while (!PeekOp(")")) {
        std::string param = ExpectName();
        ExprPtr default_value;
        if (PeekOp("=")) {
          Next();
          default_value = ParseExpression();
        }
        node->macro->params.emplace_back(param, std::move(default_value));
        if (!PeekOp(")")) ExpectOp(",");
      }
      ExpectOp(")");
      ExpectEnd();
      std::string stopped;
      node->macro->body = ParseBody({"endmacro"}, &stopped, line);
      TakeStop();
      ExpectEnd();
      return node;
    }
    if (keyword == "break" || keyword == "continue") {
      node->type = keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue;
      ExpectEnd();
      return node;
    }
    Fail("unsupported statement '" + keyword + "'" + At(line));
  }

  // --- expressions --------------------------------------------------------
  ExprPtr Make(Expr::Type type, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->name = std::move(name);
    e->line = line_;
    return e;
  }
  ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Type::kBinary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // `a, b` at the top of a set: a tuple (a list here).
  ExprPtr ParseTupleOrExpression() {
    ExprPtr first = ParseExpression();
    if (!PeekOp(",")) return first;
    auto list = Make(Expr::Type::kList);
    list->args.push_back(std::move(first));
    while (PeekOp(",")) {
      Next();
      list->args.push_back(ParseExpression());
    }
    return list;
  }

  ExprPtr ParseExpression() {
    ExprPtr e = ParseOr();
    while (PeekName("if")) {
      Next();
      auto cond = Make(Expr::Type::kCondExpr);
      cond->args.push_back(std::move(e));
      cond->args.push_back(ParseOr());
      if (PeekName("else")) {
        Next();
        cond->args.push_back(ParseExpression());
      } else {
        cond->args.push_back(nullptr);
      }
      e = std::move(cond);
    }
    return e;
  }
  // A for loop's iterable: no conditional expression (its `if` filters).
  ExprPtr ParseCondExprNoIf() { return ParseOr(); }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (PeekName("or")) {
      Next();
      e = Binary("or", std::move(e), ParseAnd());
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (PeekName("and")) {
      Next();
      e = Binary("and", std::move(e), ParseNot());
    }
    return e;
  }
  ExprPtr ParseNot() {
    if (PeekName("not")) {
      Next();
      auto e = Make(Expr::Type::kNot);
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseMath1();
    int compares = 0;
    for (;;) {
      std::string op;
      if (Peek().type == Token::Type::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == "<=" ||
           Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (PeekName("in")) {
        Next();
        op = "in";
      } else if (PeekName("not") && PeekAt(1).type == Token::Type::kName && PeekAt(1).text == "in") {
        Next();
        Next();
        op = "notin";
      } else {
        return e;
      }
      if (++compares > 1) Fail("unsupported: chained comparison" + At(line_));
      e = Binary(op, std::move(e), ParseMath1());
    }
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (PeekOp("+") || PeekOp("-")) {
      std::string op = Next().text;
      e = Binary(op, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (PeekOp("~")) {
      Next();
      e = Binary("~", std::move(e), ParseMath2());
    }
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      std::string op = Next().text;
      e = Binary(op, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (PeekOp("**")) {
      Next();
      e = Binary("**", std::move(e), ParseUnary(true));
    }
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr e;
    if (PeekOp("-") || PeekOp("+")) {
      const bool neg = Next().text == "-";
      ExprPtr operand = ParseUnary(false);
      if (neg) {
        e = Make(Expr::Type::kNeg);
        e->args.push_back(std::move(operand));
      } else {
        e = std::move(operand);
      }
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    return with_filter ? ParseFilterExpr(std::move(e)) : std::move(e);
  }

  ExprPtr ParsePrimary() {
    if (AtEnd()) Fail("unexpected end of expression" + At(line_));
    const Token& t = Peek();
    if (t.type == Token::Type::kName) {
      Next();
      auto e = Make(Expr::Type::kLiteral);
      if (t.text == "true" || t.text == "True") e->value = Value::Bool(true);
      else if (t.text == "false" || t.text == "False") e->value = Value::Bool(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::None();
      else return Make(Expr::Type::kName, t.text);
      return e;
    }
    if (t.type == Token::Type::kString) {
      std::string s;
      while (!AtEnd() && Peek().type == Token::Type::kString) s += Next().text;  // adjacent literals join
      auto e = Make(Expr::Type::kLiteral);
      e->value = Value::String(std::move(s));
      return e;
    }
    if (t.type == Token::Type::kInt || t.type == Token::Type::kFloat) {
      Next();
      auto e = Make(Expr::Type::kLiteral);
      e->value = t.type == Token::Type::kInt ? Value::Int(std::stoll(t.text)) : Value::Float(std::stod(t.text));
      return e;
    }
    if (PeekOp("(")) {
      Next();
      if (PeekOp(")")) {
        Next();
        return Make(Expr::Type::kList);  // ()
      }
      ExprPtr e = ParseExpression();
      if (PeekOp(",")) {
        auto list = Make(Expr::Type::kList);
        list->args.push_back(std::move(e));
        while (PeekOp(",")) {
          Next();
          if (PeekOp(")")) break;
          list->args.push_back(ParseExpression());
        }
        e = std::move(list);
      }
      ExpectOp(")");
      return e;
    }
    if (PeekOp("[")) {
      Next();
      auto list = Make(Expr::Type::kList);
      while (!PeekOp("]")) {
        list->args.push_back(ParseExpression());
        if (!PeekOp("]")) ExpectOp(",");
      }
      ExpectOp("]");
      return list;
    }
    if (PeekOp("{")) {
      Next();
      auto dict = Make(Expr::Type::kDict);
      while (!PeekOp("}")) {
        dict->args.push_back(ParseExpression());
        ExpectOp(":");
        dict->args.push_back(ParseExpression());
        if (!PeekOp("}")) ExpectOp(",");
      }
      ExpectOp("}");
      return dict;
    }
    Fail("unexpected '" + t.text + "'" + At(line_));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    for (;;) {
      if (PeekOp(".")) {
        Next();
        const Token& t = Next();
        if (t.type == Token::Type::kInt) {
          auto item = Make(Expr::Type::kItem);
          item->args.push_back(std::move(e));
          auto index = Make(Expr::Type::kLiteral);
          index->value = Value::Int(std::stoll(t.text));
          item->args.push_back(std::move(index));
          e = std::move(item);
          continue;
        }
        if (t.type != Token::Type::kName) Fail("expected an attribute name" + At(line_));
        auto attr = Make(Expr::Type::kAttr, t.text);
        attr->args.push_back(std::move(e));
        e = std::move(attr);
      } else if (PeekOp("[")) {
        Next();
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (PeekOp("]")) break;
          if (PeekOp(":")) {
            Next();
            if (++colons > 2) Fail("bad slice" + At(line_));
            continue;
          }
          parts[colons] = ParseExpression();
        }
        ExpectOp("]");
        if (colons == 0) {
          if (!parts[0]) Fail("empty subscript" + At(line_));
          auto item = Make(Expr::Type::kItem);
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(parts[0]));
          e = std::move(item);
        } else {
          auto slice = Make(Expr::Type::kSlice);
          slice->args.push_back(std::move(e));
          for (auto& p : parts) slice->args.push_back(std::move(p));
          e = std::move(slice);
        }
      } else if (PeekOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseCall(ExprPtr callee) {
    if (callee->type == Expr::Type::kAttr && !KnownMethods().count(callee->name) && callee->name != "cycle")
      Fail("unsupported method ." + callee->name + "()" + At(line_));
    auto call = Make(Expr::Type::kCall);
    call->args.push_back(std::move(callee));
    ParseArgs(call.get());
    return call;
  }

  void ParseArgs(Expr* e) {
    ExpectOp("(");
    while (!PeekOp(")")) {
      if (Peek().type == Token::Type::kName && PeekAt(1).type == Token::Type::kOp && PeekAt(1).text == "=") {
        std::string name = Next().text;
        Next();
        e->kwargs.emplace_back(name, ParseExpression());
      } else {
        if (!e->kwargs.empty()) Fail("positional argument after keyword argument" + At(line_));
        e->args.push_back(ParseExpression());
      }
      if (!PeekOp(")")) ExpectOp(",");
    }
    ExpectOp(")");
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    for (;;) {
      if (PeekOp("|")) {
        Next();
        std::string name = ExpectName();
        if (!KnownFilters().count(name)) Fail("unsupported filter '" + name + "'" + At(line_));
        auto filter = Make(Expr::Type::kFilter, name);
        filter->args.push_back(std::move(e));
        if (PeekOp("(")) ParseArgs(filter.get());
        e = std::move(filter);
      } else if (PeekName("is")) {
        Next();
        auto test = Make(Expr::Type::kTest);
        if (PeekName("not")) {
          Next();
          test->negated = true;
        }
        test->name = Peek().type == Token::Type::kOp ? Next().text : ExpectName();
        if (!KnownTests().count(test->name)) Fail("unsupported test '" + test->name + "'" + At(line_));
        test->args.push_back(std::move(e));
        if (PeekOp("(")) {
          ParseArgs(test.get());
        } else if (!AtEnd() && (Peek().type == Token::Type::kString || Peek().type == Token::Type::kInt ||
                                Peek().type == Token::Type::kFloat ||
                                (Peek().type == Token::Type::kName && Peek().text != "else" && Peek().text != "or" &&
                                 Peek().text != "and" && Peek().text != "if" && Peek().text != "is" &&
                                 Peek().text != "in" && Peek().text != "not"))) {
          test->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(test);
      } else if (PeekOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  // --- tokens -------------------------------------------------------------
  bool AtEnd() const { return tok_ >= tokens_->size(); }
  const Token& Peek() const { return PeekAt(0); }
  const Token& PeekAt(size_t k) const {
    static const Token kEnd{Token::Type::kOp, "<end>", 0};
    return tok_ + k < tokens_->size() ? (*tokens_)[tok_ + k] : kEnd;
  }
  const Token& Next() {
    if (AtEnd()) Fail("unexpected end of tag" + At(line_));
    return (*tokens_)[tok_++];
  }
  bool PeekOp(const char* op) const { return !AtEnd() && Peek().type == Token::Type::kOp && Peek().text == op; }
  bool PeekName(const char* name) const {
    return !AtEnd() && Peek().type == Token::Type::kName && Peek().text == name;
  }
  void ExpectOp(const char* op) {
    if (!PeekOp(op)) Fail(std::string("expected '") + op + "', got '" + Peek().text + "'" + At(line_));
    Next();
  }
  std::string ExpectName() {
    if (AtEnd() || Peek().type != Token::Type::kName) Fail("expected a name, got '" + Peek().text + "'" + At(line_));
    return Next().text;
  }
  void ExpectEnd() {
    if (!AtEnd()) Fail("unexpected '" + Peek().text + "'" + At(line_));
  }
  static std::string At(int line) { return " (line " + std::to_string(line) + ")"; }

  std::vector<Piece> pieces_;
  size_t at_ = 0;
  std::vector<Token>* tokens_ = nullptr;
  size_t tok_ = 0;
  int line_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    auto program = std::make_shared<Program>();
    program->body = Parser(Lex(source)).ParseTemplate();
    Template t;
    t.program_ = std::move(program);
    return t;
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("template: ", e.message));
  }
}

}  // namespace floe::jinja
