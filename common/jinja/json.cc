#include "common/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

void AppendEscape(unsigned code, std::string* out) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "\\u%04x", code);
  *out += hex;
}

void DumpString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (char32_t c : Decode(s)) {
    switch (c) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {  // a surrogate pair, as Python writes it
        const char32_t v = c - 0x10000;
        AppendEscape(0xD800 | (v >> 10), out);
        AppendEscape(0xDC00 | (v & 0x3FF), out);
      } else {
        AppendEscape(static_cast<unsigned>(c), out);
      }
    } else {
      AppendUtf8(c, out);
    }
  }
  *out += '"';
}

void Dump(const Value& v, const JsonOptions& o, int level, std::string* out) {
  NestingGuard guard;
  auto newline = [&](int depth) {
    if (!o.indented) return;
    *out += '\n';
    for (int i = 0; i < depth; ++i) *out += o.indent;
  };
  switch (v.kind) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) *out += "NaN";
      else if (std::isinf(v.f)) *out += v.f > 0 ? "Infinity" : "-Infinity";
      else *out += FloatRepr(v.f);
      return;
    case Value::Kind::kString: DumpString(v.s, o.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (v.seq != Value::Seq::kList && v.seq != Value::Seq::kTuple) break;
      if (v.list->empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) *out += o.item_separator;
        newline(level + 1);
        Dump((*v.list)[i], o, level + 1, out);
      }
      newline(level);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : *v.dict) items.push_back(&item);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator;
        newline(level + 1);
        DumpString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        Dump(items[i]->second, o, level + 1, out);
      }
      newline(level);
      *out += '}';
      return;
    }
    default:
      break;
  }
  Fail("Object of type " + TypeName(v) + " is not JSON serializable");
}

}  // namespace

std::string JsonDumps(const Value& v, const JsonOptions& options) {
  std::string out;
  Dump(v, options, 0, &out);
  return out;
}

}  // namespace floe::jinja
