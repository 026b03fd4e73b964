#include "common/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/added_token_matcher.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/nfc_normalizer.h"
#include "common/tokenizer/regex_splitter.h"
#include "common/tokenizer/tokenizer_json_reader.h"
#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace floe {
namespace {

using Json = nlohmann::json;

constexpr uint8_t kPresent = 1;
constexpr uint8_t kSpecial = 2;
constexpr uint8_t kAdded = 4;

// The GPT-2 pattern the ByteLevel pre-tokenizer applies when `use_regex` is set.
constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Parses `path`, or returns null JSON when the file does not exist.
absl::StatusOr<Json> ReadOptionalJson(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return Json();
  FLOE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": malformed JSON"));
  return json;
}

// Vocabulary strings are in the byte-level alphabet; anything outside it is
// taken literally (as Hugging Face's decoder does).
std::string VocabBytes(const std::string& token) {
  std::string bytes;
  if (byte_level::CharsToBytes(token, &bytes)) return bytes;
  return token;
}

// Absent, or an integer (a float such as 1e300 has no int value: reading it
// as one is undefined behavior).
bool IntOrAbsent(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_number_integer();
}

// Token ids are indexes into per-id tables: 2^24 is far above any real
// vocabulary (Llama 3: 128256) and bounds what one id makes Load allocate.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

