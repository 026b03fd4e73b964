// Drafts under a grammar (grammar_drafts.h): a chain is cut at its first
// forbidden token, a tree loses exactly the nodes whose root path is
// forbidden (in any topological order), the bytes the grammar forces are
// drafted by greedy longest match (alone or after a chain), and the
// request's matcher is left exactly as it was.
#include "services/worker/engine/grammar_drafts.h"

#include "common/grammar/matcher.h"
#include "common/grammar/regex_compiler.h"
#include "gtest/gtest.h"

namespace floe {
namespace {

// Every byte is a token (its own value as id); longer tokens from 256 on.
const std::vector<std::string> kLonger = {"{\"", "name", "\":", " \"", "{\"name", "\": \"", "ab", "abc"};

int32_t Id(const std::string& token) {
  if (token.size() == 1) return static_cast<uint8_t>(token[0]);
  return 256 + static_cast<int32_t>(std::find(kLonger.begin(), kLonger.end(), token) - kLonger.begin());
}

std::shared_ptr<const grammar::TokenVocab> Vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.insert(tokens.end(), kLonger.begin(), kLonger.end());
  auto vocab = grammar::TokenVocab::FromTokens(std::move(tokens));
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return *vocab;
}

Sequence Constrained(const std::string& regex) {
  auto g = grammar::CompileRegex(regex);
  EXPECT_TRUE(g.ok()) << g.status();
  auto compiled = grammar::CompiledGrammar::Create(*g, Vocab());
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  Sequence seq;
  seq.matcher = std::make_unique<grammar::GrammarMatcher>(*compiled);
  return seq;
}

std::vector<int32_t> Ids(std::initializer_list<const char*> tokens) {
  std::vector<int32_t> out;
  for (const char* t : tokens) out.push_back(Id(t));
  return out;
}

// What a matcher looks like from outside: its mask, ends, forced bytes.
struct MatcherView {
  std::vector<uint32_t> mask;
  bool can_end;
  std::string forced;
  int rollback;
  bool operator==(const MatcherView&) const = default;
};
MatcherView View(grammar::GrammarMatcher& m) {
  MatcherView v{std::vector<uint32_t>(m.grammar().vocab()->mask_words()), m.CanEnd(), m.ForcedBytes(64),
                m.rollback_available()};
  m.FillNextTokenMask(v.mask.data());
  return v;
}

TEST(GrammarDraftsTest, GreedyTokensTakeTheLongestMatchEachTime) {
  auto vocab = Vocab();
  EXPECT_EQ(GreedyTokens(*vocab, "abcab", 10), Ids({"abc", "ab"}));
  EXPECT_EQ(GreedyTokens(*vocab, "{\"name\": \"", 10), Ids({"{\"name", "\": \""}));
  EXPECT_EQ(GreedyTokens(*vocab, "abcab", 1), Ids({"abc"}));
  EXPECT_EQ(GreedyTokens(*vocab, "", 10), std::vector<int32_t>{});
  // A byte no token starts with ends the run (here: none does in a vocab
  // without single bytes).
  auto words = grammar::TokenVocab::FromTokens({"ab", "c"});
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(GreedyTokens(**words, "abcxab", 10), (std::vector<int32_t>{0, 1}));
}

TEST(GrammarDraftsTest, AChainIsCutAtItsFirstForbiddenTokenAndTheMatcherIsUntouched) {
  Sequence seq = Constrained("ab[cd]+e");
  ASSERT_TRUE(seq.matcher->AcceptToken(Id("a")));  // the output so far
  const MatcherView before = View(*seq.matcher);
  seq.draft = Ids({"b", "c", "x", "d"});
  seq.draft_source = 0;
  const GrammarDraftResult r = ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"b", "c"}));
  EXPECT_EQ(seq.draft_proposed, 2);
  EXPECT_EQ(seq.draft_source, 0);
  EXPECT_EQ(r.cut, 2);
  EXPECT_EQ(r.forced, 0);  // [cd] or e: nothing forced after "abc"
  EXPECT_EQ(View(*seq.matcher), before);
}

TEST(GrammarDraftsTest, TreesLoseExactlyTheNodesWhoseRootPathIsForbidden) {
  Sequence seq = Constrained("ab[cd]");
  const MatcherView before = View(*seq.matcher);
  // Not in depth-first order: node 2 (under 0) comes after node 1 (a root
  // child the grammar forbids, so its child 3 goes too).
  seq.draft = Ids({"a", "x", "b", "y", "z", "c", "d"});
  seq.draft_parents = {-1, -1, 0, 1, 2, 2, 2};
  const GrammarDraftResult r = ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"a", "b", "c", "d"}));
  EXPECT_EQ(seq.draft_parents, (std::vector<int32_t>{-1, 0, 1, 1}));
  EXPECT_EQ(seq.draft_proposed, 4);
  EXPECT_EQ(r.cut, 3);
  EXPECT_EQ(View(*seq.matcher), before);

  // What survives as a chain is verified, and extended, as a chain.
  seq.draft = Ids({"a", "x", "b"});
  seq.draft_parents = {-1, -1, 0};
  ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"a", "b"}));
  EXPECT_TRUE(seq.draft_parents.empty());
  EXPECT_EQ(View(*seq.matcher), before);
}

TEST(GrammarDraftsTest, ForcedBytesAreDraftedAloneOrAfterAChain) {
  Sequence seq = Constrained("\\{\"name\": \"[a-z]+\"\\}");
  const MatcherView before = View(*seq.matcher);
  // No proposer draft: the forced bytes alone, by greedy longest match.
  GrammarDraftResult r = ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"{\"name", "\": \""}));
  EXPECT_EQ(seq.draft_proposed, 0);
  EXPECT_EQ(r.forced, 2);
  EXPECT_EQ(View(*seq.matcher), before);
  // After a proposer's chain: the bytes forced where it ends.
  seq.draft = Ids({"{\""});
  seq.draft_source = 1;
  r = ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"{\"", "name", "\": \""}));
  EXPECT_EQ(seq.draft_proposed, 1);
  EXPECT_EQ(r.forced, 2);
  EXPECT_EQ(View(*seq.matcher), before);
  // Never past the sequence's cap.
  seq.draft = Ids({"{\""});
  ConstrainDraft(seq, 2);
  EXPECT_EQ(seq.draft, Ids({"{\"", "name"}));
  // A proposer draft already past the forced bytes stays as it is.
  seq.draft = Ids({"{\"name", "\": \"", "a", "b"});
  r = ConstrainDraft(seq, 8);
  EXPECT_EQ(seq.draft, Ids({"{\"name", "\": \"", "a", "b"}));
  EXPECT_EQ(r.forced, 0);
  EXPECT_EQ(View(*seq.matcher), before);
}

}  // namespace
}  // namespace floe
