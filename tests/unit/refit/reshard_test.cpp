// Resharding (the SDK's mlpt/sdk/reshard.hpp, what every SDK transport's receive uses): the planner
// against a brute-force reference (every element a destination holds arrives exactly once, from a
// source that holds it) on random layouts, replicas included; an uncovered element refused; and a
// cut from 2 trainer shards (rows split in 2) to 3 engine shards (columns split in 3) equal to the
// dense tensors bit for bit, handing over as they are the tensors that need no cut.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include <mlpt/sdk/reshard.hpp>

using namespace mlpt::sdk;

namespace {

// Splits [0, n) into `parts` contiguous ranges at random cut points (some may be empty).
std::vector<std::pair<int64_t, int64_t>> split(int64_t n, int parts, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, n};
  for (int i = 1; i < parts; ++i) cuts.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> r;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) r.push_back({cuts[i], cuts[i + 1] - cuts[i]});
  return r;
}

// A random grid layout of `global`: each dimension split in 1..3 parts; `replicas` copies of it
// (data-parallel ranks hold the same shards). Ranks numbered from `first_rank`.
std::vector<Shard> grid(const std::vector<int64_t>& global, int replicas, std::mt19937_64& rng) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> parts;
  for (int64_t n : global) parts.push_back(split(n, 1 + static_cast<int>(rng() % 3), rng));
  std::vector<Shard> shards;
  for (int rep = 0; rep < replicas; ++rep) {
    std::vector<size_t> at(global.size(), 0);
    for (;;) {
      Shard s;
      s.rank = static_cast<int32_t>(shards.size());
      for (size_t d = 0; d < global.size(); ++d) s.box.offset.push_back(parts[d][at[d]].first), s.box.extent.push_back(parts[d][at[d]].second);
      shards.push_back(s);
      size_t d = 0;
      while (d < global.size() && ++at[d] == parts[d].size()) at[d++] = 0;
      if (d == global.size()) break;
    }
  }
  return shards;
}

bool inside(const Box& b, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < idx.size(); ++d)
    if (idx[d] < b.offset[d] || idx[d] >= b.offset[d] + b.extent[d]) return false;
  return true;
}

