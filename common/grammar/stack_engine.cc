#include "common/grammar/stack_engine.h"

#include <algorithm>

namespace floe::grammar {
namespace {

uint64_t Key(uint32_t pos, uint32_t parent) { return (uint64_t{pos} << 32) | parent; }

}  // namespace

uint32_t NodeArena::Intern(uint32_t pos, uint32_t parent) {
  const auto [it, inserted] = index_.try_emplace(Key(pos, parent), static_cast<uint32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Node{pos, parent});
  return it->second;
}

void NodeArena::Clear() {
  nodes_.clear();
  index_.clear();
  // Sentinels: their fields are never read as positions.
  nodes_.push_back(Node{UINT32_MAX, UINT32_MAX});  // kRootNode
  nodes_.push_back(Node{UINT32_MAX, UINT32_MAX});  // kUnknownNode
}

size_t NodeArena::MemoryBytes() const {
  return nodes_.capacity() * sizeof(Node) + index_.capacity() * (sizeof(uint64_t) + sizeof(uint32_t) + 1);
}

void StackStepper::StartRule(NodeArena& arena, uint32_t rule, Frontier* out) {
  out->Clear();
  visited_.clear();
  for (uint32_t start : program_->alt_starts(rule)) Expand(arena, start, kRootNode, out);
  Finish(out);
}

void StackStepper::Step(NodeArena& arena, absl::Span<const uint32_t> tops, uint8_t byte, Frontier* out) {
  out->Clear();
  visited_.clear();
  for (uint32_t top : tops) {
    const uint32_t pos = arena.pos(top);
    if (program_->bytes_at(pos).Has(byte)) Expand(arena, pos + 1, arena.parent(top), out);
  }
  Finish(out);
}

ByteSet StackStepper::NextBytes(const NodeArena& arena, absl::Span<const uint32_t> tops) const {
  ByteSet next;
  for (uint32_t top : tops) next.AddAll(program_->bytes_at(arena.pos(top)));
  return next;
}

void StackStepper::Expand(NodeArena& arena, uint32_t pos, uint32_t parent, Frontier* out) {
  // Terminates because no rule is left-recursive: a chain of references
  // that consumes nothing cannot come back to a rule it is inside of, and
  // pops only walk down existing frames. `visited_` keeps shared nullable
  // paths from being expanded twice.
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    auto [p, frame] = work_.back();
    work_.pop_back();
    if (!visited_.insert(Key(p, frame)).second) continue;
    const Program::Instr& in = program_->at(p);
    switch (in.op) {
      case Program::Op::kBytes:
        out->tops.push_back(arena.Intern(p, frame));
        break;
      case Program::Op::kEnd:
        if (frame == kRootNode) {
          out->reached_root = true;
        } else if (frame == kUnknownNode) {
          out->reached_unknown = true;
        } else {
          work_.emplace_back(arena.pos(frame), arena.parent(frame));
        }
        break;
      case Program::Op::kRef: {
        const uint32_t ret = program_->at(p + 1).op == Program::Op::kEnd ? frame : arena.Intern(p + 1, frame);
        for (uint32_t start : program_->alt_starts(in.arg)) work_.emplace_back(start, ret);
        break;
      }
    }
  }
}

void StackStepper::Finish(Frontier* out) {
  std::sort(out->tops.begin(), out->tops.end());
  out->tops.erase(std::unique(out->tops.begin(), out->tops.end()), out->tops.end());
}

}  // namespace floe::grammar
