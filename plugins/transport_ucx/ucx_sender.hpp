// The sending side of the UCX transport (the trainer). It listens (ucp_listener) at the configured
// address (port 0: one the system picks); receivers connect. One progress thread owns the UCX worker; send() hands it a job and
// waits for the outcome, never longer than its timeout (plus a one-second backstop should UCX
// itself stall).
//
// Protocol per receiver and version v (see README.md): metadata (tag, may be rendezvous), then every
// bucket as its own tagged message straight from the tensor's memory (direct) or from a packed
// staging copy, then a commit carrying the per-bucket xxhash64 once all bucket sends completed
// locally; the receiver answers with an ack (ok, or data loss naming the bucket).
//
// Lifetime: the sender reads version v's tensors from send(v) until send(v+1) is entered or the
// endpoint is destroyed (late receivers are served from them), the ABI's rule for zero-copy
// transports. A stream of v still in flight when send(v+1) starts is aborted, never committed.
//
// Sender ranks: one of `ranks` endpoints of a trainer group, each publishing its own shards. A
// receiver asks each rank for its shard boxes (offer) and tells it which boxes it wants (pulls,
// shard_pulls.hpp); the rank then streams that receiver just those pieces of every version, cut
// from its own shards. A single rank (ranks == 1) also streams everything it holds to a receiver
// that has not asked (the behaviour before sender ranks); several ranks wait for the pulls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "mlpt/transport.h"
#include "ucx_common.hpp"

namespace mlpt::transport::ucx {

class UcxSender {
 public:
  UcxSender(Config config, uint32_t rank, uint32_t ranks);
  ~UcxSender();
  UcxSender(const UcxSender&) = delete;
  UcxSender& operator=(const UcxSender&) = delete;

  void send(const mlpt_transport_send_args& args);
  // host:port where receivers connect (the port the listener got when the config said 0).
  std::string reachable_address() const;

  struct Version;
  struct Peer;
  struct Op;
  struct Job;
  class Engine;  // the progress thread's state

 private:
  Config config_;
  ucp_context_h context_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::thread thread_;
  uint64_t last_version_ = 0;
  uint32_t rank_ = 0, ranks_ = 1;
  std::string last_boxes_;  // the shard boxes of the previous send: a rank keeps its layout
};

}  // namespace mlpt::transport::ucx
