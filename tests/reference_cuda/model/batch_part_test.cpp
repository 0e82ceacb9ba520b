// The parts an expert-parallel rank trains of its replica's share under MoE parallel folding
// (trainer/batch_part.hpp): for random batches, the parts of every count are contiguous runs of
// whole sequences that together are the batch once, in order; none is empty while there are as
// many sequences as parts; each part's arrays are views of the right elements (per token and per
// sequence); and the call's args.batch is the replica's share again after the call, thrown or not.
#include "trainer/batch_part.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

struct Batch {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask, truncated;
  std::vector<float> logprobs, advantages;
  std::vector<int16_t> routed;  // [token][2 layers][2]
  mlpt_train_batch abi{};
  Batch(std::mt19937& rng, int sequences) {
    for (int s = 0; s < sequences; ++s) {
      const int n = 1 + static_cast<int>(rng() % 40);
      for (int t = 0; t < n; ++t) {
        tokens.push_back(static_cast<int32_t>(tokens.size()));  // a token's id is its index
        mask.push_back(static_cast<uint8_t>(rng() % 2));
        logprobs.push_back(-static_cast<float>(tokens.size()));
        for (int r = 0; r < 4; ++r) routed.push_back(static_cast<int16_t>(tokens.size() % 1000 * 4 + r));
      }
      offsets.push_back(static_cast<int64_t>(tokens.size()));
      advantages.push_back(static_cast<float>(s));
      truncated.push_back(static_cast<uint8_t>(s % 3 == 0));
    }
    abi = {MLPT_TRAIN_BATCH_STRUCT_SIZE,
           static_cast<size_t>(sequences),
           offsets.data(),
           tokens.data(),
           mask.data(),
           logprobs.data(),
           advantages.data(),
           truncated.data(),
           routed.data(),
           2,
           2};
  }
};

}  // namespace

TEST_CASE(
    "MoE parallel folding: the parts of a share are its sequences once, in order, none empty while they "
    "suffice") {
  std::mt19937 rng(7);
  for (int sequences : {1, 2, 3, 5, 8, 17}) {
    const Batch b(rng, sequences);
    for (int parts = 1; parts <= 9; ++parts) {
      INFO(sequences << " sequences in " << parts << " parts");
      int64_t next_token = 0;
      size_t next_sequence = 0;
      for (int p = 0; p < parts; ++p) {
        const mlpt::ref::BatchPart part(b.abi, p, parts);
        const mlpt_train_batch& x = *part.batch();
        if (sequences >= parts) CHECK(x.num_sequences >= 1);
        REQUIRE(x.offsets[0] == 0);
        const int64_t n = x.offsets[x.num_sequences];
        for (int64_t t = 0; t < n; ++t) {
          REQUIRE(x.tokens[t] == next_token + t);  // the next tokens of the batch, in order
          CHECK(x.loss_mask[t] == b.mask[size_t(next_token + t)]);
          CHECK(x.generation_logprobs[t] == b.logprobs[size_t(next_token + t)]);
          CHECK(x.routed_experts[t * 4 + 3] == b.routed[size_t(next_token + t) * 4 + 3]);
        }
        for (size_t s = 0; s < x.num_sequences; ++s) {
          CHECK(x.offsets[s + 1] - x.offsets[s] ==
                b.offsets[next_sequence + s + 1] - b.offsets[next_sequence + s]);  // whole sequences
          CHECK(x.advantages[s] == b.advantages[next_sequence + s]);
          CHECK(x.truncated[s] == b.truncated[next_sequence + s]);
        }
        next_token += n, next_sequence += x.num_sequences;
      }
      CHECK(next_token == b.offsets.back());
      CHECK(next_sequence == static_cast<size_t>(sequences));
    }
  }
}

TEST_CASE(
    "MoE parallel folding: the call's batch is the replica's share again after the call, thrown or not") {
  std::mt19937 rng(3);
  const Batch b(rng, 6);
  mlpt_train_step_args args{};
  args.batch = &b.abi;
  {
    const mlpt::ref::BatchPartOf part(args, 1, 2);
    CHECK(args.batch != &b.abi);
    CHECK(args.batch->tokens > b.abi.tokens);  // the second part starts later
  }
  CHECK(args.batch == &b.abi);
  try {
    const mlpt::ref::BatchPartOf part(args, 0, 3);
    throw std::runtime_error("a failing step");
  } catch (const std::runtime_error&) {
  }
  CHECK(args.batch == &b.abi);
}
