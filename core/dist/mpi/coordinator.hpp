// The coordinator's link to the other ranks of a distributed run. It hands episodes to the rollout
// workers by free capacity and collects their trajectories, sends each trainer rank its share of
// the step's batch with the global token count (one share per data-parallel replica of the trainer,
// the same bytes to every rank of a replica), and runs the refit: the trainer ranks of replica 0
// stream the new version through the transport, each its own shards, while every worker receives it
// into its paused engine (the bytes never pass through here). One thread reads every message and
// watches the heartbeats: a trainer rank that reports a failure, sends no heartbeat for
// `heartbeat_timeout_s` or does not answer within `answer_timeout_s` fails the run with a message
// naming the rank. A rollout worker that does so once serving is lost instead: its episodes in
// flight are back-filled (done with an MLPT_UNAVAILABLE error naming it), nothing is sent to it
// again, and the run goes on with the others until none is left. A worker that is an engine group
// ([placement] engine_ranks) is lost with any of its ranks; its ranks are then told to leave at
// once (heartbeat.hpp). A refit broken mid-way names the end whose heartbeat stopped (below).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/components/instances.hpp"
#include "core/dist/mpi/channel.hpp"
#include "core/dist/placement.hpp"
#include "core/dist/trainer_replicas.hpp"
#include "core/run/component_placement.hpp"

namespace mlpt::dist {

class Coordinator final : public run::ComponentPlacement {
 public:
  // Waits until every rank has said it is ready (its components are loaded) and checks the trainer
  // ranks' data-parallel replicas (dist/trainer_replicas.hpp).
  Coordinator(MpiChannel& channel, const Placement& placement, const PlacementSettings& settings);
  ~Coordinator() override;  // tells every rank to stop and waits for the episodes in flight
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Episodes, on the worker with the most free places; `start` blocks while every worker is full.
  void start(rollout::EpisodeRequest request, rollout::EpisodeDone done) override;
  void wait_idle() override;
  int64_t in_flight() const override;
  std::map<std::string, int64_t> in_flight_by_worker() const override;  // a lost worker: 0
  void cancel(const std::vector<uint64_t>& ids) override;

  // One collective step of the trainer group; returns group rank 0's metrics.
  std::vector<components::Metric> train_step(const mlpt_train_batch& batch, uint64_t* new_version) override;
  // The trainer ranks of replica 0 send `version`, every worker loads it; returns when all have.
  refit::RefitStats deliver_weights(uint64_t version) override;
  bool can_save_state() const override { return can_save_state_; }
  bool record_routed_experts() const override { return record_routed_experts_; }
  mlpt_engine_model_info model_info() const override { return model_; }
  int32_t end_of_turn_token() const override { return end_of_turn_token_; }
  void save_state(const std::string& dir) override;
  uint64_t load_state(const std::string& dir) override;  // returns the version loaded (not yet published)

  // Ends every rank's loop (the destructor does it too); the episodes in flight are cancelled.
  void stop();
  // A trainer rank reported a failure or did not answer in time: it may never finish MPI, so the
  // job ends with MPI_Abort once the run is reported.
  bool run_failed() const;
  // That, or a rollout worker was lost: under mpirun --enable-recovery (where a dead rank does not
  // end the job) no rank may call MPI_Finalize, which would wait for the lost one forever.
  bool any_rank_lost() const;
  std::vector<std::string> lost_workers() const override;

 private:
  struct Episode {
    int worker;
    rollout::EpisodeRequest request;
    rollout::EpisodeDone done;
  };
  void read_messages();
  // The next answer of `rank`; nothing when it is a rollout worker that is lost meanwhile.
  std::optional<RunMessage> answer(int rank, const std::string& kind);
  void throw_if_failed();
  void reported(int episodes);  // their `done` has returned
  // Any message is a sign of life; ranks silent for longer than the heartbeat timeout are lost.
  void check_heartbeats();
  // A rank that failed (`by_report`: it said so) or went silent: a rollout worker that has served is
  // dropped, anything else fails the run.
  void lose(int rank, const std::string& why, bool by_report);
  bool lost(int rank) const;  // callers hold mutex_
  void send_unless_lost(int rank, const std::string& kind,
                        const nlohmann::json& body = nlohmann::json::object());
  // To trainer rank `g`; gives up, failing the run, once it has failed or after answer_timeout_s.
  void send_to_trainer(int g, const std::string& kind, const nlohmann::json& body);

  MpiChannel& channel_;
  const Placement& placement_;
  const double answer_timeout_s_, heartbeat_timeout_s_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, std::deque<RunMessage>> answers_;
  std::map<uint64_t, Episode> episodes_;
  std::vector<int64_t> capacity_, load_;   // per rollout worker
  std::vector<bool> serving_, lost_;       // per rollout worker: said it is ready; dropped
  std::vector<std::string> lost_workers_;  // "rollout worker N (rank R): why", in the order lost
  std::map<int, std::chrono::steady_clock::time_point>
      last_heard_;     // per rank, read by the reader thread only
  int reporting_ = 0;  // episodes whose `done` is running
  std::optional<std::string> failure_;
  // A refit's failure shows on both ends, and the run must name the end that caused it: a rank that
  // died or hangs (its heartbeat stops), not the ranks that report their transfer broke. So while a
  // refit's senders have not answered, reports do not fail the run at once. Losing the last rollout
  // worker by their reports waits for the senders' answers (a trainer rank that died mid-refit is
  // named at its heartbeat's timeout); a trainer rank's report waits a heartbeat timeout (workers
  // that died mid-refit are named at theirs), then fails the run.
  bool senders_answering_ = false;
  std::optional<std::string> last_worker_lost_;  // by reports, while the senders have not answered
  struct SenderReport {
    int rank;
    std::string message;
    std::chrono::steady_clock::time_point at;
  };
  std::optional<SenderReport> sender_report_;  // a trainer rank's, while the senders have not answered
  bool can_save_state_ = true, record_routed_experts_ = false, stopped_ = false;
  std::optional<TrainerReplicas> replicas_;  // which share each trainer rank trains, who publishes
  mlpt_engine_model_info model_{};
  int32_t end_of_turn_token_ = 0;
  std::atomic<bool> reading_{true};
  std::thread reader_;
};

}  // namespace mlpt::dist
