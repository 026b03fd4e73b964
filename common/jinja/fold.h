// jinja2's compile-time constant folding, which decides some renderings:
// the optimizer replaces a constant subexpression (an operator, filter,
// test, attribute, item or conditional over literals) by its value when
// that value has a "safe repr" (None, bools, numbers, strings, and lists,
// tuples and dicts of them), and the compiler prints a constant {{ }}
// directly. Folding uses Expr.as_const's semantics, which differ from the
// runtime's in places: `2[1:]` or `({} if x else 1)`... folded slice through
// the sandbox's getitem and give Undefined where a runtime slice raises.
#pragma once

#include "common/jinja/program.h"

namespace floe::jinja {

void FoldConstants(Program& program);

}  // namespace floe::jinja
