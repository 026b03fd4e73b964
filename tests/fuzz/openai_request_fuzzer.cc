// Fuzzes the OpenAI HTTP request path of the router: openai::Parse of a
// /v1/completions or /v1/chat/completions body (the chat template is the
// built-in tiny model's, Llama 3.1), then what RouterService::Prepare does
// with the result: tokenize a text prompt (the tiny model's tokenizer) and
// ResolveRequest against the tiny model's limits.
// Input: byte 0 picks the endpoint (bit 0) and whether x-session-id /
// x-request-id headers are present (bits 1, 2); the rest is the body.
// Invariants: a refused body gets a 4xx error whose JSON serializes as the
// frontend sends it, with message and param bounded (a client's strings are
// echoed at most truncated); an accepted one maps onto a GenerateRequest
// with exactly one prompt form (chat: rendered text, no extra special
// tokens), logprobs consistent, a text prompt that tokenizes, and, when
// ResolveRequest accepts it, every resolved-request invariant
// (request_checks.h). Nesting: a valid JSON body deeper than 64 levels
// (counted by a scan of its brackets outside strings, not by the parser
// under test) is refused for its depth, and one within the limit never is.
// A body holding a raw NUL byte (where nlohmann's lexer would stop reading)
// is refused.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "common/jinja/chat_template.h"
#include "common/json/bounded_json.h"
#include "common/tokenizer/tokenizer.h"
#include "services/request/resolve_request.h"
#include "services/router/openai/openai_request.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/request_checks.h"

namespace floe {
namespace {

// The deepest nesting of brackets outside JSON strings.
int ScanDepth(const std::string& body) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

struct Model {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
};

const Model& TinyModel() {
  static const Model* model = [] {
    auto* m = new Model;
    const std::string dir = fuzz::TokenizerDir("tokenizer-llama3_1");
    auto t = Tokenizer::Load(dir);
    FUZZ_CHECK(t.ok(), "cannot load the tokenizer (run scripts/bootstrap.sh): %s", t.status().ToString().c_str());
    m->tokenizer = std::move(*t);
    auto chat = ChatTemplate::FromTokenizerConfig(dir + "/tokenizer_config.json");
    FUZZ_CHECK(chat.ok(), "cannot load the chat template: %s", chat.status().ToString().c_str());
    m->chat = std::make_unique<ChatTemplate>(std::move(*chat));
    return m;
  }();
  return *model;
}

}  // namespace
}  // namespace floe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  if (size < 1) return 0;
  const Model& model = TinyModel();
  const openai::Endpoint endpoint = (data[0] & 1) ? openai::Endpoint::kChat : openai::Endpoint::kCompletions;
  openai::RequestContext context;
  context.chat_template = model.chat.get();
  if (data[0] & 2) context.session_header = "session-from-header";
  if (data[0] & 4) context.request_id_header = "request-from-header";
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  openai::ParsedRequest parsed;
  auto error = openai::Parse(endpoint, body, context, &parsed);
  // nlohmann's accept() is iterative: safe on any depth. It stops at a NUL
  // byte as at the end of its input; the parser under test refuses one.
  const bool has_nul = body.find('\0') != std::string::npos;
  FUZZ_CHECK(!has_nul || error, "a body holding a NUL byte was accepted");
  if (!has_nul && nlohmann::json::accept(body)) {
    const bool too_deep = ScanDepth(body) > kDefaultMaxJsonDepth;
    const bool refused_for_depth =
        error && error->message.find("JSON nests deeper than " + std::to_string(kDefaultMaxJsonDepth) + " levels") !=
                     std::string::npos;
    FUZZ_CHECK(too_deep == refused_for_depth, "depth %d, refused for depth: %d (%s)", ScanDepth(body),
               refused_for_depth, error ? error->message.c_str() : "accepted");
  }
  if (error) {
    FUZZ_CHECK(error->status >= 400 && error->status < 500, "status %d", error->status);
    FUZZ_CHECK(!error->message.empty(), "empty error message");
    FUZZ_CHECK(error->message.size() <= 1024 && error->param.size() <= 256,
               "error echoes %zu + %zu bytes of the request", error->message.size(), error->param.size());
    // As openai_frontend.cc sends it (invalid UTF-8 replaced, never thrown).
    const std::string json =
        openai::ErrorJson(*error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    FUZZ_CHECK(!json.empty(), "empty error JSON");
    return 0;
  }
  floe::v1::GenerateRequest& g = parsed.generate;
  FUZZ_CHECK(g.prompt_case() != floe::v1::GenerateRequest::PROMPT_NOT_SET, "accepted without a prompt");
  if (endpoint == openai::Endpoint::kChat) {
    FUZZ_CHECK(g.prompt_case() == floe::v1::GenerateRequest::kText && g.has_add_special_tokens() &&
                   !g.add_special_tokens(),
               "chat prompt is not rendered text without special tokens");
  }
  FUZZ_CHECK(parsed.logprobs.has_value() == g.logprobs().enabled() &&
                 (!parsed.logprobs || (*parsed.logprobs >= 0 && *parsed.logprobs <= 20 &&
                                       *parsed.logprobs == g.logprobs().top_n())),
             "logprobs mapped wrongly");
  if (context.request_id_header.size() > 0) {
    FUZZ_CHECK(g.request_id() == context.request_id_header, "x-request-id not applied");
  }
  // RouterService::Prepare.
  if (!CheckRequestStrings(g).ok()) return 0;
  if (g.prompt_case() == floe::v1::GenerateRequest::kText) {
    if (g.text().empty()) return 0;
    auto ids = model.tokenizer->Encode(g.text(), !g.has_add_special_tokens() || g.add_special_tokens());
    FUZZ_CHECK(ids.ok(), "an accepted prompt does not tokenize: %s", ids.status().ToString().c_str());
    g.mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  }
  RequestLimits limits;
  limits.vocab_size = model.tokenizer->vocab_size();
  limits.max_context = 4096;
  limits.max_tokens_limit = 2048;
  if (!ResolveRequest(limits, g).ok()) return 0;
  CheckResolved(limits, g);
  return 0;
}
