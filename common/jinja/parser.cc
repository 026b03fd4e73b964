// Template::Parse: jinja2's recursive-descent parser over the token stream,
// function for function (parse_tuple, parse_condexpr, ... parse_test), so
// that precedence and the odd corners (tests taking a bare argument, tuples
// without parentheses) read as jinja2 reads them. Whatever the subset does
// not implement is refused here, naming the construct and its line.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/jinja/analysis.h"
#include "common/jinja/builtins.h"
#include "common/jinja/fold.h"
#include "common/jinja/lexer.h"
#include "common/jinja/program.h"
#include "common/jinja/template.h"

namespace floe::jinja {
namespace {

using T = Token::Type;

std::string At(int line) { return " (line " + std::to_string(line) + ")"; }

std::string Describe(const Token& t) {
  switch (t.type) {
    case T::kVarEnd: return "end of print statement";
    case T::kBlockEnd: return "end of statement block";
    case T::kEof: return "end of template";
    case T::kString: return "string";
    case T::kInt: return "integer";
    case T::kFloat: return "float";
    default: return t.text;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Program Run() {
    Program program;
    program.body = Subparse({});
    return program;
  }

 private:
  // ---- token stream ------------------------------------------------------
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (t.type != T::kEof) ++pos_;
    return t;
  }
  bool IsName(std::string_view name) const { return Cur().type == T::kName && Cur().text == name; }
  bool IsOp(std::string_view op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  [[noreturn]] void Error(const std::string& message) const { Fail(message + At(Cur().line)); }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Error("expected '" + std::string(op) + "', got '" + Describe(Cur()) + "'");
  }
  void Expect(T type, const char* what) {
    if (Cur().type != type) Error(std::string("expected ") + what + ", got '" + Describe(Cur()) + "'");
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Error("expected a name, got '" + Describe(Cur()) + "'");
    return Next().text;
  }

  ExprPtr Make(Expr::Type type, int line, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    e->name = std::move(name);
    return e;
  }
  ExprPtr Make2(Expr::Type type, int line, std::string name, ExprPtr a, ExprPtr b) {
    auto e = Make(type, line, std::move(name));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  NodePtr MakeNode(Node::Type type, int line) {
    auto n = std::make_unique<Node>();
    n->type = type;
    n->line = line;
    return n;
  }

  // ---- statements --------------------------------------------------------
  Body Subparse(const std::vector<std::string>& end_tokens) {
    Body body;
    while (Cur().type != T::kEof) {
      const Token& t = Cur();
      if (t.type == T::kData) {
        auto node = MakeNode(Node::Type::kText, t.line);
        node->text = t.text;
        body.push_back(std::move(node));
        Next();
      } else if (t.type == T::kVarBegin) {
        Next();
        auto node = MakeNode(Node::Type::kOutput, Cur().line);
        node->exprs.push_back(ParseTuple());
        body.push_back(std::move(node));
        Expect(T::kVarEnd, "end of print statement");
      } else if (t.type == T::kBlockBegin) {
        Next();
        if (Cur().type == T::kName &&
            std::find(end_tokens.begin(), end_tokens.end(), Cur().text) != end_tokens.end())
          return body;
        for (NodePtr& node : ParseStatement()) body.push_back(std::move(node));
        Expect(T::kBlockEnd, "end of statement block");
      } else {
        Error("unexpected '" + Describe(t) + "'");
      }
    }
    if (!end_tokens.empty()) {
      std::string wanted;
      for (const auto& e : end_tokens) wanted += (wanted.empty() ? "'" : " or '") + e + "'";
      Error("unexpected end of template: looking for " + wanted + " to close a block");
    }
    return body;
  }

  // The body of a block statement: after its tag, up to one of end_tokens
  // (left current unless drop_needle).
  Body ParseStatements(const std::vector<std::string>& end_tokens, bool drop_needle = false) {
    SkipOp(":");
    Expect(T::kBlockEnd, "end of statement block");
    Body body = Subparse(end_tokens);
    if (Cur().type == T::kEof) Error("unexpected end of template");
    if (drop_needle) Next();
    return body;
  }

  std::vector<NodePtr> ParseStatement() {
    Nesting nesting(this);
    if (Cur().type != T::kName) Error("tag name expected");
    const std::string keyword = Cur().text;
    const int line = Cur().line;
    std::vector<NodePtr> out;
    if (keyword == "for") out.push_back(ParseFor());
    else if (keyword == "if") out.push_back(ParseIf());
    else if (keyword == "set") out.push_back(ParseSet());
    else if (keyword == "macro") out.push_back(ParseMacro());
    else if (keyword == "with") out.push_back(ParseWith());
    else if (keyword == "filter") out.push_back(ParseFilterBlock());
    else if (keyword == "generation") out.push_back(ParseGeneration());
    else if (keyword == "print") {
      Next();
      while (Cur().type != T::kBlockEnd) {
        if (!out.empty()) ExpectOp(",");
        auto node = MakeNode(Node::Type::kOutput, line);
        node->exprs.push_back(ParseExpression());
        out.push_back(std::move(node));
      }
    } else if (keyword == "break" || keyword == "continue") {
      Next();
      if (loop_depth_ == 0) Fail("'" + keyword + "' outside loop" + At(line));
      out.push_back(MakeNode(keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue, line));
    } else if (keyword == "block" || keyword == "extends" || keyword == "include" || keyword == "import" ||
               keyword == "from" || keyword == "call" || keyword == "autoescape") {
      Fail("unsupported statement '" + keyword + "'" + At(line));
    } else {
      Fail("unknown tag '" + keyword + "'" + At(line));
    }
    return out;
  }

  NodePtr ParseFor() {
    auto node = MakeNode(Node::Type::kFor, Next().line);
    node->target = ParseAssignTarget(false, {"in"});
    if (!SkipName("in")) Error("expected 'in', got '" + Describe(Cur()) + "'");
    node->exprs.push_back(ParseTuple(false, false, {"recursive"}));
    if (SkipName("if")) node->exprs.push_back(ParseExpression());
    if (IsName("recursive")) Error("unsupported: recursive for loops");
    ++loop_depth_;
    node->bodies.push_back(ParseStatements({"endfor", "else"}));
    --loop_depth_;
    if (Next().text == "else") node->bodies.push_back(ParseStatements({"endfor"}, true));
    return node;
  }

  NodePtr ParseIf() {
    auto node = MakeNode(Node::Type::kIf, Next().line);
    for (;;) {
      node->exprs.push_back(ParseTuple(false, false));
      node->bodies.push_back(ParseStatements({"elif", "else", "endif"}));
      const std::string token = Next().text;
      if (token == "elif") continue;
      if (token == "else") node->bodies.push_back(ParseStatements({"endif"}, true));
      return node;
    }
  }

  NodePtr ParseSet() {
    auto node = MakeNode(Node::Type::kSet, Next().line);
    node->target = ParseAssignTarget(true);
    if (SkipOp("=")) {
      node->exprs.push_back(ParseTuple());
      return node;
    }
    node->type = Node::Type::kSetBlock;
    node->exprs.push_back(IsOp("|") ? ParseFilter(nullptr, false) : nullptr);
    node->bodies.push_back(ParseStatements({"endset"}, true));
    return node;
  }

  NodePtr ParseMacro() {
    auto node = MakeNode(Node::Type::kMacro, Next().line);
    auto macro = std::make_shared<MacroDef>();
    macro->name = ExpectName();
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!macro->params.empty()) ExpectOp(",");
      macro->params.push_back(ExpectName());
      if (SkipOp("=")) macro->defaults.push_back(ParseExpression());
      else if (!macro->defaults.empty()) Error("non-default argument follows default argument");
    }
    ExpectOp(")");
    const int saved = loop_depth_;
    loop_depth_ = 0;  // a macro body is a function of its own
    macro->body = ParseStatements({"endmacro"}, true);
    loop_depth_ = saved;
    macro->takes_varargs = ReadsName(macro->body, "varargs");
    macro->takes_kwargs = ReadsName(macro->body, "kwargs");
    if (ReadsName(macro->body, "caller")) Fail("unsupported: caller() in macros (call blocks)" + At(node->line));
    node->macro = std::move(macro);
    return node;
  }

