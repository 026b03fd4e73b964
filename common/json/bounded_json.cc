#include "common/json/bounded_json.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

// What a depth error's path may hold: enough to name any real field
// ("tools[3].function.parameters.properties.city"), never the bulk of a
// hostile body, and short enough for OpenAI's `param`.
constexpr size_t kMaxPathSteps = 8;
constexpr size_t kMaxPathBytes = 200;
constexpr size_t kMaxKeyBytes = 64;
// An ordered object finds a repeated key by scanning its members up to this
// size and through a hash index past it: nlohmann's ordered_map looks keys
// up by a linear scan, so its own parse of 100,000 keys takes ~5e9 compares.
constexpr size_t kScanMembers = 16;

// One open container on the way to the value being parsed.
template <typename Json>
struct Frame {
  Json* container = nullptr;
  std::string key;         // object: the current member's key, cut to kMaxKeyBytes (for the path)
  Json* member = nullptr;  // object: where the current member's value goes
  size_t count = 0;        // array: elements begun so far (the current one is count - 1)
  std::unordered_multimap<size_t, size_t> index;  // ordered object past kScanMembers: key hash -> member
};

// Builds the tree as nlohmann's DOM parser does (same values, a repeated key
// keeps its first place and takes its last value), counting the open
// containers: the first one past the limit stops the parse (by returning
// false), so the tree never holds a level deeper than the limit. The stack
// of pointers stays valid because a container only grows while none of its
// children is open.
template <typename Json>
class BoundedSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedSax(Json* root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return Place(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return Place(Json(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return Place(Json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Place(Json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return Place(Json(v)) != nullptr; }
  bool string(string_t& v) { return Place(Json(std::move(v))) != nullptr; }
  bool binary(binary_t&) { return false; }  // only binary formats (CBOR...) have these; text never does

  bool start_object(std::size_t) { return Open(nlohmann::json::value_t::object); }
  bool start_array(std::size_t) { return Open(nlohmann::json::value_t::array); }
  bool key(string_t& k) {
    Frame<Json>& f = frames_.back();
    f.key.assign(k, 0, std::min(k.size(), kMaxKeyBytes));
    f.member = Member(f, std::move(k));
    return true;
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception&) {
    syntax_error_at_ = position;
    return false;
  }

  bool too_deep() const { return too_deep_; }
  size_t syntax_error_at() const { return syntax_error_at_; }
  const std::string& path() const { return path_; }

 private:
  // Puts a value where the parse is: the root, the next array element, or
  // the current object member.
  Json* Place(Json&& v) {
    if (frames_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Frame<Json>& f = frames_.back();
    if (f.container->is_array()) {
      ++f.count;
      auto& array = f.container->template get_ref<typename Json::array_t&>();
      array.push_back(std::move(v));
      return &array.back();
    }
    *f.member = std::move(v);
    return f.member;
  }

  bool Open(nlohmann::json::value_t type) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      if (!frames_.back().container->is_object()) ++frames_.back().count;  // the path names this element
      too_deep_ = true;
      path_ = PathOfFrames();
      return false;
    }
    Json* container = Place(Json(type));
    frames_.push_back(Frame<Json>{container, {}, nullptr, 0, {}});
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return true;
  }

  Json* Member(Frame<Json>& f, string_t&& k) {
    auto& object = f.container->template get_ref<typename Json::object_t&>();
    if constexpr (!std::is_same_v<Json, nlohmann::ordered_json>) {
      return &object[std::move(k)];  // std::map: logarithmic
    } else {
      using Container = typename Json::object_t::Container;
      Container& members = object;
      const size_t hash = std::hash<string_t>()(k);
      if (members.size() < kScanMembers) {
        for (auto& [name, value] : members)
          if (name == k) return &value;
      } else {
        if (f.index.empty())
          for (size_t i = 0; i < members.size(); ++i) f.index.emplace(std::hash<string_t>()(members[i].first), i);
        const auto [first, last] = f.index.equal_range(hash);
        for (auto it = first; it != last; ++it)
          if (members[it->second].first == k) return &members[it->second].second;
        f.index.emplace(hash, members.size());
      }
      members.emplace_back(std::move(k), Json());
      return &members.back().second;
    }
  }

  // The open containers' steps, bounded, up to the last object key: every
  // prefix of the full path names a field whose value nests too deep, and
  // the last key is the field a client wrote (`name`, not `name[0][0]...`).
  std::string PathOfFrames() const {
    std::vector<std::string> steps;
    size_t bytes = 0;
    for (const Frame<Json>& f : frames_) {
      std::string step = f.container->is_object() ? f.key : absl::StrCat("[", f.count - 1, "]");
      if (steps.size() == kMaxPathSteps || bytes + step.size() + 1 > kMaxPathBytes) break;
      bytes += step.size() + 1;
      steps.push_back(std::move(step));
    }
    size_t keep = 0;
    for (size_t i = 0; i < steps.size(); ++i)
      if (frames_[i].container->is_object()) keep = i + 1;
    std::string path;
    for (size_t i = 0; i < keep; ++i) {
      if (frames_[i].container->is_object() && !path.empty()) path += '.';
      path += steps[i];
    }
    return path;
  }

  Json* const root_;
  const int max_depth_;
  std::vector<Frame<Json>> frames_;
  bool too_deep_ = false;
  size_t syntax_error_at_ = 0;
  std::string path_;
};

}  // namespace

template <typename Json>
absl::StatusOr<Json> ParseUntrustedJson(std::string_view text, const JsonLimits& limits, std::string* error_path) {
  if (error_path) error_path->clear();
  const int max_depth = std::max(1, limits.max_depth);
  // nlohmann's lexer takes a NUL byte for the end of its input, so "9\0<any
  // bytes>" would parse as 9 and the rest would go unread. JSON text never
  // holds a raw NUL (strings escape control characters), so one is refused.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON (syntax error at byte ", nul, ")"));
  Json root;
  BoundedSax<Json> sax(&root, max_depth);
  bool parsed = false;
  try {
    parsed = Json::sax_parse(text.data(), text.data() + text.size(), &sax);
  } catch (const nlohmann::json::exception&) {
    // Not expected from the text parser, which reports errors to the
    // handler; refused all the same, never thrown at the caller.
    return absl::InvalidArgumentError("not valid JSON");
  }
  if (parsed) return root;
  if (sax.too_deep()) {
    if (error_path) *error_path = sax.path();
    return absl::InvalidArgumentError(absl::StrCat(sax.path(), sax.path().empty() ? "" : ": ",
                                                   "JSON nests deeper than ", max_depth, " levels"));
  }
  return absl::InvalidArgumentError(absl::StrCat("not valid JSON (syntax error at byte ", sax.syntax_error_at(), ")"));
}

template absl::StatusOr<nlohmann::json> ParseUntrustedJson<nlohmann::json>(std::string_view, const JsonLimits&,
                                                                           std::string*);
template absl::StatusOr<nlohmann::ordered_json> ParseUntrustedJson<nlohmann::ordered_json>(std::string_view,
                                                                                           const JsonLimits&,
                                                                                           std::string*);

}  // namespace floe