bool BoolField(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string TypeOf(const Json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// Calls `load` on `j`, or on each member when `j` is a {"type": "Sequence"}
// whose members are listed under `list_key`; nothing for null.
template <typename Load>
absl::Status ForEachComponent(const Json& j, const char* list_key, Load load) {
  if (j.is_null()) return absl::OkStatus();
  if (TypeOf(j) != "Sequence") return load(j);
  for (const Json& child : j.at(list_key)) FLOE_RETURN_IF_ERROR(ForEachComponent(child, list_key, load));
  return absl::OkStatus();
}

// "<s>" or {"content": "<s>", ...}; empty when absent or null.
std::string TokenContent(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

}  // namespace

struct Tokenizer::EncodeState {
  std::vector<int32_t>* out;
  BpeModel::Scratch scratch;
  std::string normalized[2];  // Alternating buffers for the normalizer steps.
  std::vector<std::string> prefixed;  // Per stage, for add_prefix_space / Metaspace.
  bool at_text_start = true;          // No text or added token was encoded yet.
};

class Tokenizer::Loader {
 public:
  explicit Loader(Tokenizer* t) : t_(t) {}

  absl::Status Load(const std::filesystem::path& json_path, const std::filesystem::path& dir) {
    FLOE_ASSIGN_OR_RETURN(std::string text, ReadFile(json_path));
    FLOE_ASSIGN_OR_RETURN(TokenizerJson parsed, ParseTokenizerJson(text, json_path.string()));
    text = std::string();
    const Json& root = parsed.root;
    FLOE_ASSIGN_OR_RETURN(Json config, ReadOptionalJson(dir / "tokenizer_config.json"));
    FLOE_ASSIGN_OR_RETURN(Json generation, ReadOptionalJson(dir / "generation_config.json"));
    try {
      // The decoder and pre-tokenizer say how vocabulary strings are spelled.
      FLOE_RETURN_IF_ERROR(ForEachComponent(root.value("decoder", Json()), "decoders",
                                            [&](const Json& j) { return LoadDecoder(j); }));
      FLOE_RETURN_IF_ERROR(ForEachComponent(root.value("pre_tokenizer", Json()), "pretokenizers",
                                            [&](const Json& j) { return LoadPreTokenizer(j); }));
      t_->byte_level_vocab_ = byte_level_seen_;
      FLOE_RETURN_IF_ERROR(LoadModel(root.value("model", Json()), std::move(parsed.vocab), std::move(parsed.merges)));
      FLOE_RETURN_IF_ERROR(LoadAddedTokens(root.value("added_tokens", Json::array())));
      FLOE_RETURN_IF_ERROR(ForEachComponent(root.value("normalizer", Json()), "normalizers",
                                            [&](const Json& j) { return LoadNormalizer(j); }));
      bool templated = false;
      FLOE_RETURN_IF_ERROR(ForEachComponent(root.value("post_processor", Json()), "processors",
                                            [&](const Json& j) { return LoadPostProcessor(j, &templated); }));
      FLOE_RETURN_IF_ERROR(LoadConfigs(config, generation, templated));
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(json_path.string(), ": unexpected field type: ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  void SetToken(int32_t id, std::string bytes, uint8_t flags) {
    if (static_cast<size_t>(id) >= t_->token_bytes_.size()) {
      t_->token_bytes_.resize(id + 1);
      t_->token_flags_.resize(id + 1, 0);
    }
    t_->token_bytes_[id] = std::move(bytes);
    t_->token_flags_[id] = flags;
  }

  // Metaspace's prepend_scheme, or the older add_prefix_space (default true).
  static Stage::Prepend MetaspacePrepend(const Json& j) {
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string scheme = j["prepend_scheme"].get<std::string>();
      if (scheme == "first") return Stage::Prepend::kFirst;
      if (scheme == "never") return Stage::Prepend::kNever;
      return Stage::Prepend::kAlways;
    }
    return !j.contains("add_prefix_space") || BoolField(j, "add_prefix_space") ? Stage::Prepend::kAlways
                                                                               : Stage::Prepend::kNever;
  }

  // Byte-level vocabularies spell bytes in the GPT-2 alphabet; SentencePiece
  // ones spell text, with <0xXX> byte tokens.
  std::string ModelKey(const std::string& token) const {
    return t_->byte_level_vocab_ ? VocabBytes(token) : token;
  }

  // What the decoder turns a vocabulary string into.
  std::string DisplayBytes(const std::string& token) const {
    if (t_->byte_level_vocab_) return VocabBytes(token);
    int value = 0;
    if (decoder_byte_fallback_ && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
        absl::SimpleHexAtoi(absl::string_view(token).substr(3, 2), &value)) {
      return std::string(1, static_cast<char>(value));
    }
    std::string out = token;
    for (const auto& [from, to] : decoder_replacements_) out = absl::StrReplaceAll(out, {{from, to}});
    return out;
  }

  // `vocab_entries` and `merges` are model.vocab and model.merges, read outside the JSON tree.
  absl::Status LoadModel(const Json& model, std::vector<std::pair<std::string, int64_t>> vocab_entries,
                         std::vector<std::pair<std::string, std::string>> merges) {
    if (!model.is_object()) return absl::InvalidArgumentError("tokenizer.json: missing 'model'");
    const std::string type = TypeOf(model);
    if (!type.empty() && type != "BPE") {
      return absl::UnimplementedError(absl::StrCat("model.type '", type, "' (only BPE is supported)"));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = model.find(key);
      if (it != model.end() && it->is_string() && !it->get<std::string>().empty()) {
        return absl::UnimplementedError(absl::StrCat("model.", key, " is not supported"));
      }
    }
    auto dropout = model.find("dropout");
    if (dropout != model.end() && dropout->is_number() && dropout->get<double>() > 0) {
      return absl::UnimplementedError("model.dropout is not supported");
    }
    absl::flat_hash_map<std::string, int32_t> vocab;
    vocab.reserve(vocab_entries.size());
    for (const auto& [token, id] : vocab_entries) {
      if (id < 0 || id > kMaxTokenId) {
        return absl::InvalidArgumentError(absl::StrCat("model.vocab['", token, "']: id ", id, " out of range"));
      }
      vocab[ModelKey(token)] = static_cast<int32_t>(id);
      SetToken(static_cast<int32_t>(id), DisplayBytes(token), kPresent);
    }
    vocab_entries = {};
    for (auto& [left, right] : merges) {
      left = ModelKey(left);
      right = ModelKey(right);
    }
    BpeModel::Options options;
    options.ignore_merges = BoolField(model, "ignore_merges");
    options.byte_level = t_->byte_level_vocab_;
    options.byte_fallback = BoolField(model, "byte_fallback");
    options.fuse_unk = BoolField(model, "fuse_unk");
    auto unk = model.find("unk_token");
    if (unk != model.end() && unk->is_string()) {
      auto id = vocab.find(ModelKey(unk->get<std::string>()));
      if (id == vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat("model.unk_token '", unk->get<std::string>(), "' is not in model.vocab"));
      }
      options.unk_id = id->second;
    }
    FLOE_ASSIGN_OR_RETURN(t_->bpe_, BpeModel::Create(std::move(vocab), merges, options));
    return absl::OkStatus();
  }

  absl::Status LoadAddedTokens(const Json& added) {
    std::vector<AddedTokenMatcher::Token> tokens;
    for (const Json& a : added) {
      AddedTokenMatcher::Token token;
      token.content = a.at("content").get<std::string>();
      if (!a.at("id").is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat("added_tokens '", token.content, "': id is not an integer"));
      }
      const int64_t id = a.at("id").get<int64_t>();
      if (id < 0 || id > kMaxTokenId) {
        return absl::InvalidArgumentError(absl::StrCat("added_tokens '", token.content, "': id ", id, " out of range"));
      }
      token.id = static_cast<int32_t>(id);
      token.lstrip = BoolField(a, "lstrip");
      token.rstrip = BoolField(a, "rstrip");
      token.single_word = BoolField(a, "single_word");
      SetToken(token.id, token.content, kPresent | kAdded | (BoolField(a, "special") ? kSpecial : 0));
      t_->added_by_content_[token.content] = token.id;
      tokens.push_back(std::move(token));
    }
    t_->added_matcher_ = std::make_unique<AddedTokenMatcher>(tokens);
    return absl::OkStatus();
  }

  absl::Status LoadNormalizer(const Json& n) {
    const std::string type = TypeOf(n);
    using Kind = NormalizerStep::Kind;
    if (type == "NFC") {
      if (t_->nfc_ == nullptr) {
        FLOE_ASSIGN_OR_RETURN(t_->nfc_, NfcNormalizer::Create());
      }
      t_->normalizers_.push_back({Kind::kNfc, "", ""});
    } else if (type == "Prepend") {
      t_->normalizers_.push_back({Kind::kPrepend, "", n.at("prepend").get<std::string>()});
    } else if (type == "Replace" && n.at("pattern").contains("String")) {
      t_->normalizers_.push_back(
          {Kind::kReplace, n["pattern"]["String"].get<std::string>(), n.at("content").get<std::string>()});
    } else {
      return absl::UnimplementedError(absl::StrCat(
          "normalizer.type '", type, "' (supported: NFC, Prepend, Replace with a String pattern, Sequence)"));
    }
    return absl::OkStatus();
  }

  absl::Status AddSplitStage(absl::string_view pattern, bool add_prefix_space) {
    Stage stage;
    stage.add_prefix_space = add_prefix_space;
    if (!pattern.empty()) {
      FLOE_ASSIGN_OR_RETURN(stage.splitter, RegexSplitter::Create(pattern));
    }
    t_->stages_.push_back(std::move(stage));
    return absl::OkStatus();
  }

  absl::Status LoadPreTokenizer(const Json& p) {
    const std::string type = TypeOf(p);
    if (type == "ByteLevel") {
      byte_level_seen_ = true;
      const bool use_regex = !p.contains("use_regex") || BoolField(p, "use_regex");
      const bool prefix = BoolField(p, "add_prefix_space");
      if (use_regex || prefix) FLOE_RETURN_IF_ERROR(AddSplitStage(use_regex ? kGpt2Pattern : "", prefix));
      return absl::OkStatus();
    }
    if (type == "Metaspace") {
      Stage stage;
      stage.metaspace = p.value("replacement", std::string("\u2581"));
      if (stage.metaspace.empty()) return absl::InvalidArgumentError("pre_tokenizer Metaspace: empty replacement");
      stage.prepend = MetaspacePrepend(p);
      stage.metaspace_split = !p.contains("split") || BoolField(p, "split");
      t_->stages_.push_back(std::move(stage));
      return absl::OkStatus();
    }
    if (type == "Split") {
      const Json& pattern = p.at("pattern");
      if (!pattern.contains("Regex")) {
        return absl::UnimplementedError("pre_tokenizer Split: only {\"Regex\": ...} patterns are supported");
      }
      if (p.value("behavior", std::string("Isolated")) != "Isolated" || BoolField(p, "invert")) {
        return absl::UnimplementedError("pre_tokenizer Split: only behavior Isolated without invert is supported");
      }
      return AddSplitStage(pattern["Regex"].get<std::string>(), false);
    }
    return absl::UnimplementedError(absl::StrCat("pre_tokenizer.type '", type, "' is not supported"));
  }

  absl::Status LoadDecoder(const Json& d) {
    const std::string type = TypeOf(d);
    if (type == "ByteLevel") {
      byte_level_seen_ = true;
    } else if (type == "Replace" && d.at("pattern").contains("String")) {
      decoder_replacements_.emplace_back(d["pattern"]["String"].get<std::string>(), d.at("content").get<std::string>());
    } else if (type == "Metaspace") {
      decoder_replacements_.emplace_back(d.value("replacement", std::string("\u2581")), " ");
      if (MetaspacePrepend(d) != Stage::Prepend::kNever) t_->decoder_strip_spaces_ = 1;
    } else if (type == "ByteFallback") {
      decoder_byte_fallback_ = true;
    } else if (type == "Strip" && d.value("content", std::string(" ")) == " " && IntOrAbsent(d, "start") &&
               IntOrAbsent(d, "stop") && d.value("stop", 0) == 0) {
      t_->decoder_strip_spaces_ = d.value("start", 0);
    } else if (type != "Fuse") {
      return absl::UnimplementedError(absl::StrCat(
          "decoder.type '", type, "' (supported: ByteLevel, Replace with a String pattern, ByteFallback, Fuse, "
          "Strip of leading spaces, Sequence)"));
    }
    return absl::OkStatus();
  }

  absl::Status LoadPostProcessor(const Json& p, bool* templated) {
    const std::string type = TypeOf(p);
    if (type == "ByteLevel") return absl::OkStatus();  // Offsets only.
    if (type != "TemplateProcessing") {
      return absl::UnimplementedError(absl::StrCat("post_processor.type '", type, "' is not supported"));
    }
    *templated = true;
    const Json& specials = p.value("special_tokens", Json::object());
    bool seen_sequence = false;
    for (const Json& item : p.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor: special token '", name, "' missing from special_tokens"));
      }
      for (const Json& id : specials[name].at("ids")) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
          return absl::InvalidArgumentError(absl::StrCat("post_processor: special token '", name, "' has id ",
                                                         id.dump(), " (not a token id)"));
        }
        (seen_sequence ? t_->suffix_ids_ : t_->prefix_ids_).push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status LoadConfigs(const Json& config, const Json& generation, bool templated) {
    if (config.is_object()) {
      const std::string bos = TokenContent(config, "bos_token");
      if (!bos.empty()) t_->bos_id_ = t_->TokenToId(bos);
      const std::string eos = TokenContent(config, "eos_token");
      if (!eos.empty()) {
        if (auto id = t_->TokenToId(eos)) t_->eos_ids_.push_back(*id);
      }
      // Without a template, add_bos_token / add_eos_token say what
      // add_special_tokens adds (the transformers slow-tokenizer convention).
      if (!templated) {
        if (BoolField(config, "add_bos_token") && t_->bos_id_) t_->prefix_ids_.push_back(*t_->bos_id_);
        if (BoolField(config, "add_eos_token") && !t_->eos_ids_.empty()) {
          t_->suffix_ids_.push_back(t_->eos_ids_.front());
        }
      }
    }
    if (generation.is_object() && generation.contains("eos_token_id")) {
      Json ids = generation["eos_token_id"];
      if (!ids.is_array()) ids = Json::array({ids});
      for (const Json& id : ids) {
        if (!id.is_number_integer()) continue;
        const int32_t value = id.get<int32_t>();
        if (std::find(t_->eos_ids_.begin(), t_->eos_ids_.end(), value) == t_->eos_ids_.end()) {
          t_->eos_ids_.push_back(value);
        }
      }
    }
    for (const auto* ids : {&t_->prefix_ids_, &t_->suffix_ids_}) {
      for (int32_t id : *ids) {
        if (!t_->ValidateIds({id}).ok()) {  // Encode emits them: Decode must take them
          return absl::InvalidArgumentError(absl::StrCat("post_processor id ", id, " outside the vocabulary"));
        }
      }
    }
    return absl::OkStatus();
  }

  Tokenizer* t_;
  bool byte_level_seen_ = false;
  bool decoder_byte_fallback_ = false;
  std::vector<std::pair<std::string, std::string>> decoder_replacements_;
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::filesystem::path json_path(path);
  std::error_code ec;
  if (std::filesystem::is_directory(json_path, ec)) json_path /= "tokenizer.json";
  if (!std::filesystem::exists(json_path, ec)) {
    return absl::NotFoundError(absl::StrCat("tokenizer file not found: ", json_path.string()));
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer);
  Loader loader(tokenizer.get());
  FLOE_RETURN_IF_ERROR(loader.Load(json_path, json_path.parent_path()));
  return tokenizer;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text, bool add_special_tokens) const {
  const size_t invalid = utf8::FindInvalid(text);
  if (invalid != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8: bad byte 0x",
                                                   absl::Hex(static_cast<uint8_t>(text[invalid])),
                                                   " at byte offset ", invalid));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 4);
  if (add_special_tokens) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  EncodeState state;
  state.out = &out;
  state.prefixed.resize(stages_.size());
  std::vector<AddedTokenMatcher::Match> matches;
  added_matcher_->FindAll(text, &matches);
  size_t pos = 0;
  for (const auto& m : matches) {
    FLOE_RETURN_IF_ERROR(EncodeSegment(text.substr(pos, m.begin - pos), &state));
    out.push_back(m.id);
    state.at_text_start = false;
    pos = m.end;
  }
  FLOE_RETURN_IF_ERROR(EncodeSegment(text.substr(pos), &state));
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

