// ParseUntrustedJson against a brute-force oracle: random documents written
// from a tree of our own (not by nlohmann), whose depth and first too-deep
// path a plain recursion computes; the parser must accept exactly those
// within the limit (and then equal nlohmann's own parse) and name the same
// field for the others. Then the hostile shapes: 100,000 nested arrays and
// objects refused without a crash, 100,000 keys accepted.
#include "common/json/bounded_json.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace floe {
namespace {

using nlohmann::ordered_json;

// A JSON value of the oracle's own.
struct Node {
  enum Kind { kScalar, kArray, kObject } kind = kScalar;
  std::string scalar;                // JSON text of a scalar
  std::vector<std::string> keys;     // object: one per child (repeats allowed)
  std::vector<Node> children;
};

Node RandomNode(std::mt19937& rng, int levels_left) {
  Node n;
  const int pick = std::uniform_int_distribution<int>(0, levels_left > 0 ? 9 : 3)(rng);
  if (pick < 4) {
    static const char* kScalars[] = {"1", "-2.5e3", "true", "null", "\"s\"", "\"\\u00e9\\n\"", "18446744073709551615"};
    n.scalar = kScalars[std::uniform_int_distribution<int>(0, 6)(rng)];
    return n;
  }
  n.kind = pick < 7 ? Node::kArray : Node::kObject;
  const int count = std::uniform_int_distribution<int>(0, 3)(rng);
  for (int i = 0; i < count; ++i) {
    if (n.kind == Node::kObject) {
      // Mostly short keys (some repeated); now and then one past the 64-byte cut.
      n.keys.push_back(std::uniform_int_distribution<int>(0, 19)(rng) == 0
                           ? std::string(70, 'k')
                           : std::string(1, static_cast<char>('a' + std::uniform_int_distribution<int>(0, 3)(rng))));
    }
    n.children.push_back(RandomNode(rng, levels_left - 1));
  }
  return n;
}

std::string Write(const Node& n, std::mt19937& rng) {
  const std::string space = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? " \n" : "";
  if (n.kind == Node::kScalar) return space + n.scalar;
  std::string out = space + (n.kind == Node::kArray ? "[" : "{");
  for (size_t i = 0; i < n.children.size(); ++i) {
    if (i) out += ",";
    if (n.kind == Node::kObject) out += "\"" + n.keys[i] + "\"" + space + ":";
    out += Write(n.children[i], rng);
  }
  return out + space + (n.kind == Node::kArray ? "]" : "}");
}

int Depth(const Node& n) {
  if (n.kind == Node::kScalar) return 0;
  int deepest = 0;
  for (const Node& c : n.children) deepest = std::max(deepest, Depth(c));
  return 1 + deepest;
}

// One step of a path: an object key or an array index.
struct Step {
  bool key;
  std::string text;
};

// The steps to the first container (in document order) at depth `limit` + 1.
bool FirstTooDeep(const Node& n, int depth, int limit, std::vector<Step>* steps) {
  if (n.kind == Node::kScalar) return false;
  if (depth > limit) return true;
  for (size_t i = 0; i < n.children.size(); ++i) {
    steps->push_back(n.kind == Node::kObject ? Step{true, n.keys[i]} : Step{false, "[" + std::to_string(i) + "]"});
    if (FirstTooDeep(n.children[i], depth + 1, limit, steps)) return true;
    steps->pop_back();
  }
  return false;
}

// The header's rule: keys cut to 64 bytes, at most 8 steps and 200 bytes
// (a byte per step for its separator), then up to the last key.
std::string NamedPath(std::vector<Step> steps) {
  size_t kept = 0, bytes = 0;
  for (Step& s : steps) {
    if (s.key && s.text.size() > 64) s.text.resize(64);
    if (kept == 8 || bytes + s.text.size() + 1 > 200) break;
    bytes += s.text.size() + 1;
    ++kept;
  }
  while (kept > 0 && !steps[kept - 1].key) --kept;
  std::string path;
  for (size_t i = 0; i < kept; ++i) path += (steps[i].key && !path.empty() ? "." : "") + steps[i].text;
  return path;
}

TEST(BoundedJsonTest, AcceptsExactlyWhatTheOracleFindsWithinTheLimitAndNamesTheSameField) {
  std::mt19937 rng(20240611);
  int refused = 0, accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    const Node doc = RandomNode(rng, 9);
    const std::string text = Write(doc, rng);
    const int limit = std::uniform_int_distribution<int>(1, 8)(rng);
    std::string path = "untouched";
    auto parsed = ParseUntrustedJson(text, JsonLimits{limit}, &path);
    SCOPED_TRACE(text + " limit " + std::to_string(limit));
    if (Depth(doc) <= limit) {
      ++accepted;
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, ordered_json::parse(text));
      EXPECT_EQ(parsed->dump(), ordered_json::parse(text).dump()) << "key order differs";
      EXPECT_EQ(path, "");
      continue;
    }
    ++refused;
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    std::vector<Step> steps;
    ASSERT_TRUE(FirstTooDeep(doc, 1, limit, &steps));
    const std::string expected = NamedPath(steps);
    EXPECT_EQ(path, expected);
    EXPECT_EQ(std::string(parsed.status().message()),
              (expected.empty() ? "" : expected + ": ") + "JSON nests deeper than " + std::to_string(limit) + " levels");
  }
  // Both sides of the limit were exercised.
  EXPECT_GT(accepted, 300);
  EXPECT_GT(refused, 300);
}

