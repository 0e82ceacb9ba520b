// The NCCL communicator against the arithmetic it must do, one rank per visible GPU (threads of
// this process). Values are small integers, so every sum is exact and any rank's error shows.
// With one GPU the group has one rank: the calls still run through NCCL (sends to itself), but
// nothing crosses devices; scripts/gpu-check.sh prints the device count it ran with.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/parallel/nccl_communicator.hpp"

using mlpt::ref::cuda::NcclCommunicator;

namespace {

struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(size_t n) { REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)) == cudaSuccess); }
  ~DeviceFloats() { cudaFree(p); }
};

std::vector<float> download(const float* p, size_t n, cudaStream_t s) {
  std::vector<float> h(n);
  cudaStreamSynchronize(s);
  cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

// What rank `from` sends rank `to` in the all-to-all: from + to + 1 values, each naming both.
size_t a2a_count(int from, int to) { return static_cast<size_t>(from + to + 1); }
float a2a_value(int from, int to, size_t k) { return static_cast<float>(from * 1000 + to * 100 + static_cast<int>(k)); }

struct RankResult {
  std::vector<float> reduced, exchanged, gathered, scattered_even, scattered_uneven;
  std::vector<size_t> counts;
  std::string error;
};

RankResult run_rank(const NcclCommunicator::Id& id, int rank, int size) {
  RankResult out;
  try {
    cudaSetDevice(rank);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    {
      NcclCommunicator comm(id, rank, size, stream);
      // all_reduce_sum: rank r holds (r + 1) · i.
      const size_t n = 4099;
      std::vector<float> mine(n);
      for (size_t i = 0; i < n; ++i) mine[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 97));
      DeviceFloats values(n);
      cudaMemcpy(values.p, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      comm.all_reduce_sum(values.p, n);
      out.reduced = download(values.p, n, stream);

      // exchange_counts then all_to_all_v with uneven counts.
      std::vector<size_t> send_counts(static_cast<size_t>(size)), recv_counts(static_cast<size_t>(size));
      std::vector<float> send;
      for (int p = 0; p < size; ++p) {
        send_counts[static_cast<size_t>(p)] = a2a_count(rank, p);
        for (size_t k = 0; k < a2a_count(rank, p); ++k) send.push_back(a2a_value(rank, p, k));
      }
      comm.exchange_counts(send_counts.data(), recv_counts.data());
      out.counts = recv_counts;
      const size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
      DeviceFloats dsend(send.size()), drecv(total);
      cudaMemcpy(dsend.p, send.data(), send.size() * sizeof(float), cudaMemcpyHostToDevice);
      comm.all_to_all_v(dsend.p, send_counts.data(), drecv.p, recv_counts.data());
      out.exchanged = download(drecv.p, total, stream);

      // all_gather_v: rank r contributes r + 2 copies of r.
      std::vector<size_t> gather_counts(static_cast<size_t>(size));
      for (int p = 0; p < size; ++p) gather_counts[static_cast<size_t>(p)] = static_cast<size_t>(p + 2);
      std::vector<float> contribution(static_cast<size_t>(rank + 2), static_cast<float>(rank));
      DeviceFloats dmine(contribution.size()), dall(std::accumulate(gather_counts.begin(), gather_counts.end(), size_t{0}));
      cudaMemcpy(dmine.p, contribution.data(), contribution.size() * sizeof(float), cudaMemcpyHostToDevice);
      comm.all_gather_v(dmine.p, contribution.size(), dall.p, gather_counts.data());
      out.gathered = download(dall.p, std::accumulate(gather_counts.begin(), gather_counts.end(), size_t{0}), stream);

      // reduce_scatter_v: rank r adds (r + 1) · (k + 1) at index k; blocks of 3 each (ncclReduceScatter),
      // then of p + 1 floats for rank p (one ncclReduce per rank).
      for (const bool even : {true, false}) {
        std::vector<size_t> blocks(static_cast<size_t>(size));
        for (int p = 0; p < size; ++p) blocks[static_cast<size_t>(p)] = even ? 3 : static_cast<size_t>(p + 1);
        const size_t all = std::accumulate(blocks.begin(), blocks.end(), size_t{0}),
                     mine_n = blocks[static_cast<size_t>(rank)];
        std::vector<float> addends(all);
        for (size_t k = 0; k < all; ++k)
          addends[k] = static_cast<float>((rank + 1) * static_cast<int>(k + 1));
        DeviceFloats dadd(all), dblock(mine_n);
        cudaMemcpy(dadd.p, addends.data(), all * sizeof(float), cudaMemcpyHostToDevice);
        comm.reduce_scatter_v(dadd.p, dblock.p, blocks.data());
        (even ? out.scattered_even : out.scattered_uneven) = download(dblock.p, mine_n, stream);
      }
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

TEST_CASE(
    "NCCL communicator: sums, all-to-all, all-gather, reduce-scatter and counts equal the arithmetic, the "
    "same bits on every rank") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  REQUIRE(devices >= 1);
  std::printf("NCCL communicator test: a group of %d rank(s), one per GPU\n", devices);
  const auto id = NcclCommunicator::new_id();
  std::vector<RankResult> results(static_cast<size_t>(devices));
  std::vector<std::thread> threads;
  for (int r = 0; r < devices; ++r) threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = run_rank(id, r, devices); });
  for (auto& t : threads) t.join();

  const int ranks_sum = devices * (devices + 1) / 2;
  for (int r = 0; r < devices; ++r) {
    const auto& got = results[static_cast<size_t>(r)];
    INFO("rank " << r);
    REQUIRE(got.error.empty());
    for (size_t i = 0; i < got.reduced.size(); ++i) REQUIRE(got.reduced[i] == static_cast<float>(ranks_sum * static_cast<int>(i % 97)));
    REQUIRE(got.reduced == results[0].reduced);
    size_t at = 0;
    for (int p = 0; p < devices; ++p) {
      REQUIRE(got.counts[static_cast<size_t>(p)] == a2a_count(p, r));
      for (size_t k = 0; k < a2a_count(p, r); ++k) REQUIRE(got.exchanged[at++] == a2a_value(p, r, k));
    }
    REQUIRE(at == got.exchanged.size());
    at = 0;
    for (int p = 0; p < devices; ++p)
      for (int k = 0; k < p + 2; ++k) REQUIRE(got.gathered[at++] == static_cast<float>(p));
    // Rank r's block of the sums Σ(p + 1) · (k + 1), k from the block's first index.
    const size_t even_first = 3 * static_cast<size_t>(r), uneven_first = static_cast<size_t>(r * (r + 1) / 2);
    REQUIRE(got.scattered_even.size() == 3);
    REQUIRE(got.scattered_uneven.size() == static_cast<size_t>(r + 1));
    for (size_t k = 0; k < got.scattered_even.size(); ++k)
      REQUIRE(got.scattered_even[k] == static_cast<float>(ranks_sum * static_cast<int>(even_first + k + 1)));
    for (size_t k = 0; k < got.scattered_uneven.size(); ++k)
      REQUIRE(got.scattered_uneven[k] ==
              static_cast<float>(ranks_sum * static_cast<int>(uneven_first + k + 1)));
  }
}

TEST_CASE("NCCL communicator: a rank outside its group is refused with a clear error") {
  const auto id = NcclCommunicator::new_id();
  try {
    NcclCommunicator comm(id, 2, 2, nullptr);
    FAIL("rank 2 of a group of 2 was accepted");
  } catch (const std::exception& e) {
    REQUIRE(std::string(e.what()).find("NCCL rank 2 of a group of 2") != std::string::npos);
  }
}
