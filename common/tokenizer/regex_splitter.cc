#include "common/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Match data and (for deep backtracking on huge inputs) a JIT stack, owned by
// one Split call so that concurrent calls share nothing mutable.
class MatchState {
 public:
  explicit MatchState(const pcre2_code* code)
      : data_(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchState() {
    pcre2_match_data_free(data_);
    if (context_ != nullptr) pcre2_match_context_free(context_);
    if (stack_ != nullptr) pcre2_jit_stack_free(stack_);
  }
  pcre2_match_data* data() { return data_; }
  pcre2_match_context* context() { return context_; }
  // Gives JIT matching a larger stack; false once the largest one was tried.
  bool GrowStack() {
    if (stack_ != nullptr) return false;
    stack_ = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    if (stack_ == nullptr || context_ == nullptr) return false;
    pcre2_jit_stack_assign(context_, nullptr, stack_);
    return true;
  }

 private:
  pcre2_match_data* data_;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
};

}  // namespace

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(absl::string_view pattern) {
  auto impl = std::make_unique<Impl>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (impl->code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("pre_tokenizer Split regex does not compile at offset ",
                                                   offset, ": ", Pcre2Message(error)));
  }
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(std::move(impl)));
}

absl::Status RegexSplitter::Split(absl::string_view text,
                                  absl::FunctionRef<void(absl::string_view)> emit) const {
  MatchState state(impl_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;   // Where the next search starts.
  size_t done = 0;  // Everything before this was emitted.
  while (pos < n) {
    int rc;
    for (;;) {
      rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, n, pos, 0, state.data(), state.context())
                      : pcre2_match(impl_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, state.data(),
                                    state.context());
      if (rc != PCRE2_ERROR_JIT_STACKLIMIT || !state.GrowStack()) break;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(
          absl::StrCat("pre_tokenizer regex failed at byte ", pos, ": ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data());
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // Empty match: step over one character and search again.
      pos = begin + 1;
      while (pos < n && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > done) emit(text.substr(done, begin - done));
    emit(text.substr(begin, end - begin));
    done = pos = end;
  }
  if (done < n) emit(text.substr(done));
  return absl::OkStatus();
}

}  // namespace floe
