// Test helper: one request's part of a SuffixCacheStore::Step.
#pragma once

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "services/suffix_cache/suffix_cache_store.h"

namespace floe::suffix_cache {

inline StepItem MakeStepItem(const std::string& ns, const std::string& id, int64_t offset,
                             absl::Span<const int32_t> appended, bool speculate) {
  StepItem item;
  item.ns = ns;
  item.request_id = id;
  item.response_offset = offset;
  item.appended = appended;
  item.speculate = speculate;
  return item;
}

}  // namespace floe::suffix_cache
