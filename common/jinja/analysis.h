// jinja2's frame analysis (idtracking.py), which decides what a name means
// where a template assigns it. A frame is the template, a loop iteration, a
// macro call or another block with a scope of its own. jinja2 compiles each
// frame's names to Python locals: a name the frame assigns before reading,
// on every branch, starts out undefined there, even when an outer frame or
// the render context has a value for it:
//
//   {% for m in messages %}{{ foo }}{% endfor %}{% set foo = 1 %}
//
// prints nothing for each message even with foo=5 in the context. Analyze
// records those names (Node::shadowed, MacroDef::shadowed,
// Program::shadowed) so that the renderer hides outer values the same way.
#pragma once

#include <string>

#include "common/jinja/program.h"

namespace floe::jinja {

void Analyze(Program& program);

// Whether `body` reads the variable `name` anywhere (nested frames included).
bool ReadsName(const Body& body, const std::string& name);

// Whether the template loops over a message's content (`for part in
// message['content']`, `message.content | selectattr(...)`, or a name set
// from one): it then takes content as a list of parts. vLLM decides its
// chat content format ("openai" vs "string") by this same look at the AST.
bool LoopsOverContent(const Body& body);

}  // namespace floe::jinja
