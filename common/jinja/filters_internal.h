// Private to the filter tables (filters.cc): the sequence filters defined in
// sequence_filters.cc, and helpers both files use.
#pragma once

#include "common/jinja/builtins.h"

namespace floe::jinja::filters {

// jinja2's ignore_case: strings lowercased, other values as they are.
Value IgnoreCase(const Value& v);

Value First(const Value& v, const Args& a);
Value Last(const Value& v, const Args& a);
Value Join(const Value& v, const Args& a);
Value ToList(const Value& v, const Args& a);
Value Items(const Value& v, const Args& a);
Value Reverse(const Value& v, const Args& a);
Value Map(const Value& v, const Args& a);
Value Select(const Value& v, const Args& a);
Value Reject(const Value& v, const Args& a);
Value SelectAttr(const Value& v, const Args& a);
Value RejectAttr(const Value& v, const Args& a);
Value Sort(const Value& v, const Args& a);
Value DictSort(const Value& v, const Args& a);
Value Unique(const Value& v, const Args& a);
Value Min(const Value& v, const Args& a);
Value Max(const Value& v, const Args& a);
Value Sum(const Value& v, const Args& a);

}  // namespace floe::jinja::filters
