// Prompt prefixes across requests and episodes. The members of a GRPO group share their whole
// first prompt (mostly the OpenHands system prompt), and a later request may start with an earlier
// one's prompt, so the engine keeps, per prompt, a copy of its sequence state (GDN state, conv
// window, keys and values; §4: the GDN state exists only at such saved points) taken after all
// the prompt's tokens but the last; a request whose tokens begin with such a prefix copies it and
// prefills only the rest.
//
// Every entry is tagged with the weight version that computed it and only a lookup at that version
// finds it; the engine also clears the cache at every weight load, so a prefix computed with older
// weights can never be used. Entries are kept under a byte budget, least recently used evicted
// first. Not thread-safe: the engine's lock guards it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "engine/sessions.hpp"

namespace mlpt::ref {

class PrefixCache {
 public:
  explicit PrefixCache(size_t budget_bytes) : budget_(budget_bytes) {}

  // A copy of the longest entry computed at `version` whose tokens are a proper prefix of `tokens`
  // (at least one token is left to feed), with routing for every position when `routing_per_token`
  // (layers × k) is not 0; NULL when there is none.
  std::unique_ptr<Session> lookup(const std::vector<int32_t>& tokens, uint64_t version, size_t routing_per_token);
  // Keeps a copy of `state` (its tokens are the key) as computed at `version`.
  void put(const Session& state, uint64_t version);
  void clear();

  bool enabled() const { return budget_ > 0; }
  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Session state;
    uint64_t version;
    size_t bytes;
  };
  size_t budget_, bytes_ = 0;
  std::list<Entry> entries_;  // front = most recently used
};

}  // namespace mlpt::ref
