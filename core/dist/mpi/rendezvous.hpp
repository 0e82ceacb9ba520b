// The run's key-value store and barrier over MPI (the Rendezvous of core/plugin/rendezvous.hpp for
// a run started by mpirun or srun): no service of our own, no port. Rank 0 keeps the store: a
// thread there answers requests that every process (rank 0 included) sends it over a communicator
// of their own, so plugins' keys never meet any other MPI traffic. Built only with MPI (core/dist/mpi/).
//
// Waiting (get, barrier) polls the reply so that a timeout or the run's cancellation ends it: the
// keeper is then told to forget the request, and the waiter drains what it had already sent.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include <mpi.h>

#include "core/plugin/rendezvous.hpp"

namespace mlpt::dist {

class MpiRendezvous final : public plugin::Rendezvous {
 public:
  // Collective over MPI_COMM_WORLD: every process constructs it at start. `role` is what this
  // process does in the run (core/dist/placement.hpp).
  explicit MpiRendezvous(mlpt_process_role role);
  // Rank 0 keeps serving until every other rank has left (or 10 s have passed after its own leave).
  ~MpiRendezvous() override;

  const mlpt_process_info& process() const override { return process_; }
  void put(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, int64_t timeout_ms, const std::atomic<bool>& cancelled) override;
  void barrier(const std::string& name, int64_t timeout_ms, const std::atomic<bool>& cancelled) override;

 private:
  enum class Op : char;
  struct Reply {
    char status;
    std::string value;
  };
  Reply call(Op op, const std::string& key, const std::string& value, int64_t timeout_ms, const std::atomic<bool>* cancelled,
             const std::string& what);
  int send_request(Op op, int reply_tag, const std::string& key, const std::string& value);
  void keep_store();  // rank 0's keeper thread

  mlpt_process_info process_{};
  MPI_Comm requests_ = MPI_COMM_NULL, replies_ = MPI_COMM_NULL;
  std::atomic<int> next_tag_{0};
  std::atomic<bool> leaving_{false};
  std::thread keeper_;
};

}  // namespace mlpt::dist
