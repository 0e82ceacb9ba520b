#include "engine/sessions.hpp"

namespace mlpt::ref {

std::unique_ptr<Session> SessionStore::take(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  std::unique_ptr<Session> s = std::move(it->second.session);
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  return s;
}

void SessionStore::put(uint64_t id, std::unique_ptr<Session> session) {
  erase(id);
  size_t b = session->bytes();
  if (b > budget_) {
    ++evictions_;
    return;
  }
  while (bytes_ + b > budget_ && !lru_.empty()) {
    erase(lru_.back());
    ++evictions_;
  }
  lru_.push_front(id);
  entries_[id] = Entry{std::move(session), b, lru_.begin()};
  bytes_ += b;
}

void SessionStore::erase(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void SessionStore::clear() {
  entries_.clear();
  lru_.clear();
  bytes_ = 0;
}

}  // namespace mlpt::ref