  NodePtr ParseWith() {
    auto node = MakeNode(Node::Type::kWith, Next().line);
    while (Cur().type != T::kBlockEnd) {
      if (!node->with_names.empty()) ExpectOp(",");
      node->with_names.push_back(ExpectName());
      ExpectOp("=");
      node->exprs.push_back(ParseExpression());
    }
    node->bodies.push_back(ParseStatements({"endwith"}, true));
    return node;
  }

  NodePtr ParseFilterBlock() {
    auto node = MakeNode(Node::Type::kFilterBlock, Next().line);
    node->exprs.push_back(ParseFilter(nullptr, true));
    node->bodies.push_back(ParseStatements({"endfilter"}, true));
    return node;
  }

  // transformers' AssistantTracker tag: its body renders as a call block.
  NodePtr ParseGeneration() {
    auto node = MakeNode(Node::Type::kScope, Next().line);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    node->bodies.push_back(ParseStatements({"endgeneration"}, true));
    loop_depth_ = saved;
    return node;
  }

  // A name, names to unpack ("a, b" or "(a, b)"), or with_namespace "ns.attr".
  Target ParseAssignTarget(bool with_namespace, const std::vector<std::string>& extra_end = {}) {
    Target target;
    if (with_namespace && Look().type == T::kOp && Look().text == ".") {
      target.names.push_back(ExpectName());
      Next();
      target.attr = ExpectName();
      return target;
    }
    const ExprPtr e = ParseTuple(true, true, extra_end);
    auto add = [&](const Expr& name) {
      if (name.type != Expr::Type::kName) Fail("can't assign to this expression" + At(name.line));
      if (name.name == "true" || name.name == "false" || name.name == "none" || name.name == "True" ||
          name.name == "False" || name.name == "None")
        Fail("can't assign to '" + name.name + "'" + At(name.line));
      target.names.push_back(name.name);
    };
    if (e->type == Expr::Type::kTuple) {
      target.unpack = true;
      for (const ExprPtr& part : e->args) add(*part);
    } else {
      add(*e);
    }
    return target;
  }

