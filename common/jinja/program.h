// A parsed template: its statements and the frame analysis of its top level.
// Shared and immutable once parsed.
#pragma once

#include "common/jinja/ast.h"

namespace floe::jinja {

struct Program {
  Body body;
  Shadowed shadowed;  // the template's own frame
};

}  // namespace floe::jinja
