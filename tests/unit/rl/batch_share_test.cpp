// A trainer rank's share of the global batch: contiguous whole sequences, balanced by tokens,
// covering the batch exactly once over the ranks, with N_tok counted over the whole batch.
#include <catch2/catch.hpp>

#include <numeric>

#include "core/rl/batch_share.hpp"
#include "packed_batch.hpp"

using Packed = mlpt_test::PackedBatch;

TEST_CASE("global N_tok counts trainable tokens of non-truncated sequences, the first token never") {
  Packed p({5, 7, 4}, 2);  // trainable: 3, (5: truncated), 2
  CHECK(mlpt::rl::global_loss_tokens(p.abi) == 5);
  Packed q({5}, 0);  // loss_mask 1 everywhere: the first token still has no logprob
  CHECK(mlpt::rl::global_loss_tokens(q.abi) == 4);
}

TEST_CASE("the ranks' shares cover every sequence once, in order, balanced by tokens") {
  Packed p({10, 10, 10, 10, 40, 10, 10}, 1);
  for (int ranks : {1, 2, 3, 7}) {
    INFO(ranks << " ranks");
    size_t next = 0;
    for (int r = 0; r < ranks; ++r) {
      auto range = mlpt::rl::share_range(p.abi, r, ranks);
      CHECK(range.first == next);
      CHECK(range.end > range.first);  // nobody idles while sequences last
      next = range.end;
      mlpt::rl::BatchShare share(p.abi, r, ranks);
      const auto& b = *share.abi();
      REQUIRE(b.num_sequences == range.end - range.first);
      CHECK(b.offsets[0] == 0);
      for (size_t s = 0; s < b.num_sequences; ++s) {
        CHECK(b.advantages[s] == p.advantages[range.first + s]);
        CHECK(b.truncated[s] == p.truncated[range.first + s]);
        CHECK(b.tokens[b.offsets[s]] == p.tokens[p.offsets[range.first + s]]);
        CHECK(b.offsets[s + 1] - b.offsets[s] == p.offsets[range.first + s + 1] - p.offsets[range.first + s]);
      }
    }
    CHECK(next == p.abi.num_sequences);
  }
  // Two ranks split 100 tokens at the half: 10+10+10+10 | 40+10+10.
  CHECK(mlpt::rl::share_range(p.abi, 0, 2).end == 4);
  // More ranks than sequences: the last ones get nothing, the others one each.
  Packed small({3, 3}, 1);
  CHECK(mlpt::rl::share_range(small.abi, 2, 3).end == mlpt::rl::share_range(small.abi, 2, 3).first);
  CHECK_THROWS_WITH(mlpt::rl::share_range(p.abi, 2, 2), Catch::Contains("rank 2 of 2"));
}
