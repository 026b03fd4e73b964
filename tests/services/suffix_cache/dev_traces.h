// Where the tests find the dev traces: outside the repository, in
// FLOE_TRACE_DIR (default /work/shared/traces, ../shared/traces beside the
// checkout). Tests that need them fail without them rather than skip: a
// skipped exactness check would hide a regression.
#pragma once

#include <cstdlib>
#include <string>

namespace floe::suffix_cache {

inline std::string DevTracePath(const std::string& name) {
  const char* dir = std::getenv("FLOE_TRACE_DIR");
  return std::string(dir ? dir : "/work/shared/traces") + "/" + name;
}

}  // namespace floe::suffix_cache
