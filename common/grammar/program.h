// Program: a Grammar flattened for the matcher, plus the static facts the
// token-mask precompute needs (where each rule returns to, what may follow).
//
// Every alternative of every rule is laid out as its elements followed by an
// kEnd instruction, so a grammar position (rule, alternative, element) is one
// uint32 index. Building also prunes: a byte-set element with no bytes, and
// any alternative that can never derive a finite string, is dropped (with
// rules left without alternatives), so every stack the matcher holds can
// still be completed. That is what lets an accepted byte never lead into a
// dead end and what makes "a token that ends exactly where a rule returns"
// context-independently acceptable. Then short rules referenced from
// several places get a private copy per reference (rule_cloning.h), so rule
// ids past the grammar's are copies (rule_name() gives the original's name).
//
// Immutable after Build; shared const between threads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace floe::grammar {

class Program {
 public:
  enum class Op : uint8_t { kBytes, kRef, kEnd };
  struct Instr {
    Op op;
    uint32_t arg;  // kBytes: byte set id; kRef: the called rule; kEnd: the rule it ends
  };
  // Where a rule returns to, over every way it can be entered: only below the
  // root (the input may end there), always the same position, or several.
  static constexpr uint32_t kReturnsToRoot = UINT32_MAX;
  static constexpr uint32_t kReturnsToMany = UINT32_MAX - 1;
  static constexpr uint32_t kUnreached = UINT32_MAX - 2;

  // FailedPrecondition from grammar.CheckIntegrity(); InvalidArgument when
  // the grammar matches no string at all (its root cannot be completed).
  static absl::StatusOr<Program> Build(const Grammar& grammar);

  const Instr& at(uint32_t pos) const { return code_[pos]; }
  size_t size() const { return code_.size(); }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return alt_starts_.size(); }
  const std::vector<uint32_t>& alt_starts(uint32_t rule) const { return alt_starts_[rule]; }
  const ByteSet& byte_set(uint32_t id) const { return byte_sets_[id]; }
  // The byte set of a kBytes position.
  const ByteSet& bytes_at(uint32_t pos) const { return byte_sets_[code_[pos].arg]; }
  uint32_t rule_of(uint32_t pos) const { return rule_of_[pos]; }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

  // The frame the matcher pushes when `rule` is entered: the position after
  // the reference, or (a tail call, the reference ends its alternative) the
  // caller's own return. kReturnsToRoot, a position, kReturnsToMany, or
  // kUnreached for rules the root never enters.
  uint32_t return_of(uint32_t rule) const { return return_of_[rule]; }
  // Bytes that can come right after `rule` returns, in any context (the
  // classic FOLLOW set; the end of input is not a byte and is left out).
  const ByteSet& follow(uint32_t rule) const { return follow_[rule]; }
  // Positions holding a byte set that the root can reach (candidate stack tops).
  const std::vector<uint32_t>& byte_positions() const { return byte_positions_; }
  size_t MemoryBytes() const;

 private:
  void ComputeReturns();
  void ComputeFollow(const std::vector<bool>& nullable, const std::vector<ByteSet>& first);

  std::vector<Instr> code_;
  std::vector<uint32_t> rule_of_;
  std::vector<std::vector<uint32_t>> alt_starts_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::string> names_;
  std::vector<uint32_t> return_of_;
  std::vector<ByteSet> follow_;
  std::vector<uint32_t> byte_positions_;
  uint32_t root_ = 0;
};

}  // namespace floe::grammar
