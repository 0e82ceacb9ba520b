// Where the UCX receiver lands pulled pieces (plugins/transport_ucx/landing_plan.cpp) on its own: a
// piece that is one contiguous run of its wanted tensor goes straight to its place, a strided one is
// copied box by box, and a part whose pieces are not the ones pulled is refused naming the piece.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "landing_plan.hpp"
#include "mlpt/sdk/error.hpp"

using namespace mlpt::transport::ucx;
using mlpt::sdk::Box;
using mlpt::transport::Layout;
using mlpt::transport::TensorMeta;

namespace {

constexpr DLDataType kF32{kDLFloat, 32, 1};

// Rank r of 2 holds rows [3r, 3r + 3) of "w" [6, 4]; rank 0 also holds "norm" [5] whole.
std::vector<std::vector<OfferedTensor>> row_ranks() {
  return {{{"w", kF32, {6, 4}, Box{{0, 0}, {3, 4}}}, {"norm", kF32, {5}, Box{{0}, {5}}}},
          {{"w", kF32, {6, 4}, Box{{3, 0}, {3, 4}}}}};
}

// A receiver wanting columns [1, 3) of "w" (every row) and "norm" whole.
struct Wanted {
  int64_t w_shape[2] = {6, 2}, w_global[2] = {6, 4}, w_offset[2] = {0, 1};
  int64_t norm_shape[1] = {5};
  std::vector<mlpt_named_tensor> tensors = {
      {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"w", 1}, DLTensor{nullptr, {kDLCPU, 0}, 2, kF32, w_shape, nullptr, 0}},
      {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"norm", 4}, DLTensor{nullptr, {kDLCPU, 0}, 1, kF32, norm_shape, nullptr, 0}}};
  std::vector<mlpt_tensor_shard> shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, w_global, w_offset},
                                           {MLPT_TENSOR_SHARD_STRUCT_SIZE, norm_shape, nullptr}};
  mlpt::sdk::TensorLayout layout() const { return {tensors.data(), shards.data(), tensors.size()}; }
};

// A rank's part as its sender plans it: one piece per pull, in order.
Layout part_of(const std::vector<Pull>& pulls) {
  Layout l;
  uint64_t at = 0;
  for (const auto& p : pulls) {
    TensorMeta m;
    m.name = p.name;
    m.dtype = kF32;
    m.shape = p.box.extent;
    m.offset = at;
    m.nbytes = static_cast<uint64_t>(p.box.elements()) * 4;
    m.global_shape = p.name == "w" ? std::vector<int64_t>{6, 4} : std::vector<int64_t>{5};
    m.box_offset = p.box.offset;
    at += m.nbytes;
    l.tensors.push_back(m);
  }
  l.total_bytes = at;
  return l;
}

}  // namespace

TEST_CASE("landing plan: contiguous pieces land in place, every piece is placed or copied into the wanted layout") {
  const auto offers = row_ranks();
  Wanted want;
  auto pulls = plan_pulls(offers, want.layout(), "test", 0);
  LandingPlan plan(7, list_wanted(offers, want.layout()), pulls, true);
  REQUIRE(plan.wanted().size() == 2);
  CHECK(plan.offset(0) == 0);
  CHECK(plan.offset(1) == 64);  // 48 bytes of w, aligned
  auto buffers = std::make_shared<ReceiveBufferPool>();
  auto into = std::make_shared<LayoutBuffer>(std::make_shared<LandingPlan>(plan), buffers, 3);
  std::memset(into->buffer.data, 0xFF, plan.bytes());
  // Each rank's rows of columns [1, 3) are one run of the wanted [6, 2] (all of its rows):
  // straight to their place. Land them as the receiver would, the copied ones through copy_in.
  for (uint32_t r = 0; r < 2; ++r) {
    const Layout part = part_of(pulls[r]);
    const auto places = plan.places(r, part);
    REQUIRE(places.size() == pulls[r].size());
    for (size_t k = 0; k < places.size(); ++k) {
      const TensorMeta& m = part.tensors[k];
      // The global values: w[i][j] = 10 i + j, norm[i] = 100 + i.
      std::vector<float> values(static_cast<size_t>(m.nbytes / 4));
      for (int64_t e = 0; e < static_cast<int64_t>(values.size()); ++e) {
        if (m.name == "w") {
          const int64_t i = m.box_offset[0] + e / m.shape[1], j = m.box_offset[1] + e % m.shape[1];
          values[static_cast<size_t>(e)] = static_cast<float>(10 * i + j);
        } else {
          values[static_cast<size_t>(e)] = static_cast<float>(100 + m.box_offset[0] + e);
        }
      }
      if (m.name == "w") {
        CHECK(places[k].want == 0);
        CHECK(places[k].at == (3 * r) * 2 * 4);  // row 3r of the wanted [6, 2]
      }
      if (places[k].at >= 0) {
        std::memcpy(into->buffer.data + places[k].at, values.data(), m.nbytes);
      } else {
        into->copy_in(m, places[k], reinterpret_cast<const uint8_t*>(values.data()));
      }
    }
  }
  const auto* w = reinterpret_cast<const float*>(into->tensors[0].tensor.data);
  const auto* norm = reinterpret_cast<const float*>(into->tensors[1].tensor.data);
  int mismatches = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) mismatches += w[i * 2 + j] != static_cast<float>(10 * i + j + 1);
  for (int i = 0; i < 5; ++i) mismatches += norm[i] != static_cast<float>(100 + i);
  CHECK(mismatches == 0);
  // The shard descriptors say which box each tensor is.
  REQUIRE(into->shards.size() == 2);
  CHECK(into->shards[0].offsets[1] == 1);
  CHECK(into->shards[0].global_shape[1] == 4);
}

