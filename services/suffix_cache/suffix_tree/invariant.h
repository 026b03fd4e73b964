// Abort on a broken invariant whose breach would corrupt the tree (Debian's
// Abseil 20220623 has no absl/log CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FLOE_SUFFIX_INVARIANT(cond, what)                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, what);                                                   \
      std::abort();                                                                \
    }                                                                              \
  } while (0)
