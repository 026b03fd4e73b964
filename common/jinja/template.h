// Jinja templates: the subset Hugging Face chat templates use, rendered
// byte-identically to Python's jinja2 configured as transformers does
// (trim_blocks, lstrip_blocks, loop controls, a json.dumps `tojson`,
// raise_exception, strftime_now). A construct outside the subset is refused
// when parsing, naming it and its line, never rendered differently.
// A parsed Template is immutable: Render may run on many threads at once.
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
  static absl::StatusOr<Template> Parse(std::string_view source);
  // context: the template's variables by name. An error jinja2 would raise
  // (raise_exception, a type error, a method on an undefined value) is
  // InvalidArgument with its message.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace floe::jinja
