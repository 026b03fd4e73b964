// Hugging Face `tokenizer.json` tokenizer: byte-level BPE (GPT-2 alphabet) with
// the Split(Regex) + ByteLevel pre-tokenizers of Llama 3 and Qwen2/Qwen3, NFC
// normalization, added tokens, TemplateProcessing and the ByteLevel decoder;
// also SentencePiece-style BPE as in the Llama 2 / Mistral files (Prepend +
// Replace normalizers or the Metaspace pre-tokenizer, byte_fallback, the
// Replace/ByteFallback/Fuse/Strip or Metaspace decoders).
// Ids match the Hugging Face `tokenizers` library (checked by the conformance test).
// Known gaps: added tokens are matched on the raw text whatever their
// `normalized` flag (all such tokens in the Llama 3.1 / Qwen3 files are
// unnormalized), lstrip/rstrip strip ASCII whitespace only, and decoding
// replaces invalid UTF-8 per maximal subpart (HF's ByteFallback does it per byte).
//
// Thread safety: immutable after Load apart from an internally synchronized
// cache of encoded pieces; every method may be called from any number of
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace floe {

class AddedTokenMatcher;
class BpeModel;
class NfcNormalizer;
class RegexSplitter;

class Tokenizer {
 public:
  // Accepts a tokenizer.json path, or a folder containing tokenizer.json (and
  // optionally tokenizer_config.json and generation_config.json).
  // NOT_FOUND for a missing file, INVALID_ARGUMENT for malformed JSON or fields,
  // UNIMPLEMENTED for models/normalizers/pre-tokenizers/decoders not supported.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // INVALID_ARGUMENT on invalid UTF-8 (the message gives the byte offset).
  // Added tokens in `text` are always recognized; `add_special_tokens` applies
  // the post-processor template (e.g. Llama 3's leading <|begin_of_text|>).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, bool add_special_tokens) const;

  // Ids outside the vocabulary -> OUT_OF_RANGE naming the id and vocab size.
  // Byte sequences that are not valid UTF-8 come out as U+FFFD (one per maximal
  // invalid subpart), and a Strip decoder removes its leading spaces.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // OK when every id is in the vocabulary, else OUT_OF_RANGE naming the first
  // bad id and the vocab size (what Decode returns for it).
  absl::Status ValidateIds(absl::Span<const int32_t> ids) const;

  // Raw bytes a token stands for (after byte-level decoding); added tokens give
  // their content. Empty for ids outside the vocabulary.
  absl::string_view TokenBytes(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  // tokenizer_config.json eos_token, then generation_config.json eos_token_id(s).
  std::vector<int32_t> eos_ids() const { return eos_ids_; }
  bool IsSpecial(int32_t id) const;
  // `token` as spelled in the vocabulary ("Ġthe") or an added token's content.
  std::optional<int32_t> TokenToId(absl::string_view token) const;
  // Leading spaces the decoder strips from a whole decoded text (1 for the
  // SentencePiece "▁" prefix, else 0); streaming decoders apply it at stream start.
  int32_t decoder_strip_spaces() const { return decoder_strip_spaces_; }

  ~Tokenizer();

 private:
  Tokenizer();
  class Loader;
  struct EncodeState;
  // One pre-tokenizer step: ByteLevel / Split (optionally prefix a space, then
  // optionally split by regex) or Metaspace (when `metaspace` is set).
  struct Stage {
    bool add_prefix_space = false;
    std::unique_ptr<RegexSplitter> splitter;
    std::string metaspace;  // Replacement for ' ' ("▁").
    enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
    bool metaspace_split = false;  // Split before each replacement character.
  };
  // Normalizes, pre-tokenizes and BPE-encodes text that holds no added token.
  absl::Status EncodeSegment(absl::string_view text, EncodeState* state) const;
  absl::Status EncodeStage(size_t stage, absl::string_view text, EncodeState* state) const;
  absl::Status EncodeMetaspace(size_t stage, absl::string_view text, EncodeState* state) const;

  std::vector<std::string> token_bytes_;  // By id.
  std::vector<uint8_t> token_flags_;      // By id: kPresent | kSpecial | kAdded.
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<AddedTokenMatcher> added_matcher_;
  // Normalizers, applied in order to text between added tokens.
  struct NormalizerStep {
    enum class Kind { kNfc, kPrepend, kReplace } kind;
    std::string from;  // kReplace: the literal pattern.
    std::string to;    // kPrepend / kReplace: the inserted text.
  };
  std::vector<NormalizerStep> normalizers_;
  std::unique_ptr<NfcNormalizer> nfc_;
  bool byte_level_vocab_ = true;  // Vocabulary strings use the GPT-2 byte alphabet.
  int32_t decoder_strip_spaces_ = 0;
  std::vector<Stage> stages_;  // Applied in sequence, each to every piece of the previous one.
  std::vector<int32_t> prefix_ids_;  // Added when add_special_tokens.
  std::vector<int32_t> suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
};

}  // namespace floe
