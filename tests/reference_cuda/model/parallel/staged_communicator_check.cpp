// An MPI program (run by staged_communicator_test.cpp under mpirun) that checks the host logic of
// StagedCommunicator (model/parallel/staged_communicator.hpp) over the MPI communicator: every call
// gives the arithmetic's answer, its buffers pass through the staging exactly once each way, and
// the staging moves exactly the floats the counts name. The buffers' memory is a simulated device
// (OffsetMemory below: ordinary host memory holding every value plus 1000), so a call that handed
// a buffer to MPI unstaged, or staged it twice, gets wrong numbers. The CUDA staging itself runs on
// a GPU (tests/reference_cuda/backends/cuda/cuda_parallel_check.cpp). Values are small integers: every sum
// is exact. World rank 0 prints one line "staged communicator: ok ..." or what failed; every rank
// exits 1 on a failure.
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include <mpi.h>

#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/staged_communicator.hpp"
#include "mpi_check_main.hpp"

using namespace mlpt::ref;

namespace {

constexpr float kOffset = 1000;

// A simulated device: its memory holds value + kOffset; staging converts. Counts the floats moved.
struct OffsetMemory final : Staging {
  size_t floats_to_host = 0, floats_to_buffer = 0;
  void to_host(float* host, const float* buffer, size_t count) override {
    for (size_t i = 0; i < count; ++i) host[i] = buffer[i] - kOffset;
    floats_to_host += count;
  }
  void to_buffer(float* buffer, const float* host, size_t count) override {
    for (size_t i = 0; i < count; ++i) buffer[i] = host[i] + kOffset;
    floats_to_buffer += count;
  }
};
std::vector<float> stored(const std::vector<float>& values) {  // values as the simulated device holds them
  std::vector<float> out(values);
  for (float& x : out) x += kOffset;
  return out;
}
std::vector<float> read(const std::vector<float>& buffer) {
  std::vector<float> out(buffer);
  for (float& x : out) x -= kOffset;
  return out;
}

size_t a2a_count(int from, int to) { return static_cast<size_t>((from + 2 * to) % 3); }  // some pairs send none
float a2a_value(int from, int to, size_t k) { return static_cast<float>(from * 100 + to * 10 + static_cast<int>(k)); }

struct Failures {
  std::vector<std::string> what;
  void expect(bool ok, const std::string& message) {
    if (!ok) what.push_back(message);
  }
};

int check() {
  int world_size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const MpiModelLayout layout(/*tp=*/world_size, /*ep=*/1);  // the whole world is one tensor-parallel group
  Communicator& host = *layout.groups().tensor;
  auto staging = std::make_unique<OffsetMemory>();
  OffsetMemory& memory = *staging;
  StagedCommunicator comm(host, std::move(staging));
  Failures f;
  f.expect(comm.rank() == rank && comm.size() == world_size, "rank and size are the host group's");

  // all_reduce_sum: rank r holds (r + 1) · (i mod 97); the sum is Σ(r + 1) · (i mod 97).
  const size_t n = 1001;
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 97));
  std::vector<float> values = stored(mine);
  comm.all_reduce_sum(values.data(), n);
  const int ranks_sum = world_size * (world_size + 1) / 2;
  const std::vector<float> reduced = read(values);
  bool reduce_ok = true;
  for (size_t i = 0; i < n; ++i) reduce_ok &= reduced[i] == static_cast<float>(ranks_sum * static_cast<int>(i % 97));
  f.expect(reduce_ok, "all_reduce_sum gives the sum over ranks");
  f.expect(memory.floats_to_host == n && memory.floats_to_buffer == n, "all_reduce_sum stages n floats each way");
  comm.all_reduce_sum(nullptr, 0);  // nothing to sum: still collective, nothing staged
  f.expect(memory.floats_to_host == n && memory.floats_to_buffer == n, "an empty all_reduce_sum stages nothing");

  // exchange_counts, then all_to_all_v with uneven counts, some zero.
  std::vector<size_t> send_counts(static_cast<size_t>(world_size)), recv_counts(static_cast<size_t>(world_size));
  std::vector<float> send;
  for (int p = 0; p < world_size; ++p) {
    send_counts[static_cast<size_t>(p)] = a2a_count(rank, p);
    for (size_t k = 0; k < a2a_count(rank, p); ++k) send.push_back(a2a_value(rank, p, k));
  }
  comm.exchange_counts(send_counts.data(), recv_counts.data());
  bool counts_ok = true;
  for (int p = 0; p < world_size; ++p) counts_ok &= recv_counts[static_cast<size_t>(p)] == a2a_count(p, rank);
  f.expect(counts_ok, "exchange_counts delivers every rank's send count for this rank");
  const size_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
  std::vector<float> send_buffer = stored(send), recv_buffer(received, -1.0f);
  const size_t before_host = memory.floats_to_host, before_buffer = memory.floats_to_buffer;
  comm.all_to_all_v(send_buffer.data(), send_counts.data(), recv_buffer.data(), recv_counts.data());
  std::vector<float> expected;
  for (int p = 0; p < world_size; ++p)
    for (size_t k = 0; k < a2a_count(p, rank); ++k) expected.push_back(a2a_value(p, rank, k));
  f.expect(read(recv_buffer) == expected, "all_to_all_v delivers every rank's values in rank order");
  f.expect(memory.floats_to_host - before_host == send.size() && memory.floats_to_buffer - before_buffer == received,
           "all_to_all_v stages what it sends out and what it receives back");

  // all_gather_v: rank r contributes r + 1 copies of 7r.
  std::vector<size_t> gather_counts(static_cast<size_t>(world_size));
  for (int p = 0; p < world_size; ++p) gather_counts[static_cast<size_t>(p)] = static_cast<size_t>(p + 1);
  std::vector<float> contribution = stored(std::vector<float>(static_cast<size_t>(rank + 1), 7.0f * rank));
  std::vector<float> gathered(std::accumulate(gather_counts.begin(), gather_counts.end(), size_t{0}));
  comm.all_gather_v(contribution.data(), contribution.size(), gathered.data(), gather_counts.data());
  std::vector<float> all;
  for (int p = 0; p < world_size; ++p) all.insert(all.end(), static_cast<size_t>(p + 1), 7.0f * p);
  f.expect(read(gathered) == all, "all_gather_v concatenates every rank's values in rank order");

  // reduce_scatter_v, uneven blocks (one empty): rank r sends (r + 1) · (k + 1) at index k; rank p
  // receives its block of the sums Σ(r + 1) · (k + 1). Over MPI directly, then through the staging.
  std::vector<size_t> block_counts(static_cast<size_t>(world_size));
  for (int p = 0; p < world_size; ++p)
    block_counts[static_cast<size_t>(p)] = p % 3 == 1 ? 0 : static_cast<size_t>(p + 2);
  const size_t blocks = std::accumulate(block_counts.begin(), block_counts.end(), size_t{0});
  size_t my_first = 0;
  for (int p = 0; p < rank; ++p) my_first += block_counts[static_cast<size_t>(p)];
  const size_t my_count = block_counts[static_cast<size_t>(rank)];
  std::vector<float> addends(blocks), my_sums(my_count);
  for (size_t k = 0; k < blocks; ++k) addends[k] = static_cast<float>((rank + 1) * static_cast<int>(k + 1));
  for (size_t k = 0; k < my_count; ++k)
    my_sums[k] = static_cast<float>(ranks_sum * static_cast<int>(my_first + k + 1));
  std::vector<float> host_block(my_count, -1.0f);
  host.reduce_scatter_v(addends.data(), host_block.data(), block_counts.data());
  f.expect(host_block == my_sums, "MPI reduce_scatter_v gives each rank its block of the sums");
  std::vector<float> staged_addends = stored(addends), staged_block(my_count, -1.0f);
  const size_t host_before = memory.floats_to_host, buffer_before = memory.floats_to_buffer;
  comm.reduce_scatter_v(staged_addends.data(), staged_block.data(), block_counts.data());
  f.expect(read(staged_block) == my_sums, "staged reduce_scatter_v gives each rank its block of the sums");
  f.expect(
      memory.floats_to_host - host_before == blocks && memory.floats_to_buffer - buffer_before == my_count,
      "reduce_scatter_v stages every block out and this rank's block back");

  if (rank == 0) {
    if (f.what.empty())
      std::cout << "staged communicator: ok over " << world_size << " ranks" << std::endl;
    for (const auto& w : f.what) std::cout << "staged communicator: FAILED: " << w << std::endl;
  }
  int failed = f.what.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}

}  // namespace

int main(int argc, char** argv) {
  return mlpt_test::mpi_check_main(argc, argv, "staged_communicator_check", [](int, char**) { return check(); });
}
