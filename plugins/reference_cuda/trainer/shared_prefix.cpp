#include "trainer/shared_prefix.hpp"

#include <algorithm>
#include <map>

#include "trainer/trainer_common.hpp"

namespace mlpt::ref {

namespace {

int64_t length(const mlpt_train_batch& b, size_t i) { return b.offsets[i + 1] - b.offsets[i]; }

// How many leading tokens of sequence i may be shared: rows t < limit are never scored (row t is
// scored when token t + 1 is), so limit is one less than the first scored token.
int64_t unscored_rows(const mlpt_train_batch& b, size_t i) {
  const int64_t n = length(b, i);
  if (!b.loss_mask) return 0;
  for (int64_t t = 1; t < n; ++t)
    if (b.loss_mask[b.offsets[i] + t]) return t - 1;
  return n;
}

// The common leading tokens of sequences a and b (and their replayed experts), at most `limit`.
int64_t common_prefix(const mlpt_train_batch& b, size_t a, size_t c, int64_t limit) {
  const int64_t per = b.routed_experts ? b.num_moe_layers * b.experts_per_token : 0;
  const int64_t n = std::min({limit, length(b, a), length(b, c)});
  int64_t t = 0;
  for (; t < n; ++t) {
    const int64_t x = b.offsets[a] + t, y = b.offsets[c] + t;
    if (b.tokens[x] != b.tokens[y]) break;
    if (per && !std::equal(b.routed_experts + x * per, b.routed_experts + (x + 1) * per, b.routed_experts + y * per))
      break;
  }
  return t;
}

}  // namespace

int64_t PrefixGroups::cost(const mlpt_train_batch& b, size_t i, bool first_of_group) const {
  return length(b, i) - (first_of_group ? 0 : prefix[group[i]]);
}

PrefixGroups find_prefix_groups(const mlpt_train_batch& b) {
  PrefixGroups g;
  g.group.resize(b.num_sequences);
  size_t root = 0, members = 0;
  int64_t prefix = 0;
  for (size_t i = 0; i < b.num_sequences; ++i) {
    if (members > 0) {
      const int64_t shared =
          std::min(prefix, common_prefix(b, root, i, std::min(unscored_rows(b, root), unscored_rows(b, i))));
      if (shared > 0 && static_cast<int64_t>(members) * shared > static_cast<int64_t>(members - 1) * prefix) {
        prefix = shared;
        ++members;
        g.group[i] = g.prefix.size();
        continue;
      }
      g.prefix.push_back(members > 1 ? prefix : 0);
    }
    root = i;
    members = 1;
    prefix = length(b, i);  // a group of one shares everything with itself
    g.group[i] = g.prefix.size();
  }
  if (members > 0) g.prefix.push_back(members > 1 ? prefix : 0);
  return g;
}

PackedMicroBatch pack_micro_batch(const mlpt_train_batch& b, const MicroBatch& mb, const PrefixGroups* groups) {
  PackedMicroBatch p;
  const int64_t per = b.routed_experts ? b.num_moe_layers * b.experts_per_token : 0;
  p.row.assign(static_cast<size_t>(mb.end_token - mb.first_token), -1);
  // Appends tokens [from, to) of the batch as one segment with `parent`; returns its first row.
  auto segment = [&](int64_t from, int64_t to, int32_t parent) {
    const int64_t first = p.rows();
    p.tokens.insert(p.tokens.end(), b.tokens + from, b.tokens + to);
    if (per) p.replay.insert(p.replay.end(), b.routed_experts + from * per, b.routed_experts + to * per);
    p.offsets.push_back(first + (to - from));
    p.parents.push_back(parent);
    return first;
  };
  // Members per group within this micro-batch; a group shares only with two or more of them.
  std::map<size_t, std::vector<size_t>> members;
  for (size_t i = mb.first_seq; i < mb.end_seq; ++i)
    if (groups && groups->prefix[groups->group[i]] > 0) members[groups->group[i]].push_back(i);
  auto shared = [&](size_t i) { return groups && members.count(groups->group[i]) && members[groups->group[i]].size() > 1; };

  std::map<size_t, int32_t> prefix_segment;  // group -> its prefix segment
  std::map<size_t, int64_t> prefix_row;      // group -> the prefix's first row
  for (size_t i = mb.first_seq; i < mb.end_seq; ++i) {  // segments without a parent
    const int64_t from = b.offsets[i], local = from - mb.first_token;
    if (!shared(i)) {
      const int64_t first = segment(from, b.offsets[i + 1], -1);
      for (int64_t t = 0; t < length(b, i); ++t) p.row[local + t] = first + t;
      continue;
    }
    const size_t g = groups->group[i];
    if (!prefix_segment.count(g)) {
      prefix_segment[g] = static_cast<int32_t>(p.parents.size());
      prefix_row[g] = segment(from, from + groups->prefix[g], -1);
    }
    for (int64_t t = 0; t < groups->prefix[g]; ++t) p.row[local + t] = prefix_row[g] + t;
  }
  for (size_t i = mb.first_seq; i < mb.end_seq; ++i) {  // the continuations
    if (!shared(i)) continue;
    const size_t g = groups->group[i];
    const int64_t P = groups->prefix[g], from = b.offsets[i] + P, local = b.offsets[i] - mb.first_token;
    const int64_t first = segment(from, b.offsets[i + 1], prefix_segment[g]);
    for (int64_t t = P; t < length(b, i); ++t) p.row[local + t] = first + (t - P);
  }
  if (std::all_of(p.parents.begin(), p.parents.end(), [](int32_t x) { return x < 0; })) p.parents.clear();
  return p;
}

PackedMicroBatch padding_micro_batch() {
  PackedMicroBatch p;
  p.tokens = {0, 0};
  p.offsets = {0, 2};
  p.row = {0, 1};
  return p;
}

}  // namespace mlpt::ref
