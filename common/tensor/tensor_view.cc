#include "common/tensor/tensor_view.h"

#include "absl/strings/str_join.h"

namespace floe {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

}  // namespace floe
