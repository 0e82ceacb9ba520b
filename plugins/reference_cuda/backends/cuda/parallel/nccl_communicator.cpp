#include "backends/cuda/parallel/nccl_communicator.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda {

namespace {

void check_nccl(ncclResult_t rc, const char* what, ncclComm_t comm = nullptr) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string text = std::string("model parallel: ") + what + " failed: " + ncclGetErrorString(rc);
  if (const char* last = comm ? ncclGetLastError(comm) : nullptr; last && *last) text += std::string(" (") + last + ")";
  throw sdk::Error(MLPT_UNAVAILABLE, text);
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw sdk::Error(MLPT_UNAVAILABLE, std::string("model parallel: ") + what + " failed: " + cudaGetErrorString(rc));
}

std::vector<size_t> offsets(const size_t* counts, int n) {
  std::vector<size_t> out(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i) + 1] = out[static_cast<size_t>(i)] + counts[i];
  return out;
}

// Ends an NCCL group call even when a send or receive inside it throws.
class GroupCall {
 public:
  explicit GroupCall(ncclComm_t comm) : comm_(comm) { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
  ~GroupCall() {
    if (open_) ncclGroupEnd();
  }
  void end() {
    open_ = false;
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_);
  }

 private:
  ncclComm_t comm_;
  bool open_ = true;
};

}  // namespace

NcclCommunicator::Id NcclCommunicator::new_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  Id out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclCommunicator::NcclCommunicator(const Id& id, int rank, int size, cudaStream_t stream)
    : stream_(stream), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model parallel: NCCL rank " + std::to_string(rank) + " of a group of " + std::to_string(size));
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), sizeof(unique));
  check_nccl(ncclCommInitRank(&comm_, size, unique, rank), "ncclCommInitRank");
  check_cuda(cudaMalloc(&counts_, 2 * static_cast<size_t>(size) * sizeof(uint64_t)), "cudaMalloc (counts)");
}

NcclCommunicator::~NcclCommunicator() {
  cudaFree(counts_);
  if (comm_) ncclCommDestroy(comm_);
}

// NCCL reduces each element once and forwards the finished sum unchanged (ring and tree alike;
// NVIDIA/nccl#855), so every rank gets the same bits, as the interface promises.
void NcclCommunicator::all_reduce_sum(float* values, size_t count) {
  check_nccl(ncclAllReduce(values, values, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce", comm_);
}

void NcclCommunicator::all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) {
  const auto so = offsets(send_counts, size_), ro = offsets(recv_counts, size_);
  GroupCall group(comm_);
  for (int p = 0; p < size_; ++p) {
    const auto i = static_cast<size_t>(p);
    if (send_counts[p]) check_nccl(ncclSend(send + so[i], send_counts[p], ncclFloat32, p, comm_, stream_), "ncclSend", comm_);
    if (recv_counts[p]) check_nccl(ncclRecv(recv + ro[i], recv_counts[p], ncclFloat32, p, comm_, stream_), "ncclRecv", comm_);
  }
  group.end();
}

void NcclCommunicator::all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) {
  if (recv_counts[rank_] != send_count)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model parallel: all-gather of " + std::to_string(send_count) + " floats from rank " +
                                                std::to_string(rank_) + ", but recv_counts says " + std::to_string(recv_counts[rank_]));
  const auto ro = offsets(recv_counts, size_);
  GroupCall group(comm_);
  for (int p = 0; p < size_; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p == rank_) continue;
    if (send_count) check_nccl(ncclSend(send, send_count, ncclFloat32, p, comm_, stream_), "ncclSend", comm_);
    if (recv_counts[p]) check_nccl(ncclRecv(recv + ro[i], recv_counts[p], ncclFloat32, p, comm_, stream_), "ncclRecv", comm_);
  }
  group.end();
  check_cuda(cudaMemcpyAsync(recv + ro[static_cast<size_t>(rank_)], send, send_count * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
             "cudaMemcpyAsync (own part)");
}

void NcclCommunicator::reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) {
  bool even = true;
  for (int p = 1; p < size_; ++p) even &= recv_counts[p] == recv_counts[0];
  if (even)
    return check_nccl(ncclReduceScatter(send, recv, recv_counts[0], ncclFloat32, ncclSum, comm_, stream_),
                      "ncclReduceScatter", comm_);
  const auto so = offsets(recv_counts, size_);
  GroupCall group(comm_);
  for (int p = 0; p < size_; ++p)
    if (recv_counts[p])
      check_nccl(ncclReduce(send + so[static_cast<size_t>(p)], p == rank_ ? recv : nullptr, recv_counts[p],
                            ncclFloat32, ncclSum, p, comm_, stream_),
                 "ncclReduce", comm_);
  group.end();
}

void NcclCommunicator::exchange_counts(const size_t* send_counts, size_t* recv_counts) {
  static_assert(sizeof(size_t) == sizeof(uint64_t));
  auto* out = static_cast<uint64_t*>(counts_);
  auto* in = out + size_;
  const size_t bytes = static_cast<size_t>(size_) * sizeof(uint64_t);
  check_cuda(cudaMemcpyAsync(out, send_counts, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (counts)");
  {
    GroupCall group(comm_);
    for (int p = 0; p < size_; ++p) {
      check_nccl(ncclSend(out + p, 1, ncclUint64, p, comm_, stream_), "ncclSend (counts)", comm_);
      check_nccl(ncclRecv(in + p, 1, ncclUint64, p, comm_, stream_), "ncclRecv (counts)", comm_);
    }
    group.end();
  }
  check_cuda(cudaMemcpyAsync(recv_counts, in, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (counts back)");
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (counts)");
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
  check_nccl(async, "an earlier collective", comm_);
}

void NcclCommunicator::send(const float* values, size_t count, int peer) {
  check_nccl(ncclSend(values, count, ncclFloat32, peer, comm_, stream_), "ncclSend", comm_);
}

void NcclCommunicator::recv(float* values, size_t count, int peer) {
  check_nccl(ncclRecv(values, count, ncclFloat32, peer, comm_, stream_), "ncclRecv", comm_);
}

void NcclCommunicator::send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) {
  GroupCall group(comm_);  // both at once: neither waits for the other to be posted
  check_nccl(ncclSend(send, send_count, ncclFloat32, to, comm_, stream_), "ncclSend", comm_);
  check_nccl(ncclRecv(recv, recv_count, ncclFloat32, from, comm_, stream_), "ncclRecv", comm_);
  group.end();
}

}  // namespace mlpt::ref::cuda
