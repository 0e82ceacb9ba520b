// The receiving process of the NCCL GPU test: receives one version on CUDA device <device>, copies
// it to the host and dumps it (transport_support.hpp's format), prints "received <v>".
//   transport_nccl_peer <config> <timeout_ms> <dump_path>
#include <cuda_runtime.h>

#include <cstdio>

#include "transport_support.hpp"

using namespace transport_test;

int main(int argc, char** argv) {
  if (argc != 4) return 64;
  try {
    Loaded nccl("nccl");
    Endpoint rx(nccl, MLPT_TRANSPORT_RECEIVER, argv[1]);
    Received r = rx.receive(1, std::stoll(argv[2]));
    // Stage to host memory, then dump with the shared writer.
    std::vector<std::vector<uint8_t>> host(r.count);
    std::vector<mlpt_named_tensor> views(r.tensors, r.tensors + r.count);
    for (size_t i = 0; i < r.count; ++i) {
      host[i].resize(mlpt::sdk::nbytes(views[i].tensor));
      if (!host[i].empty() && cudaMemcpy(host[i].data(), views[i].tensor.data, host[i].size(), cudaMemcpyDeviceToHost) != cudaSuccess)
        throw mlpt::Error(MLPT_INTERNAL, "cudaMemcpy failed");
      views[i].tensor.data = host[i].data();
      views[i].tensor.device = {kDLCPU, 0};
    }
    write_dump(argv[3], views.data(), views.size());
    rx.release(r.version);
    std::printf("received %llu\n", static_cast<unsigned long long>(r.version));
    return 0;
  } catch (const mlpt::Error& e) {
    std::printf("error %d %s\n", static_cast<int>(e.code()), e.what());
    return 2;
  }
}
