#include "common/tokenizer/tokenizer_json_reader.h"

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

using Json = nlohmann::json;

// SAX handler: forwards events to nlohmann's tree builder, except inside
// model.vocab and model.merges, whose contents it collects itself.
class Handler {
 public:
  explicit Handler(TokenizerJson* out) : out_(out), dom_(out->root, /*allow_exceptions=*/false) {}

  const std::string& error() const { return error_; }

  bool null() { return Value([&] { return dom_.null(); }); }
  bool boolean(bool v) { return Value([&] { return dom_.boolean(v); }); }
  bool number_integer(Json::number_integer_t v) {
    if (mode_ == Mode::kVocab) return AddVocab(v);
    return Value([&] { return dom_.number_integer(v); });
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    if (mode_ == Mode::kVocab) return AddVocab(static_cast<int64_t>(v));
    return Value([&] { return dom_.number_unsigned(v); });
  }
  bool number_float(Json::number_float_t v, const std::string& s) {
    return Value([&] { return dom_.number_float(v, s); });
  }
  bool binary(Json::binary_t& v) { return Value([&] { return dom_.binary(v); }); }
  bool string(std::string& v) {
    if (mode_ == Mode::kMerges) return AddMergePart(v);
    return Value([&] { return dom_.string(v); });
  }
  bool key(std::string& k) {
    if (mode_ == Mode::kVocab) {
      key_ = std::move(k);
      return true;
    }
    if (depth_ < 3) keys_[depth_] = k;
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    ++depth_;
    if (mode_ != Mode::kNone) return Fail("model.vocab / model.merges: unexpected object");
    if (depth_ == 3 && keys_[1] == "model" && keys_[2] == "vocab") mode_ = Mode::kVocab;
    return dom_.start_object(mode_ == Mode::kVocab ? 0 : n);
  }
  bool end_object() {
    if (mode_ == Mode::kVocab && depth_ == 3) mode_ = Mode::kNone;
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    if (mode_ == Mode::kMerges) {
      if (depth_ != 4) return Fail("model.merges: nested too deep");
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::kVocab) return Fail("model.vocab: ids must be integers");
    if (depth_ == 3 && keys_[1] == "model" && keys_[2] == "merges") {
      mode_ = Mode::kMerges;
      return dom_.start_array(0);
    }
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    if (mode_ == Mode::kMerges) {
      if (depth_ == 3) {
        if (pair_.size() != 2) return Fail(MergeError("expected [\"a\", \"b\"]"));
        out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
        return true;
      }
      mode_ = Mode::kNone;
    }
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    if (error_.empty()) error_ = absl::StrCat("malformed JSON at byte ", position, " near '", last_token, "': ", e.what());
    return false;
  }

 private:
  enum class Mode { kNone, kVocab, kMerges };

  template <typename F>
  bool Value(F forward) {
    if (mode_ == Mode::kVocab) return Fail("model.vocab: ids must be integers");
    if (mode_ == Mode::kMerges) return Fail(MergeError("expected \"a b\" or [\"a\", \"b\"]"));
    return forward();
  }
  bool AddVocab(int64_t id) {
    out_->vocab.emplace_back(std::move(key_), id);
    return true;
  }
  bool AddMergePart(std::string& s) {
    if (depth_ == 4) {
      pair_.push_back(std::move(s));
      return true;
    }
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Fail(MergeError(absl::StrCat("'", s, "' is not \"a b\"")));
    }
    out_->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    return true;
  }
  std::string MergeError(absl::string_view what) const {
    return absl::StrCat("model.merges[", out_->merges.size(), "]: ", what);
  }
  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  TokenizerJson* out_;
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  Mode mode_ = Mode::kNone;
  int depth_ = 0;
  std::string keys_[3];  // The key being read at depths 1 and 2.
  std::string key_;      // Pending model.vocab key.
  std::vector<std::string> pair_;
  std::string error_;
};

}  // namespace

absl::StatusOr<TokenizerJson> ParseTokenizerJson(absl::string_view text, absl::string_view source) {
  TokenizerJson out;
  Handler handler(&out);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &handler);
  if (!ok || !out.root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", handler.error().empty() ? "expected a JSON object" : handler.error()));
  }
  return out;
}

}  // namespace floe
