// Plans of dense products kept per shape: a library's algorithm choice (cuBLASLt's heuristic) costs
// far more than the product it picks for, so a backend asks once per shape and reuses the answer.
// The cache holds at most `capacity` shapes and forgets the least recently used one (a trainer's
// micro-batches give new row counts; the model's few weight shapes stay). Host logic only, tested
// on any machine; backends/cuda/gemm.cpp keeps cuBLASLt plans in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>

namespace mlpt::ref {

// One product as the library is asked for it (column-major; a row-major product is mapped onto it
// by the caller): transposes, sizes, leading dimensions, output type, whether C is accumulated
// into, and the alignment (bytes) every pointer shares, which restricts the algorithms allowed.
struct GemmShapeKey {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  bool fp32_out = false, accumulate = false;
  int alignment = 0;
  bool operator==(const GemmShapeKey&) const = default;
};

struct GemmShapeKeyHash {
  size_t operator()(const GemmShapeKey& s) const {
    size_t h = std::hash<int64_t>{}(s.m);
    for (int64_t v : {s.n, s.k, s.lda, s.ldb, s.ldc, int64_t(s.alignment)})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h * 31u +
           (size_t(s.trans_a) | size_t(s.trans_b) << 1 | size_t(s.fp32_out) << 2 | size_t(s.accumulate) << 3);
  }
};

// The largest power of two (at most 256) dividing every address: the alignment a product's
// operands share.
inline int common_alignment(std::initializer_list<const void*> ptrs) {
  int a = 256;
  for (const void* p : ptrs)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % uintptr_t(a) != 0) a /= 2;
  return a;
}

// Keyed by GemmShapeKey unless told otherwise (fused attention keys its plans by SdpaShapeKey).
template <class Plan, class Key = GemmShapeKey, class KeyHash = GemmShapeKeyHash>
class GemmPlanCache {
 public:
  explicit GemmPlanCache(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // The plan for `key`, made by make() (which may throw: nothing is then kept) when absent.
  template <class Make>
  Plan& get(const Key& key, Make&& make) {
    if (auto it = index_.find(key); it != index_.end()) {
      ++hits_;
      order_.splice(order_.begin(), order_, it->second);  // most recently used first
      return it->second->second;
    }
    ++misses_;
    Plan plan = make();
    if (order_.size() == capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(plan));
    index_.emplace(key, order_.begin());
    return order_.front().second;
  }
  bool contains(const Key& key) const { return index_.count(key) != 0; }
  size_t size() const { return order_.size(); }
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }

 private:
  using Entry = std::pair<Key, Plan>;
  size_t capacity_;
  std::list<Entry> order_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, KeyHash> index_;
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace mlpt::ref
