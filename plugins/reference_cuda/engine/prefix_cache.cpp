#include "engine/prefix_cache.hpp"

#include <algorithm>

namespace mlpt::ref {

std::unique_ptr<Session> PrefixCache::lookup(const std::vector<int32_t>& tokens, uint64_t version,
                                             size_t routing_per_token) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const std::vector<int32_t>& key = it->state.tokens;
    if (it->version != version || key.size() >= tokens.size()) continue;
    if (best != entries_.end() && key.size() <= best->state.tokens.size()) continue;
    if (routing_per_token && it->state.routing.size() != key.size() * routing_per_token) continue;
    if (std::equal(key.begin(), key.end(), tokens.begin())) best = it;
  }
  if (best == entries_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, best);
  return std::make_unique<Session>(best->state);
}

void PrefixCache::put(const Session& state, uint64_t version) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->version == version && it->state.tokens == state.tokens) {
      entries_.splice(entries_.begin(), entries_, it);
      return;
    }
  const size_t b = state.bytes();
  if (b > budget_) return;
  while (bytes_ + b > budget_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
  entries_.push_front(Entry{state, version, b});
  bytes_ += b;
}

void PrefixCache::clear() {
  entries_.clear();
  bytes_ = 0;
}

}  // namespace mlpt::ref