TEST(BoundedJsonTest, TheLimitIsInclusive) {
  for (int limit : {1, 2, 64}) {
    const std::string at = std::string(limit, '[') + std::string(limit, ']');
    const std::string past = "[" + at + "]";
    EXPECT_TRUE(ParseUntrustedJson(at, JsonLimits{limit}).ok()) << limit;
    EXPECT_FALSE(ParseUntrustedJson(past, JsonLimits{limit}).ok()) << limit;
  }
  EXPECT_TRUE(ParseUntrustedJson(std::string(64, '[') + std::string(64, ']')).ok()) << "the default is 64";
  EXPECT_FALSE(ParseUntrustedJson(std::string(65, '[') + std::string(65, ']')).ok());
  // Scalars add no level.
  EXPECT_TRUE(ParseUntrustedJson("7", JsonLimits{1}).ok());
  EXPECT_TRUE(ParseUntrustedJson(R"({"a": "x"})", JsonLimits{1}).ok());
}

TEST(BoundedJsonTest, HundredThousandLevelsAreRefusedNamingTheField) {
  constexpr int kLevels = 100000;
  const std::string arrays = std::string(kLevels, '[') + std::string(kLevels, ']');
  std::string path;
  auto root = ParseUntrustedJson(arrays, {}, &path);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(), "JSON nests deeper than 64 levels");
  EXPECT_EQ(path, "");

  const std::string body = R"({"model": "m", "messages": [{"role": "user", "name": )" + arrays + "}]}";
  auto named = ParseUntrustedJson(body, {}, &path);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().message(), "messages[0].name: JSON nests deeper than 64 levels");
  EXPECT_EQ(path, "messages[0].name");

  // Unclosed: refused for depth before the missing brackets matter.
  EXPECT_EQ(ParseUntrustedJson(std::string(kLevels, '[')).status().message(), "JSON nests deeper than 64 levels");

  std::string objects;
  for (int i = 0; i < kLevels; ++i) objects += R"({"a":)";
  objects += "1" + std::string(kLevels, '}');
  auto deep_objects = ParseUntrustedJson<nlohmann::json>(objects, {}, &path);
  ASSERT_FALSE(deep_objects.ok());
  EXPECT_EQ(path, "a.a.a.a.a.a.a.a") << "at most 8 steps";

  // A long key is cut in the path, never echoed whole.
  const std::string long_key(5000, 'x');
  auto long_named = ParseUntrustedJson("{\"" + long_key + "\": " + arrays + "}", {}, &path);
  ASSERT_FALSE(long_named.ok());
  EXPECT_EQ(path, std::string(64, 'x'));
}

