#include "common/tokenizer/added_token_matcher.h"

#include <algorithm>

namespace floe {
namespace {

bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Word characters for `single_word`: ASCII alphanumerics, '_' and any non-ASCII
// byte (letters of other scripts).
bool IsWordByte(char c) {
  const auto u = static_cast<uint8_t>(c);
  return u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<Token>& tokens) {
  root_.fill(-1);
  for (const Token& token : tokens) {
    if (token.content.empty()) continue;
    const int32_t index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(token);
    auto first = static_cast<uint8_t>(token.content[0]);
    if (root_[first] < 0) {
      root_[first] = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    int32_t node = root_[first];
    for (size_t i = 1; i < token.content.size(); ++i) {
      const auto byte = static_cast<uint8_t>(token.content[i]);
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, -1)),
                        {byte, child});
        nodes_.emplace_back();
      }
      node = child;
    }
    nodes_[node].token = index;  // A later duplicate wins, like a map insert.
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, -1));
  return it != children.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::FindAll(absl::string_view text, std::vector<Match>* out) const {
  out->clear();
  if (tokens_.empty()) return;
  const size_t n = text.size();
  size_t previous_end = 0;
  for (size_t i = 0; i < n;) {
    int32_t node = root_[static_cast<uint8_t>(text[i])];
    if (node < 0) {
      ++i;
      continue;
    }
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i + 1;; ++j) {
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = j;
      }
      if (j >= n) break;
      node = Child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const Token& token = tokens_[best];
    if (token.single_word && ((i > 0 && IsWordByte(text[i - 1])) ||
                              (best_end < n && IsWordByte(text[best_end])))) {
      ++i;
      continue;
    }
    size_t begin = i, end = best_end;
    if (token.lstrip) {
      while (begin > previous_end && IsAsciiSpace(text[begin - 1])) --begin;
    }
    if (token.rstrip) {
      while (end < n && IsAsciiSpace(text[end])) ++end;
    }
    out->push_back({begin, end, token.id});
    previous_end = i = end;
  }
}

}  // namespace floe
