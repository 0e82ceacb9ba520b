// The distributed run's messages between the coordinator and the other ranks (trainer ranks,
// rollout workers): a kind ("episode", "trajectory", "train", "refit", ...) and a JSON body, sent
// as CBOR over a communicator of their own. Built only with MPI (core/dist/mpi/).
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace mlpt::dist {

struct RunMessage {
  int from = -1;
  std::string kind;
  nlohmann::json body;
};

class MpiChannel {
 public:
  static constexpr int kAnyRank = -1;
  // Collective over MPI_COMM_WORLD: every process makes it at the same point of its start.
  MpiChannel();

  // Thread-safe. Returns once the message is on its way (a large one: once the receiver takes it).
  void send(int to, const std::string& kind, const nlohmann::json& body = nlohmann::json::object());
  // The next message from `from` (kAnyRank: any) if one has arrived. Thread-safe.
  std::optional<RunMessage> poll(int from = kAnyRank);
  // Waits for the next message; throws MLPT_DEADLINE_EXCEEDED naming `what` after `timeout_ms`
  // (< 0: no limit) and MLPT_CANCELLED soon after `stop` is set.
  RunMessage receive(int from, int64_t timeout_ms, const std::atomic<bool>& stop, const std::string& what);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace mlpt::dist