TEST(BoundedJsonTest, WideDocumentsAreFineAndKeepTheirOrder) {
  constexpr int kKeys = 100000;
  std::string text = "{";
  for (int i = kKeys - 1; i >= 0; --i) text += "\"k" + std::to_string(i) + "\":[" + std::to_string(i) + "]" + (i ? "," : "");
  text += "}";
  auto wide = ParseUntrustedJson(text);
  ASSERT_TRUE(wide.ok()) << wide.status();
  ASSERT_EQ(wide->size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(wide->begin().key(), "k99999") << "ordered_json keeps the client's order";
  EXPECT_EQ((*wide)["k0"][0], 0);
  auto sorted = ParseUntrustedJson<nlohmann::json>(text);
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(sorted->begin().key(), "k0");
  const std::string array = "[" + std::string(kKeys * 2 - 1, ',') + "]";
  std::string numbers = "[";
  for (int i = 0; i < kKeys; ++i) numbers += std::to_string(i) + (i + 1 < kKeys ? "," : "]");
  auto long_array = ParseUntrustedJson(numbers);
  ASSERT_TRUE(long_array.ok());
  EXPECT_EQ(long_array->size(), static_cast<size_t>(kKeys));
  EXPECT_FALSE(ParseUntrustedJson(array).ok()) << "commas without values are not JSON";
}

TEST(BoundedJsonTest, RepeatedKeysInWideObjectsAsNlohmannParsesThem) {
  // Past 16 members a repeated key is found through a hash index: the same
  // tree as ordered_json::parse (first place, last value) whatever the size.
  std::mt19937 rng(7);
  for (int members : {3, 15, 16, 17, 40, 2000}) {
    std::string text = "{";
    for (int i = 0; i < members; ++i) {
      const int key = std::uniform_int_distribution<int>(0, members / 2)(rng);
      text += (i ? ",\"k" : "\"k") + std::to_string(key) + "\":" + std::to_string(i);
    }
    text += "}";
    auto parsed = ParseUntrustedJson(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->dump(), ordered_json::parse(text).dump()) << members;
    auto sorted = ParseUntrustedJson<nlohmann::json>(text);
    ASSERT_TRUE(sorted.ok());
    EXPECT_EQ(*sorted, nlohmann::json::parse(text)) << members;
  }
}

TEST(BoundedJsonTest, SyntaxErrorsSayWhereWithoutEchoingTheInput) {
  for (const char* bad : {"", "{", "{\"prompt\": ", "[1,]", "{\"a\" 1}", "nul", "\"secret-token-text", "{} {}",
                          "[1e999]", "{\"a\": tru}"}) {
    std::string path = "untouched";
    auto parsed = ParseUntrustedJson(bad, {}, &path);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_EQ(message.rfind("not valid JSON (syntax error at byte ", 0), 0u) << message;
    EXPECT_EQ(message.find("secret"), std::string::npos) << message;
    EXPECT_EQ(path, "");
  }
  // A raw NUL ends nlohmann's input: without a check, "9\0..." would be
  // the document 9 and the bytes after the NUL would go unread.
  for (const std::string bad : {std::string("9\0[[[[", 6), std::string("{\"a\": 1}\0{", 10),
                                std::string("{\"a\": \"x\0\"}", 11), std::string("\0", 1)}) {
    auto parsed = ParseUntrustedJson(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(std::string(parsed.status().message()),
              "not valid JSON (syntax error at byte " + std::to_string(bad.find('\0')) + ")");
  }
  // Duplicate keys: the last wins, as nlohmann's parse (and Python's json) do.
  auto duplicate = ParseUntrustedJson(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_TRUE(duplicate.ok());
  EXPECT_EQ(*duplicate, ordered_json::parse(R"({"a": 1, "b": 2, "a": 3})"));
  EXPECT_EQ((*duplicate)["a"], 3);
}

}  // namespace
}  // namespace floe
