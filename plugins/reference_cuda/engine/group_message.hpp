// What rank 0 of an engine group (engine/engine_group.hpp) tells the other ranks, one message per
// step or load: which sequence states to copy or drop (the prefix cache copies states, finished
// requests and evicted sessions drop them), then the step's segments (each a state and the tokens
// that continue it), the weight version to load, or the end. Every rank keeps a copy of each
// sequence state rank 0 has (its own heads and experts' part), under rank 0's id for it.
#pragma once

#include <cstdint>
#include <vector>

namespace mlpt::ref {

// `id` becomes a copy of state `source`, or is dropped when `source` is 0. Ids start at 1; a state
// first named by a step is fresh (no tokens consumed).
struct StateOp {
  uint64_t id = 0, source = 0;
};

struct GroupMessage {
  enum class Kind : uint32_t { step = 1, load = 2, stop = 3 };
  Kind kind = Kind::step;
  std::vector<StateOp> ops;  // applied first, in order
  // step: segment s continues state states[s] with tokens [offsets[s], offsets[s + 1])
  std::vector<uint64_t> states;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  uint64_t version = 0;  // load: the version rank 0 was given
};

std::vector<char> encode(const GroupMessage& message);
// Throws MLPT_INTERNAL naming what is malformed (the ranks run one build: it never is).
GroupMessage decode(const std::vector<char>& bytes);

}  // namespace mlpt::ref
