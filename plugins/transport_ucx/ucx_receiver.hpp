// The receiving side of the UCX transport (an engine). It connects to the sender's address (and
// keeps retrying for timeout_ms while nobody listens yet), then a progress thread lands every
// version the sender streams into a buffer of its own, checks it and acknowledges it, whether or
// not receive() is being called. receive() hands out the newest complete version >= min_version.
//
// Buffers: one held by the caller (until release), one newest-complete, one being filled; they are
// recycled, so steady state allocates nothing.
//
// Sender ranks: it connects to every rank of the sender group (one worker; the tag names the rank)
// and a version is complete once every rank's part of it landed. A receiver that wants a layout, or
// has several ranks to hear from, asks each rank for its shard boxes on its first receive, plans
// which pieces to pull from which rank (shard_pulls.hpp) and tells the ranks; they send only those.
// It lands those pieces straight into the layout it wants (landing_plan.hpp), which receive() then
// returns as it is.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "mlpt/transport.h"
#include "ucx_common.hpp"

namespace mlpt::transport::ucx {

class UcxReceiver {
 public:
  // `addresses`: where sender rank r listens, for every rank of the group.
  UcxReceiver(Config config, std::vector<std::string> addresses);
  ~UcxReceiver();
  UcxReceiver(const UcxReceiver&) = delete;
  UcxReceiver& operator=(const UcxReceiver&) = delete;

  void receive(mlpt_transport_receive_args& args);
  void release(uint64_t version);

  struct Landed;     // one sender rank's part of a version
  struct Assembled;  // one complete version from every rank, as handed out
  class Engine;

 private:
  // Asks the ranks for their shard boxes and tells them the pieces of `wanted` to send, unless the
  // pulls in place already are for it. Throws as receive documents (shard_pulls.hpp, plan_pulls).
  void request_layout(const mlpt_transport_receive_args& args, std::unique_lock<std::mutex>& lock);

  Config config_;
  size_t ranks_ = 1;
  std::vector<uint8_t> requested_;  // the wanted layout the pulls in place are for
  uint64_t request_ = 0;            // their id
  bool asked_whole_ = false;        // the one sender rank was asked for its tensors as they are
  ucp_context_h context_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::thread thread_;
};

}  // namespace mlpt::transport::ucx
