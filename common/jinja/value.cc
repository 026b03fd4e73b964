#include "common/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace floe::jinja {

void Fail(std::string message) { throw Error{std::move(message)}; }

Value Value::MakeList(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::Namespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind = Kind::kNamespace;
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e));
      return MakeDict(std::move(items));
    }
    default:
      return Undefined();
  }
}

const Value* Value::Find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    default:
      return true;
  }
}

std::string FloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: scientific when the
  // exponent is < -4 or >= 16.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, end);  // d.ddde[+-]XX
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa = mantissa.substr(1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  std::string out;
  if (exponent >= 0) {
    if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
  } else {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  }
  return sign + out;
}

namespace {

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == quote) out += std::string("\\") + static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

}  // namespace

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return ReprString(v.s);
    case Value::Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + Repr((*v.list)[i]);
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : *v.dict) {
        out += (first ? "" : ", ") + ReprString(k) + ": " + Repr(e);
        first = false;
      }
      return out + "}";
    }
    default:
      return Str(v);
  }
}

std::string Str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return FloatRepr(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return Repr(v);
    case Value::Kind::kNamespace:
      return "<Namespace>";
    case Value::Kind::kMacro:
      return "<Macro>";
    case Value::Kind::kFunction:
      return "<function " + v.s + ">";
  }
  return "";
}

const char* TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kMacro: return "Macro";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

namespace {
double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : (v.b ? 1 : 0);
}
}  // namespace

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat)
      return (a.kind == Value::Kind::kBool ? a.b : a.i) == (b.kind == Value::Kind::kBool ? b.b : b.i);
    return AsDouble(a) == AsDouble(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!Equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Kind::kDict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.dict == b.dict && a.macro == b.macro && a.s == b.s;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kInt && b.kind == Value::Kind::kInt) return a.i < b.i;
    return AsDouble(a) < AsDouble(b);
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (Less((*a.list)[i], (*b.list)[i])) return true;
      if (Less((*b.list)[i], (*a.list)[i])) return false;
    }
    return a.list->size() < b.list->size();
  }
  Fail(std::string("'<' not supported between instances of '") + TypeName(a) + "' and '" + TypeName(b) + "'");
}

namespace {

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          *out += hex;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void Dump(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys,
          int level, std::string* out) {
  auto newline = [&](int l) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * l), ' ');
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
    case Value::Kind::kString: JsonString(v.s, out); return;
    case Value::Kind::kList: {
      if (v.list->empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) *out += item_sep;
        newline(level + 1);
        Dump((*v.list)[i], indent, item_sep, key_sep, sort_keys, level + 1, out);
      }
      newline(level);
      *out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict->empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : *v.dict) items.push_back(&item);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        newline(level + 1);
        JsonString(items[i]->first, out);
        *out += key_sep;
        Dump(items[i]->second, indent, item_sep, key_sep, sort_keys, level + 1, out);
      }
      newline(level);
      *out += '}';
      return;
    }
    default:
      Fail(std::string("Object of type ") + TypeName(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string ToJson(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                   bool sort_keys) {
  std::string out;
  Dump(v, indent, item_sep, key_sep, sort_keys, 0, &out);
  return out;
}

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace floe::jinja