absl::Status Tokenizer::EncodeSegment(absl::string_view text, EncodeState* state) const {
  if (text.empty()) return absl::OkStatus();
  int buffer = 0;  // Each step writes the buffer that `text` does not point into.
  for (const NormalizerStep& step : normalizers_) {
    std::string& out = state->normalized[buffer];
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        text = nfc_->Normalize(text, &out);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (text.empty()) continue;
        out.assign(step.to).append(text.data(), text.size());
        text = out;
        break;
      case NormalizerStep::Kind::kReplace:
        if (step.from.empty() || text.find(step.from) == absl::string_view::npos) continue;
        out = absl::StrReplaceAll(text, {{step.from, step.to}});
        text = out;
        break;
    }
    buffer ^= 1;
  }
  return EncodeStage(0, text, state);
}

absl::Status Tokenizer::EncodeStage(size_t stage, absl::string_view text, EncodeState* state) const {
  if (stage == stages_.size()) {
    bpe_->Encode(text, &state->scratch, state->out);
    return absl::OkStatus();
  }
  const Stage& s = stages_[stage];
  if (!s.metaspace.empty()) return EncodeMetaspace(stage, text, state);
  if (s.add_prefix_space && (text.empty() || text[0] != ' ')) {
    std::string& storage = state->prefixed[stage];
    storage.assign(" ").append(text.data(), text.size());
    text = storage;
  }
  if (s.splitter == nullptr) return EncodeStage(stage + 1, text, state);
  absl::Status status;
  FLOE_RETURN_IF_ERROR(s.splitter->Split(text, [&](absl::string_view piece) {
    if (status.ok()) status = EncodeStage(stage + 1, piece, state);
  }));
  return status;
}

