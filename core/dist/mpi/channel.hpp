// The distributed run's messages between the coordinator and the other ranks (trainer ranks,
// rollout workers): a kind ("episode", "trajectory", "train", "refit", ...) and a JSON body, sent
// as CBOR over a communicator of their own. Built only with MPI (core/dist/mpi/).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  // The same, but gives up (returns false) once `abandon` says so before the receiver took the
  // message: a large one waits for a receiver that may have died. An abandoned message stays with
  // MPI, its bytes kept until the channel ends, and may never arrive.
  bool send(int to, const std::string& kind, const nlohmann::json& body,
            const std::function<bool()>& abandon);
  // The next message from `from` (kAnyRank: any) if one has arrived. Thread-safe.
  std::optional<RunMessage> poll(int from = kAnyRank);
  // Notices: messages of their own (never returned by poll or receive), read by a thread of their
  // own while the rank's other threads may be held anywhere: the coordinator's "leave" to every rank
  // of a dropped rollout worker that is an engine group (heartbeat.hpp). Sent as send(..., abandon).
  bool send_notice(int to, const std::string& kind, const std::function<bool()>& abandon);
  std::optional<RunMessage> poll_notice(int from);
  // Waits for the next message; throws MLPT_DEADLINE_EXCEEDED naming `what` after `timeout_ms`
  // (< 0: no limit) and MLPT_CANCELLED soon after `stop` is set.
  RunMessage receive(int from, int64_t timeout_ms, const std::atomic<bool>& stop, const std::string& what);

 private:
  std::vector<uint8_t> encode(const std::string& kind, const nlohmann::json& body) const;
  bool send_tagged(int tag, int to, const std::string& kind, const nlohmann::json& body, const std::function<bool()>& abandon);
  std::optional<RunMessage> poll_tagged(int tag, int from);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex abandoned_mutex_;
  std::vector<std::pair<MPI_Request, std::vector<uint8_t>>> abandoned_;
};

}  // namespace mlpt::dist
