// The qwen35_cuda engine as TP=2, EP=2 and TP=2 × EP=2 engine groups on one GPU, against the
// engine alone and the qwen35_cpu group (tests/integration/distributed/device_engine_groups.hpp has
// the script, the checks and their tolerances; the CPU runs the same on qwen35_bf16).
#include "device_engine_groups.hpp"

TEST_CASE("cuda engine group: TP=2 on one GPU generates the one-rank CUDA engine's and the CPU group's greedy tokens, and refits from shards") {
  dist_test::check_device_engine_group("qwen35_cuda", 2, 1);
}

TEST_CASE("cuda engine group: EP=2 on one GPU generates the one-rank CUDA engine's and the CPU group's greedy tokens, and refits from shards") {
  dist_test::check_device_engine_group("qwen35_cuda", 1, 2);
}

TEST_CASE("cuda engine group: TP=2 x EP=2 on one GPU generates the one-rank CUDA engine's and the CPU group's greedy tokens") {
  dist_test::check_device_engine_group("qwen35_cuda", 2, 2);
}