// Hugging Face's Metaspace pre-tokenizer: spaces become the replacement
// character, which is also prepended (always, or only at the start of the
// text), then pieces split before each replacement character.
absl::Status Tokenizer::EncodeMetaspace(size_t stage, absl::string_view text, EncodeState* state) const {
  const Stage& s = stages_[stage];
  std::string& storage = state->prefixed[stage];
  storage = absl::StrReplaceAll(text, {{" ", s.metaspace}});
  const bool prepend = s.prepend == Stage::Prepend::kAlways ||
                       (s.prepend == Stage::Prepend::kFirst && state->at_text_start);
  state->at_text_start = false;
  if (prepend && !absl::StartsWith(storage, s.metaspace)) storage.insert(0, s.metaspace);
  const absl::string_view replaced = storage;
  if (!s.metaspace_split) return EncodeStage(stage + 1, replaced, state);
  size_t begin = 0;
  while (begin < replaced.size()) {
    // A piece runs to the next replacement character after its first character
    // (searching from begin + 1 never matches inside a character: valid UTF-8).
    size_t end = replaced.find(s.metaspace, begin + 1);
    if (end == absl::string_view::npos) end = replaced.size();
    FLOE_RETURN_IF_ERROR(EncodeStage(stage + 1, replaced.substr(begin, end - begin), state));
    begin = end;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  FLOE_RETURN_IF_ERROR(ValidateIds(ids));
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && (token_flags_[id] & kSpecial)) continue;
    bytes.append(token_bytes_[id]);
  }
  std::string out;
  if (utf8::FindInvalid(bytes) == bytes.size()) {
    out = std::move(bytes);
  } else {
    utf8::AppendLossy(bytes, &out);
  }
  size_t strip = 0;
  while (strip < out.size() && strip < static_cast<size_t>(decoder_strip_spaces_) && out[strip] == ' ') ++strip;
  out.erase(0, strip);
  return out;
}

absl::Status Tokenizer::ValidateIds(absl::Span<const int32_t> ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !(token_flags_[id] & kPresent)) {
      return absl::OutOfRangeError(
          absl::StrCat("token id ", id, " is not in the vocabulary (vocab size ", vocab_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (token_flags_[id] & kSpecial);
}

std::optional<int32_t> Tokenizer::TokenToId(absl::string_view token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  std::string bytes;
  if (byte_level_vocab_ && byte_level::CharsToBytes(token, &bytes)) return bpe_->Find(bytes);
  return bpe_->Find(token);
}

}  // namespace floe
