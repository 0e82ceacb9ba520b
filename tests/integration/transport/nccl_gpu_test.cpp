// The NCCL transport on real GPUs: rank 0 (this process, device 0) broadcasts the mixed tensor set to
// a receiver process on device 1; the receiver's copy must equal the original bit for bit. Registered
// with ctest only when MLPT_GPU_TESTS=1 at configure time (scripts/gpu-check.sh). NCCL refuses two
// ranks on one device, so fewer than two GPUs is a failure here, never a silent pass.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <filesystem>

#include "transport_support.hpp"

using namespace transport_test;

TEST_CASE("nccl: broadcast of CUDA tensors to another process is bitwise equal") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  INFO("this test needs 2 CUDA devices (NCCL refuses two ranks on one GPU); found " << devices);
  REQUIRE(devices >= 2);
  Loaded nccl("nccl");
  CHECK(nccl.caps()->supports_cuda == 1);
  int port = free_port();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  Endpoint tx(nccl, MLPT_TRANSPORT_SENDER, R"({"address": ")" + addr + R"(", "bucket_bytes": 262144, "device": 0})");
  auto dump = (std::filesystem::temp_directory_path() / ("mlpt_nccl_" + std::to_string(getpid()) + ".bin")).string();
  Child rx({NCCL_PEER_EXE, R"({"address": ")" + addr + R"(", "device": 1, "name": "gpu-engine"})", "60000", dump});

  auto set = mixed_tensors(3);
  std::vector<void*> device_memory;
  std::vector<mlpt_named_tensor> views = set.views;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  for (size_t i = 0; i < views.size(); ++i) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, std::max<size_t>(set.bytes[i].size(), 1)) == cudaSuccess);
    if (!set.bytes[i].empty()) REQUIRE(cudaMemcpy(p, set.bytes[i].data(), set.bytes[i].size(), cudaMemcpyHostToDevice) == cudaSuccess);
    views[i].tensor.data = p;
    views[i].tensor.device = {kDLCUDA, 0};
    device_memory.push_back(p);
  }
  tx.send(3, views, 60000);
  CHECK(rx.line(60000) == "received 3");
  CHECK(rx.wait(60000) == 0);
  CHECK(compare_dump(dump, set) == "");
  for (void* p : device_memory) cudaFree(p);
}