TEST_CASE("landing plan: a piece strided in its wanted tensor is copied, box by box") {
  // Ranks hold column halves of "w" [6, 4]; a receiver wanting "w" whole gets two strided pieces.
  const std::vector<std::vector<OfferedTensor>> offers = {{{"w", kF32, {6, 4}, Box{{0, 0}, {6, 2}}}},
                                                          {{"w", kF32, {6, 4}, Box{{0, 2}, {6, 2}}}}};
  const auto pulls = plan_pulls(offers, {}, "test", 0);
  LandingPlan plan(1, list_wanted(offers, {}), pulls, false);
  auto into = std::make_shared<LayoutBuffer>(std::make_shared<LandingPlan>(plan), std::make_shared<ReceiveBufferPool>(), 1);
  CHECK(into->shards.empty());  // whole tensors, no descriptors
  for (uint32_t r = 0; r < 2; ++r) {
    const Layout part = part_of(pulls[r]);
    const auto places = plan.places(r, part);
    REQUIRE(places.size() == 1);
    CHECK(places[0].at == -1);
    std::vector<float> values(12);
    for (int e = 0; e < 12; ++e) values[static_cast<size_t>(e)] = static_cast<float>(10 * (e / 2) + 2 * static_cast<int>(r) + e % 2);
    into->copy_in(part.tensors[0], places[0], reinterpret_cast<const uint8_t*>(values.data()));
  }
  const auto* w = reinterpret_cast<const float*>(into->tensors[0].tensor.data);
  int mismatches = 0;
  for (int e = 0; e < 24; ++e) mismatches += w[e] != static_cast<float>(10 * (e / 4) + e % 4);
  CHECK(mismatches == 0);
}

TEST_CASE("landing plan: a part whose pieces are not the ones pulled is refused naming the piece") {
  const auto offers = row_ranks();
  Wanted want;
  const auto pulls = plan_pulls(offers, want.layout(), "test", 0);
  LandingPlan plan(7, list_wanted(offers, want.layout()), pulls, true);
  Layout part = part_of(pulls[0]);
  SECTION("another box") {
    part.tensors[0].box_offset[0] = 1;
    try {
      (void)plan.places(0, part);
      FAIL("a piece of another box was placed");
    } catch (const mlpt::sdk::Error& e) {
      CHECK(e.code() == MLPT_DATA_LOSS);
      CHECK_THAT(e.what(), Catch::Contains("sender rank 0 sent piece 0 as 'w' box offset [1, 1]") &&
                               Catch::Contains("pulled 'w' box offset [0, 1] shape [3, 2]"));
    }
  }
  SECTION("more bytes than the box holds") {
    part.tensors[0].nbytes += 4;
    CHECK_THROWS_WITH(plan.places(0, part), Catch::Contains("sender rank 0 sent piece 0") && Catch::Contains("(28 bytes)"));
  }
  SECTION("another dtype") {
    part.tensors[0].dtype = DLDataType{kDLBfloat, 16, 1};
    CHECK_THROWS_WITH(plan.places(0, part), Catch::Contains("bfloat16") && Catch::Contains("float32"));
  }
  SECTION("a piece that starts inside the one before it in the stream") {
    REQUIRE(part.tensors.size() == 2);
    part.tensors[1].offset = part.tensors[0].offset + 8;
    CHECK_THROWS_WITH(plan.places(0, part), Catch::Contains("sender rank 0 sent piece 1 at byte 8 of its stream, before the end "
                                                            "of piece 0 (byte 24)"));
  }
  SECTION("a piece too many, or a rank it did not pull from") {
    part.tensors.push_back(part.tensors.back());
    CHECK_THROWS_WITH(plan.places(0, part), Catch::Contains("sent " + std::to_string(part.tensors.size()) + " pieces for request 7"));
    CHECK_THROWS_WITH(plan.places(2, part_of(pulls[0])), Catch::Contains("sender rank 2 answered pulls"));
  }
}
