// A parsed template (shared, immutable) and its renderer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/jinja/ast.h"

namespace floe::jinja {

struct Program {
  Body body;
};

// Throws Error.
std::string RenderProgram(const Program& program, const nlohmann::ordered_json& context);

}  // namespace floe::jinja
