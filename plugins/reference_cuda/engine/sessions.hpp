// Multi-turn sessions: per session_id the generation state (KV, GDN state, conv window) and the
// tokens it has consumed, so the next turn prefills only its new suffix. Idle sessions are kept
// under a byte budget and evicted least-recently-used first; an evicted session is not an error,
// its next turn simply re-prefills (the GDN state cannot be rebuilt any other way, §4). A session
// larger than the whole budget is not kept at all. Weight updates drop every session (their
// caches were computed with the old weights). Not thread-safe: the engine's lock guards it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"

namespace mlpt::ref {

struct Session {
  explicit Session(std::unique_ptr<SequenceState> s) : state(std::move(s)) {}
  Session(const Session& o) : state(o.state->clone()), tokens(o.tokens), routing(o.routing) {}
  Session& operator=(const Session&) = delete;
  std::unique_ptr<SequenceState> state;  // the backend's (engine/backend.hpp)
  std::vector<int32_t> tokens;           // consumed by `state`, in order
  std::vector<int16_t> routing;          // [tokens][layers][k] when recorded, else empty
  size_t bytes() const { return state->bytes() + tokens.capacity() * 4 + routing.capacity() * 2; }
};

class SessionStore {
 public:
  explicit SessionStore(size_t budget_bytes) : budget_(budget_bytes) {}

  // Removes and returns the idle session `id` (NULL when unknown or evicted).
  std::unique_ptr<Session> take(uint64_t id);
  // Keeps `session` as `id`, evicting least-recently-used idle sessions beyond the budget.
  void put(uint64_t id, std::unique_ptr<Session> session);
  void erase(uint64_t id);
  void clear();

  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::unique_ptr<Session> session;
    size_t bytes;
    std::list<uint64_t>::iterator lru;
  };
  size_t budget_, bytes_ = 0;
  uint64_t evictions_ = 0;
  std::list<uint64_t> lru_;  // front = most recently used
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace mlpt::ref
