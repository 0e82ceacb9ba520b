// What the device components (trainer/device_trainer.hpp, engine/device_backend.hpp) need of a
// machine besides the ops: which device a thread computes on, collectives over device buffers,
// how exported tensors are described and how other components' tensors are read.
// backends/cuda/cuda_platform.hpp implements it for one GPU; HostPlatform below is the CPU's (host
// memory is the device memory), on which the GPU components' code runs in CI.
#pragma once

#include <dlpack/dlpack.h>

#include <memory>

#include "mlpt/mlpt.h"
#include "model/parallel/communicator.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref {

class DevicePlatform {
 public:
  virtual ~DevicePlatform() = default;
  virtual Ops& ops() = 0;
  // Makes this platform's device current for the calling thread (a component is called from
  // threads it did not make).
  virtual void bind_thread() = 0;
  // A communicator over `host_group`'s ranks that sums and exchanges this platform's buffers
  // (collective: every rank of host_group calls it). host_group must outlive it.
  virtual std::unique_ptr<Communicator> device_group(Communicator& host_group, std::string& kind) = 0;
  // Where exported tensors live, and what a reader waits for before reading them.
  virtual DLDevice dl_device() const = 0;
  virtual void* stream() const = 0;  // MLPT_READY_ON_RETURN's stream (NULL on the host)
  // Makes this platform's queued work wait for another component's `ready` (mlpt.h, Device memory).
  virtual void wait_for(const mlpt_device_ready& ready) = 0;
  // Copies `bytes` of a tensor in memory this platform reads directly (its device memory, beyond
  // host memory) to `dst` in its memory; false when `t` is not in such memory (the caller converts
  // host tensors itself).
  virtual bool copy_device_tensor(const DLTensor& t, size_t bytes, void* dst) = 0;
  // Whether an engine on this platform runs its decode steps through device_model/decode_graphs
  // (the CUDA platform's cuda_graphs = "decode").
  virtual bool decode_graphs() const { return false; }
};

// The host as the device: Ops on host memory (bf16 emulated), collectives straight over the host
// group (which works on host memory already). With `decode_graphs` an engine runs its decode steps
// through device_model/decode_graphs as the GPU does, unrecorded (the host has no recorder).
class HostPlatform final : public DevicePlatform {
 public:
  explicit HostPlatform(std::unique_ptr<Ops> ops, bool decode_graphs = false)
      : ops_(std::move(ops)), decode_graphs_(decode_graphs) {}
  Ops& ops() override { return *ops_; }
  void bind_thread() override {}
  std::unique_ptr<Communicator> device_group(Communicator& host_group, std::string& kind) override {
    kind = "host";
    return std::make_unique<Borrowed>(host_group);
  }
  DLDevice dl_device() const override { return DLDevice{kDLCPU, 0}; }
  void* stream() const override { return nullptr; }
  void wait_for(const mlpt_device_ready&) override {}
  bool copy_device_tensor(const DLTensor&, size_t, void*) override { return false; }
  bool decode_graphs() const override { return decode_graphs_; }

 private:
  // host_group itself, not owned.
  class Borrowed final : public Communicator {
   public:
    explicit Borrowed(Communicator& g) : g_(g) {}
    int rank() const override { return g_.rank(); }
    int size() const override { return g_.size(); }
    void all_reduce_sum(float* v, size_t n) override { g_.all_reduce_sum(v, n); }
    void all_to_all_v(const float* s, const size_t* sc, float* r, const size_t* rc) override {
      g_.all_to_all_v(s, sc, r, rc);
    }
    void all_gather_v(const float* s, size_t sc, float* r, const size_t* rc) override {
      g_.all_gather_v(s, sc, r, rc);
    }
    void reduce_scatter_v(const float* s, float* r, const size_t* rc) override {
      g_.reduce_scatter_v(s, r, rc);
    }
    void exchange_counts(const size_t* s, size_t* r) override { g_.exchange_counts(s, r); }
    void send(const float* v, size_t n, int peer) override { g_.send(v, n, peer); }
    void recv(float* v, size_t n, int peer) override { g_.recv(v, n, peer); }
    void send_recv(const float* s, size_t sn, int to, float* r, size_t rn, int from) override {
      g_.send_recv(s, sn, to, r, rn, from);
    }

   private:
    Communicator& g_;
  };
  std::unique_ptr<Ops> ops_;
  bool decode_graphs_;
};

}  // namespace mlpt::ref
