// The UCX transport's pull planning (plugins/transport_ucx/shard_pulls.cpp) on its own: every wanted
// element from exactly one sender rank, replicas shared between receivers, and the errors that name
// what is missing.
#include <catch2/catch.hpp>

#include "mlpt/sdk/error.hpp"
#include "shard_pulls.hpp"

using namespace mlpt::transport::ucx;
using mlpt::sdk::Box;

namespace {

// Rank r of 2 holds rows [5r, 5r + 5) of "w" [10, 4] and "norm" [17] whole (a replica).
std::vector<std::vector<OfferedTensor>> two_ranks() {
  std::vector<std::vector<OfferedTensor>> offers(2);
  for (int64_t r = 0; r < 2; ++r) {
    offers[static_cast<size_t>(r)].push_back({"w", {kDLFloat, 32, 1}, {10, 4}, Box{{5 * r, 0}, {5, 4}}});
    offers[static_cast<size_t>(r)].push_back({"norm", {kDLFloat, 32, 1}, {17}, Box{{0}, {17}}});
  }
  return offers;
}

int64_t pulled_elements(const std::vector<std::vector<Pull>>& pulls, const std::string& name) {
  int64_t n = 0;
  for (const auto& rank : pulls)
    for (const auto& p : rank)
      if (p.name == name) n += p.box.elements();
  return n;
}

}  // namespace

TEST_CASE("ucx pull plan: every element from one rank, a replica from one rank that differs between receivers") {
  const auto offers = two_ranks();
  // Both tensors wanted whole, by two receivers (spread 0 and 1).
  int64_t w_shape[2] = {10, 4}, norm_shape[1] = {17};
  std::vector<mlpt_named_tensor> whole = {
      {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"w", 1}, DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, w_shape, nullptr, 0}},
      {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"norm", 4}, DLTensor{nullptr, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, norm_shape, nullptr, 0}}};
  std::vector<size_t> norm_from, norm_from_unasked;
  for (size_t spread : {0, 1}) {
    for (bool asked : {true, false}) {  // a wanted layout; none (every tensor whole, in the ranks' order)
      const auto pulls = asked ? plan_pulls(offers, {whole.data(), nullptr, whole.size()}, "test", spread)
                               : plan_pulls(offers, {}, "test", spread);
      REQUIRE(pulls.size() == 2);
      CHECK(pulled_elements(pulls, "w") == 40);     // each element once
      CHECK(pulled_elements(pulls, "norm") == 17);  // the replica once, not twice
      for (size_t r = 0; r < 2; ++r)
        for (const auto& p : pulls[r])
          if (p.name == "norm") (asked ? norm_from : norm_from_unasked).push_back(r);
    }
  }
  REQUIRE(norm_from.size() == 2);
  CHECK(norm_from[0] != norm_from[1]);  // two receivers, two ranks serving the replica
  // Without a wanted layout the first rank that holds it serves, so the pieces arrive in order.
  CHECK(norm_from_unasked == std::vector<size_t>{0, 0});
  // Columns [1, 3) of every row: half from each rank.
  int64_t shape[2] = {10, 2}, global[2] = {10, 4}, offsets[2] = {0, 1};
  mlpt_named_tensor want{MLPT_NAMED_TENSOR_STRUCT_SIZE, {"w", 1}, DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0}};
  mlpt_tensor_shard shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, global, offsets};
  const auto pulls = plan_pulls(offers, {&want, &shard, 1}, "test", 0);
  REQUIRE(pulls[0].size() == 1);
  REQUIRE(pulls[1].size() == 1);
  CHECK(pulls[0][0].box == Box{{0, 1}, {5, 2}});
  CHECK(pulls[1][0].box == Box{{5, 1}, {5, 2}});
}

TEST_CASE("ucx pull plan: a box no rank covers, a tensor no rank has, and another global shape are refused naming them") {
  auto offers = two_ranks();
  offers[1][0].box.extent[0] = 4;  // rank 1 holds rows [5, 9): row 9 is on no rank
  try {
    plan_pulls(offers, {}, "receiver 'e'", 0);
    FAIL("planned a layout the ranks do not cover");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_FAILED_PRECONDITION);
    CHECK_THAT(e.what(), Catch::Contains("receiver 'e' wants box offset [0, 0] shape [10, 4] of 'w' (global [10, 4])") &&
                             Catch::Contains("element [9, 0]"));
  }
  int64_t shape[1] = {3};
  mlpt_named_tensor missing{MLPT_NAMED_TENSOR_STRUCT_SIZE, {"bias", 4}, DLTensor{nullptr, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0}};
  try {
    plan_pulls(two_ranks(), {&missing, nullptr, 1}, "receiver 'e'", 0);
    FAIL("planned a tensor no rank has");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("'bias', which none of the 2 sender ranks published"));
  }
  mlpt_named_tensor other{MLPT_NAMED_TENSOR_STRUCT_SIZE, {"norm", 4}, DLTensor{nullptr, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0}};
  try {
    plan_pulls(two_ranks(), {&other, nullptr, 1}, "receiver 'e'", 0);
    FAIL("planned a tensor of another global shape");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("wants 'norm' as [3] float32, the sender ranks published [17] float32"));
  }
}