  // ---- expressions -------------------------------------------------------
  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")")) return true;
    return Cur().type == T::kName && std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end();
  }

  ExprPtr ParseTuple(bool simplified = false, bool with_condexpr = true, const std::vector<std::string>& extra_end = {},
                     bool explicit_parentheses = false) {
    const int line = Cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    for (;;) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      args.push_back(simplified ? ParsePrimary() : with_condexpr ? ParseExpression() : ParseOr());
      if (IsOp(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) Error("expected an expression, got '" + Describe(Cur()) + "'");
    }
    auto tuple = Make(Expr::Type::kTuple, line);
    tuple->args = std::move(args);
    return tuple;
  }

  // Bounds the parser's recursion (parentheses, unary chains, nested
  // blocks) so that a hostile template cannot overflow the stack.
  class Nesting {
   public:
    explicit Nesting(Parser* p) : p_(p) {
      if (++p_->nesting_ > 200) Fail("template nested too deeply" + At(p_->Cur().line));
    }
    ~Nesting() { --p_->nesting_; }

   private:
    Parser* p_;
  };

  ExprPtr ParseExpression() {
    Nesting nesting(this);
    return ParseCondExpr();
  }

  ExprPtr ParseCondExpr() {
    ExprPtr expr1 = ParseOr();
    while (IsName("if")) {
      const int line = Next().line;
      auto cond = Make(Expr::Type::kCondExpr, line);
      cond->args.push_back(ParseOr());
      cond->args.push_back(std::move(expr1));
      cond->args.push_back(SkipName("else") ? ParseCondExpr() : nullptr);
      expr1 = std::move(cond);
    }
    return expr1;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      left = Make2(Expr::Type::kOr, line, "or", std::move(left), ParseAnd());
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      left = Make2(Expr::Type::kAnd, line, "and", std::move(left), ParseNot());
    }
    return left;
  }

  ExprPtr ParseNot() {
    Nesting nesting(this);
    if (IsName("not")) {
      auto e = Make(Expr::Type::kNot, Next().line);
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Cur().line;
    ExprPtr first = ParseMath1();
    ExprPtr compare;
    for (;;) {
      std::string op;
      if (Cur().type == T::kOp && (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (SkipName("in")) {
        op = "in";
      } else if (IsName("not") && Look().type == T::kName && Look().text == "in") {
        Next();
        Next();
        op = "notin";
      } else {
        break;
      }
      if (!compare) {
        compare = Make(Expr::Type::kCompare, line);
        compare->args.push_back(std::move(first));
      }
      compare->ops.push_back(op);
      compare->args.push_back(ParseMath1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      left = Make2(Expr::Type::kBinary, op.line, op.text, std::move(left), ParseConcat());
    }
    return left;
  }

  ExprPtr ParseConcat() {
    const int line = Cur().line;
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    auto concat = Make(Expr::Type::kConcat, line);
    concat->args.push_back(std::move(first));
    while (SkipOp("~")) concat->args.push_back(ParseMath2());
    return concat;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      left = Make2(Expr::Type::kBinary, op.line, op.text, std::move(left), ParsePow());
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const int line = Next().line;
      left = Make2(Expr::Type::kBinary, line, "**", std::move(left), ParseUnary(true));
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    Nesting nesting(this);
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      node = Make(op.text == "-" ? Expr::Type::kNeg : Expr::Type::kPos, op.line);
      node->args.push_back(ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    if (t.type == T::kName) {
      Next();
      auto e = Make(Expr::Type::kLiteral, t.line);
      if (t.text == "true" || t.text == "True") e->value = Value::Bool(true);
      else if (t.text == "false" || t.text == "False") e->value = Value::Bool(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::None();
      else return Make(Expr::Type::kName, t.line, t.text);
      return e;
    }
    if (t.type == T::kString) {
      auto e = Make(Expr::Type::kLiteral, t.line);
      std::string s;
      while (Cur().type == T::kString) s += Next().text;  // adjacent literals join
      e->value = Value::String(std::move(s));
      return e;
    }
    if (t.type == T::kInt || t.type == T::kFloat) {
      Next();
      auto e = Make(Expr::Type::kLiteral, t.line);
      e->value = t.type == T::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      return e;
    }
    if (IsOp("(")) {
      Next();
      ExprPtr e = ParseTuple(false, true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      auto list = Make(Expr::Type::kList, Next().line);
      while (!IsOp("]")) {
        if (!list->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        list->args.push_back(ParseExpression());
      }
      ExpectOp("]");
      return list;
    }
    if (IsOp("{")) {
      auto dict = Make(Expr::Type::kDict, Next().line);
      while (!IsOp("}")) {
        if (!dict->args.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        dict->args.push_back(ParseExpression());
        ExpectOp(":");
        dict->args.push_back(ParseExpression());
      }
      ExpectOp("}");
      return dict;
    }
    Error("unexpected '" + Describe(t) + "'");
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    for (;;) {
      if (IsOp(".") || IsOp("[")) node = ParseSubscript(std::move(node));
      else if (IsOp("(")) node = ParseCall(std::move(node));
      else return node;
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    for (;;) {
      if (IsOp("|")) node = ParseFilter(std::move(node), false);
      else if (IsName("is")) node = ParseTest(std::move(node));
      else if (IsOp("(")) node = ParseCall(std::move(node));
      else return node;
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const Token& t = Next();
    if (t.text == ".") {
      const Token& attr = Next();
      if (attr.type == T::kName) {
        auto e = Make(Expr::Type::kAttr, t.line, attr.text);
        e->args.push_back(std::move(node));
        return e;
      }
      if (attr.type != T::kInt) Fail("expected name or number" + At(attr.line));
      auto index = Make(Expr::Type::kLiteral, attr.line);
      index->value = Value::Int(attr.int_value);
      return Make2(Expr::Type::kItem, t.line, "", std::move(node), std::move(index));
    }
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    ExpectOp("]");
    if (args.size() != 1) Fail("unsupported: tuple subscripts" + At(t.line));
    if (args[0]->type == Expr::Type::kSlice) {
      args[0]->args.insert(args[0]->args.begin(), std::move(node));
      return std::move(args[0]);
    }
    return Make2(Expr::Type::kItem, t.line, "", std::move(node), std::move(args[0]));
  }

  // An index or a slice [start:stop:step] (the object is added by the caller).
  ExprPtr ParseSubscribed() {
    const int line = Cur().line;
    std::vector<ExprPtr> parts;
    if (IsOp(":")) {
      Next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = ParseExpression();
      if (!IsOp(":")) return e;
      Next();
      parts.push_back(std::move(e));
    }
    if (IsOp(":")) parts.push_back(nullptr);
    else if (!IsOp("]") && !IsOp(",")) parts.push_back(ParseExpression());
    else parts.push_back(nullptr);
    if (SkipOp(":")) parts.push_back(!IsOp("]") && !IsOp(",") ? ParseExpression() : nullptr);
    else parts.push_back(nullptr);
    auto slice = Make(Expr::Type::kSlice, line);
    slice->args = std::move(parts);
    return slice;
  }

  void ParseCallArgs(Expr* e) {
    const int line = Cur().line;
    ExpectOp("(");
    bool require_comma = false;
    while (!IsOp(")")) {
      if (require_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) Fail("unsupported: *args and **kwargs in calls" + At(line));
      if (Cur().type == T::kName && Look().type == T::kOp && Look().text == "=") {
        std::string key = Next().text;
        Next();
        e->kwargs.emplace_back(std::move(key), ParseExpression());
      } else {
        if (!e->kwargs.empty()) Fail("invalid syntax for function call expression" + At(line));
        e->args.push_back(ParseExpression());
      }
      require_comma = true;
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    if (callee->type == Expr::Type::kAttr && IsUnimplementedMethod(callee->name))
      Fail("unsupported method ." + callee->name + "()" + At(callee->line));
    if (callee->type == Expr::Type::kName &&
        (callee->name == "cycler" || callee->name == "joiner" || callee->name == "lipsum"))
      Fail("unsupported global function '" + callee->name + "'" + At(callee->line));
    auto call = Make(Expr::Type::kCall, Cur().line);
    call->args.push_back(std::move(callee));
    ParseCallArgs(call.get());
    return call;
  }

  ExprPtr ParseFilter(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const int line = Cur().line;
      const std::string name = ExpectName();
      if (IsOp(".")) Fail("unsupported: dotted filter names" + At(line));
      if (!FindFilter(name)) Fail("unsupported filter '" + name + "'" + At(line));
      auto filter = Make(Expr::Type::kFilter, line, name);
      filter->args.push_back(std::move(node));
      if (IsOp("(")) ParseCallArgs(filter.get());
      node = std::move(filter);
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr node) {
    const int line = Next().line;
    auto test = Make(Expr::Type::kTest, line);
    test->negated = SkipName("not");
    test->name = ExpectName();
    if (IsOp(".")) Fail("unsupported: dotted test names" + At(line));
    if (!FindTest(test->name)) Fail("unsupported test '" + test->name + "'" + At(line));
    test->args.push_back(std::move(node));
    const Token& c = Cur();
    const bool arg_start = c.type == T::kName || c.type == T::kString || c.type == T::kInt || c.type == T::kFloat ||
                           IsOp("(") || IsOp("[") || IsOp("{");
    if (IsOp("(")) {
      ParseCallArgs(test.get());
    } else if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) Error("you cannot chain multiple tests with is");
      test->args.push_back(ParsePostfix(ParsePrimary()));
    }
    return test;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    auto program = std::make_shared<Program>(Parser(Lex(source)).Run());
    FoldConstants(*program);
    Analyze(*program);
    Template t;
    t.loops_over_content_ = LoopsOverContent(program->body);
    t.program_ = std::move(program);
    return t;
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("template: ", e.message));
  }
}

}  // namespace floe::jinja