// Every index of `global`, in row-major order.
template <class F>
void for_each_index(const std::vector<int64_t>& global, F&& f) {
  for (int64_t n : global)
    if (n == 0) return;
  std::vector<int64_t> idx(global.size(), 0);
  for (;;) {
    f(idx);
    size_t d = global.size();
    while (d > 0 && ++idx[d - 1] == global[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

TEST_CASE("the reshard plan moves every element a destination needs exactly once, from a source that holds it (random layouts)") {
  std::mt19937_64 rng(20261203);
  int planned = 0, uncovered = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int64_t> global;
    for (int d = 0, nd = 1 + static_cast<int>(rng() % 3); d < nd; ++d) global.push_back(1 + static_cast<int64_t>(rng() % 7));
    auto sources = grid(global, 1 + static_cast<int>(rng() % 2), rng);
    auto destinations = grid(global, 1 + static_cast<int>(rng() % 2), rng);
    // Sometimes a source shard is lost: then the plan must refuse exactly when something is uncovered.
    if (rng() % 4 == 0 && sources.size() > 1) sources.erase(sources.begin() + static_cast<long>(rng() % sources.size()));
    bool covered = true;
    for_each_index(global, [&](const std::vector<int64_t>& idx) {
      bool held = false;
      for (const auto& s : sources) held |= inside(s.box, idx);
      covered &= held;
    });
    INFO("trial " << trial);
    if (!covered) {
      CHECK_THROWS_AS(plan_reshard("w", global, sources, destinations), Error);
      ++uncovered;
      continue;
    }
    auto moves = plan_reshard("w", global, sources, destinations);
    ++planned;
    for (size_t j = 0; j < destinations.size(); ++j) {
      for_each_index(global, [&](const std::vector<int64_t>& idx) {
        if (!inside(destinations[j].box, idx)) return;
        int arrivals = 0;
        for (const auto& m : moves) {
          if (m.to_shard != j || !inside(m.box, idx)) continue;
          ++arrivals;
          CHECK(inside(sources[m.from_shard].box, idx));
          CHECK(m.from == sources[m.from_shard].rank);
          CHECK(m.to == destinations[j].rank);
        }
        CHECK(arrivals == 1);
      });
    }
    for (const auto& m : moves) CHECK_FALSE(m.box.empty());
  }
  CHECK(planned > 200);
  CHECK(uncovered > 10);
}

TEST_CASE("a shard outside its global shape, or an element no source holds, is refused naming the tensor") {
  std::vector<Shard> src{{0, {{0, 0}, {2, 4}}}};
  CHECK_THROWS_WITH(plan_reshard("layers.0.w", {4, 4}, src, {{0, {{0, 0}, {4, 4}}}}),
                    Catch::Contains("'layers.0.w'") && Catch::Contains("no source shard holds element [2, 0]"));
  CHECK_THROWS_WITH(plan_reshard("layers.0.w", {4, 4}, src, {{0, {{3, 0}, {2, 4}}}}),
                    Catch::Contains("does not lie in the global shape [4, 4]"));
}

namespace {

// A named tensor over `data` with an optional shard descriptor's arrays.
struct Piece {
  std::string name;
  std::vector<int64_t> shape, global, offsets;
  std::vector<float> data;
};

void views_of(std::vector<Piece>& pieces, std::vector<mlpt_named_tensor>& tensors, std::vector<mlpt_tensor_shard>& shards) {
  for (auto& p : pieces) {
    mlpt_named_tensor t{};
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.name = {p.name.data(), p.name.size()};
    t.tensor.data = p.data.empty() ? nullptr : p.data.data();
    t.tensor.device = {kDLCPU, 0};
    t.tensor.ndim = static_cast<int32_t>(p.shape.size());
    t.tensor.dtype = {kDLFloat, 32, 1};
    t.tensor.shape = p.shape.data();
    tensors.push_back(t);
    shards.push_back({MLPT_TENSOR_SHARD_STRUCT_SIZE, p.global.data(), p.offsets.data()});
  }
}

}  // namespace

TEST_CASE("a cut from 2 trainer shards (rows) to 3 engine shards (columns) equals the dense tensors bit for bit") {
  // The dense truth: a [6, 9] matrix and a [9] vector of distinct bit patterns.
  std::vector<float> matrix(54), vector(9);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<float>(i) * 1.25f - 7.0f;
  for (size_t i = 0; i < vector.size(); ++i) vector[i] = -static_cast<float>(i) / 3.0f;
  // Trainer rank r holds rows [3r, 3r + 3) of the matrix and (replicated) the whole vector.
  std::vector<std::vector<Piece>> trainer(2);
  for (int r = 0; r < 2; ++r) {
    Piece m{"w", {3, 9}, {6, 9}, {3 * r, 0}, {}};
    m.data.assign(matrix.begin() + 27 * r, matrix.begin() + 27 * (r + 1));
    trainer[static_cast<size_t>(r)] = {m, Piece{"norm", {9}, {9}, {0}, vector}};
  }
  // Engine rank e wants columns [3e, 3e + 3) of the matrix and elements [3e, 3e + 3) of the vector.
  std::vector<std::vector<Piece>> engine(3);
  for (int e = 0; e < 3; ++e) engine[static_cast<size_t>(e)] = {Piece{"w", {6, 3}, {6, 9}, {0, 3 * e}, {}}, Piece{"norm", {3}, {9}, {3 * e}, {}}};

  std::vector<std::vector<mlpt_named_tensor>> tt(2), et(3);
  std::vector<std::vector<mlpt_tensor_shard>> ts(2), es(3);
  std::vector<TensorLayout> sources;
  for (size_t r = 0; r < 2; ++r) views_of(trainer[r], tt[r], ts[r]), sources.push_back({tt[r].data(), ts[r].data(), tt[r].size()});
  for (size_t e = 0; e < 3; ++e) views_of(engine[e], et[e], es[e]);

  uint64_t received = 0;
  for (size_t e = 0; e < 3; ++e) {
    INFO("engine rank " << e);
    LayoutCut got(sources, {et[e].data(), es[e].data(), et[e].size()});
    const auto& t = got.tensors();
    REQUIRE(t.size() == 2);
    CHECK(std::string(t[0].name.data, t[0].name.size) == "w");
    CHECK(got.shards()[0].offsets[1] == static_cast<int64_t>(3 * e));
    CHECK(got.shards()[0].global_shape[0] == 6);
    const auto* w = static_cast<const float*>(t[0].tensor.data);
    for (size_t row = 0; row < 6; ++row)
      for (size_t col = 0; col < 3; ++col) CHECK(std::memcmp(&w[row * 3 + col], &matrix[row * 9 + 3 * e + col], 4) == 0);
    CHECK(std::memcmp(t[1].tensor.data, &vector[3 * e], 12) == 0);
    CHECK(got.bytes_handed_over() == 0);
    received += got.bytes_copied();
  }
  // Each engine rank holds a third: nobody received the whole model.
  CHECK(received == (54 + 9) * 4);

  // The next version's cut reuses the previous cut's memory (no fresh pages per refit) and is
  // still exact: the trainer's values change, the cut follows them into the same buffers.
  for (auto& rank : trainer)
    for (auto& x : rank[0].data) x = -x;
  {
    LayoutCut first(sources, {et[1].data(), es[1].data(), et[1].size()});
    const void* memory = first.tensors()[0].tensor.data;
    LayoutCut next(sources, {et[1].data(), es[1].data(), et[1].size()}, first.take_buffers());
    CHECK(next.tensors()[0].tensor.data == memory);
    const auto* w = static_cast<const float*>(next.tensors()[0].tensor.data);
    for (size_t row = 0; row < 6; ++row)
      for (size_t col = 0; col < 3; ++col) {
        const float expected = -matrix[row * 9 + 3 + col];
        CHECK(std::memcmp(&w[row * 3 + col], &expected, 4) == 0);
      }
  }
  for (auto& rank : trainer)
    for (auto& x : rank[0].data) x = -x;

  // Without a wanted layout: whole tensors, assembled; a replica that is whole is handed over as it is.
  LayoutCut whole(sources, {});
  REQUIRE(whole.tensors().size() == 2);
  CHECK(std::memcmp(whole.tensors()[0].tensor.data, matrix.data(), matrix.size() * 4) == 0);
  CHECK(whole.tensors()[1].tensor.data == trainer[0][1].data.data());
  CHECK(whole.bytes_copied() == 54 * 4);
  CHECK(whole.bytes_handed_over() == 9 * 4);

  // A destination that wants a tensor no trainer rank exports, or another global shape.
  engine[0][1].name = "missing";
  et[0].clear(), es[0].clear();
  views_of(engine[0], et[0], es[0]);
  CHECK_THROWS_WITH(LayoutCut(sources, {et[0].data(), es[0].data(), et[0].size()}),
                    Catch::Contains("wants 'missing', which no sender published"));
}
