// Jinja templates: the subset Hugging Face chat templates use, rendered
// byte-identically to Python's jinja2 (3.1) configured as transformers
// configures it: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]) with raise_exception(),
// strftime_now() and a json.dumps `tojson` (ensure_ascii, indent,
// separators, sort_keys). Values follow Python (1.0 prints "1.0", True
// prints "True", 7 / 2 == 3.5, dicts keep insertion order, Undefined prints
// nothing) down to jinja2's scoping rules.
//
// Supported: if/elif/else, for (with `if` filter, else, loop.*, break,
// continue), set (incl. block set, tuple unpacking, namespace attributes),
// macro (defaults, keyword args, varargs/kwargs), with, filter blocks,
// print, raw, comments, whitespace control, transformers' {% generation %};
// all operators; the str/dict/list methods and the filters and tests in
// methods.cc, str_methods.cc, filters.cc, sequence_filters.cc and tests.cc.
// jinja2's own behaviours come along: lazy generator filters, lazy loops,
// compile-time constant folding, Markup from |safe, the frame rules of its
// compiled locals (analysis.h).
// Refused at Parse, naming the construct and its line: include, import,
// extends, block, call blocks and caller(), autoescape, recursive loops,
// unknown tags; filters and tests outside the subset; calls to Python
// str/dict/list methods it lacks (.expandtabs(), .append()...); cycler,
// joiner, lipsum; *args/**kwargs in calls; tuple subscripts; \N{...}
// escapes; non-ASCII names.
// Ints are 64-bit: where Python would grow an int past that, rendering
// fails rather than wrap.
//
// Thread-safety: a parsed Template is immutable; Render may run on many
// threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace floe::jinja {

struct Program;

class Template {
 public:
  // Parses once; an unsupported construct (statement, filter, test, method,
  // syntax) is an InvalidArgument error naming it and its line.
  static absl::StatusOr<Template> Parse(std::string_view source);
  // context: variables by name (a JSON object; null means none). An error
  // jinja2 would raise (raise_exception, a type error, use of an undefined
  // value that jinja2 rejects) is InvalidArgument with its message.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  // Whether the template loops over a message's content (analysis.h's
  // LoopsOverContent): it takes content as a list of parts.
  bool loops_over_content() const { return loops_over_content_; }

 private:
  std::shared_ptr<const Program> program_;
  bool loops_over_content_ = false;
};

}  // namespace floe::jinja
