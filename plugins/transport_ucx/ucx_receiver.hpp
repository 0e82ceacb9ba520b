// The receiving side of the UCX transport (an engine). It connects to the sender's address (and
// keeps retrying for timeout_ms while nobody listens yet), then a progress thread lands every
// version the sender streams into a buffer of its own, checks it and acknowledges it, whether or
// not receive() is being called. receive() hands out the newest complete version >= min_version.
//
// Buffers: one held by the caller (until release), one newest-complete, one being filled; they are
// recycled, so steady state allocates nothing.
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
  explicit UcxReceiver(Config config);
  ~UcxReceiver();
  UcxReceiver(const UcxReceiver&) = delete;
  UcxReceiver& operator=(const UcxReceiver&) = delete;

  void receive(mlpt_transport_receive_args& args);
  void release(uint64_t version);

  struct Landed;  // one complete version, as handed out
  class Engine;

 private:
  Config config_;
  ucp_context_h context_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::thread thread_;
};

}  // namespace mlpt::transport::ucx
