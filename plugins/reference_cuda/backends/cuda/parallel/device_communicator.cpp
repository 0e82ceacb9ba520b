#include "backends/cuda/parallel/device_communicator.hpp"

#include <algorithm>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/parallel/host_staging.hpp"
#ifdef MLPT_REFERENCE_NCCL
#include "backends/cuda/parallel/nccl_communicator.hpp"
#endif

namespace mlpt::ref::cuda {

namespace {

// Bytes travel as floats (0..255: exact in a sum), as the Communicator carries floats only.
std::vector<float> as_floats(const unsigned char* bytes, size_t n) {
  return std::vector<float>(bytes, bytes + n);
}

// Whether the ranks of `group` all run on different GPUs.
bool each_rank_has_its_own_gpu(Communicator& group) {
  int device = 0;
  check(cudaGetDevice(&device), "device communicator: cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "device communicator: cudaGetDeviceProperties");
  const size_t n = sizeof(prop.uuid.bytes);
  const std::vector<float> mine = as_floats(reinterpret_cast<const unsigned char*>(prop.uuid.bytes), n);
  const std::vector<size_t> counts(size_t(group.size()), n);
  std::vector<float> all(n * size_t(group.size()));
  group.all_gather_v(mine.data(), n, all.data(), counts.data());
  for (int a = 0; a < group.size(); ++a)
    for (int b = a + 1; b < group.size(); ++b)
      if (std::equal(all.begin() + a * n, all.begin() + (a + 1) * n, all.begin() + b * n)) return false;
  return true;
}

}  // namespace

DeviceCommunicator device_communicator(Communicator& host_group, cudaStream_t stream) {
  const bool own_gpus = each_rank_has_its_own_gpu(host_group);  // collective: every rank asks
#ifdef MLPT_REFERENCE_NCCL
  if (own_gpus) {
    // Rank 0's NCCL identity to every rank: the others add zeros to it.
    NcclCommunicator::Id id{};
    if (host_group.rank() == 0) id = NcclCommunicator::new_id();
    std::vector<float> shared = as_floats(reinterpret_cast<const unsigned char*>(id.data()), id.size());
    host_group.all_reduce_sum(shared.data(), shared.size());
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(static_cast<unsigned char>(shared[i]));
    return {std::make_unique<NcclCommunicator>(id, host_group.rank(), host_group.size(), stream), "nccl"};
  }
#else
  (void)own_gpus;
#endif
  return {host_staged_communicator(host_group, stream), "staged"};
}

}  // namespace mlpt::ref::cuda
