#include "core/dist/mpi/trainer_rank.hpp"

#include <memory>

#include "core/components/instances.hpp"
#include "core/dist/mpi/rank_failure.hpp"
#include "core/dist/run_messages.hpp"
#include "core/dist/trainer_replicas.hpp"
#include "core/error.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/weight_route.hpp"
#include "core/run/step_record.hpp"
#include "core/run/trainer_settings.hpp"
#include "core/run/weight_refit.hpp"

namespace mlpt::dist {

namespace {
constexpr int64_t kStartTimeoutMs = 600000;  // the trainer ranks create their trainers within minutes of each other

// Every trainer rank's data-parallel replica, as each put it in the run's key-value store: each
// rank works out the same replicas (and which of them publish) without asking the coordinator.
TrainerReplicas exchange_replicas(plugin::HostServices& host, const Placement& placement, int group_rank,
                                  const components::Trainer& trainer, const std::atomic<bool>& interrupted) {
  const auto mine = trainer.data_parallel();
  host.rendezvous().put("mlpt/run/trainer_replica/" + std::to_string(group_rank),
                        std::to_string(mine.rank) + " " + std::to_string(mine.size));
  std::vector<TrainerReplicas::Replica> all;
  for (int g = 0; g < placement.trainer_ranks(); ++g) {
    const std::string v = host.rendezvous().get("mlpt/run/trainer_replica/" + std::to_string(g), kStartTimeoutMs, interrupted);
    const auto space = v.find(' ');
    all.push_back({std::stoi(v.substr(0, space)), std::stoi(v.substr(space + 1))});
  }
  return TrainerReplicas(std::move(all));
}
}  // namespace

RankEnd run_trainer_rank(const run::RunConfig& c, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                     const std::string& transport_group, const std::atomic<bool>& interrupted) {
  const int rank = host.rendezvous().process().rank;
  const int group_rank = placement.trainer_group_rank(rank);
  try {
    plugin::ComponentSet set(c.components, host);
    // The trainer and the engines are in different processes now.
    const auto& transport = set.component(MLPT_COMPONENT_TRANSPORT);
    if (const auto* caps = transport.caps<mlpt_transport_capabilities>(); !caps || !caps->cross_process)
      throw Error(MLPT_INVALID_ARGUMENT, c.file.string() + " [components.transport]: " + transport.name +
                                             " cannot carry weights between processes; a distributed run needs one that can (ucx, nccl)");
    const std::string group_name = "trainer";
    const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, group_rank,
                                     placement.trainer_ranks()};
    std::unique_ptr<components::Trainer> made;
    try {
      made = set.create(MLPT_COMPONENT_TRAINER, [&] {
        return std::make_unique<components::Trainer>(set.component(MLPT_COMPONENT_TRAINER),
                                                     run::trainer_settings(c, set.settings(MLPT_COMPONENT_TRAINER)), &group);
      });
    } catch (const Error& e) {  // e.g. a model-parallel layout the group's size does not divide into
      throw Error(e.code(), c.file.string() + " [components.trainer] as trainer rank " + std::to_string(group_rank) + " of " +
                                std::to_string(placement.trainer_ranks()) + " ([placement] trainer_ranks): " + e.what());
    }
    components::Trainer& trainer = *made;
    const TrainerReplicas replicas = exchange_replicas(host, placement, group_rank, trainer, interrupted);
    if (replicas.model_parallel() && c.run.refit == "sparse")
      throw Error(MLPT_INVALID_ARGUMENT, c.file.string() + " [run] refit = \"sparse\": the sparse transport compares whole tensors from one sender rank, and the "
                                             "trainer's ranks hold parts of one model (" + std::to_string(replicas.ranks_per_replica()) +
                                             " ranks per data-parallel replica); set refit = \"dense\"");
    // The ranks of replica 0 send each version to every rollout worker's receiver, each its own
    // shards as one sender rank of the transport (one rank: whole tensors).
    std::unique_ptr<components::Transport> sender;
    std::unique_ptr<refit::WeightSender> weights;  // over sender, as [run] refit says
    if (const int sender_rank = replicas.sender_rank(group_rank); sender_rank >= 0) {
      const std::string senders_name = transport_group + "/senders";
      const mlpt_component_group senders{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {senders_name.data(), senders_name.size()}, sender_rank,
                                         static_cast<int32_t>(replicas.publishers().size())};
      try {
        sender = set.make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_SENDER, transport_group,
                                                 replicas.model_parallel() ? &senders : nullptr);
      } catch (const Error& e) {
        throw Error(e.code(), c.file.string() + " [components.transport]: " + e.what());
      }
      weights = run::weight_sender(c.run, set, *sender, transport_group, run::sparse_refit_refused(c.run, trainer));
    }
    channel.send(Placement::coordinator(), "ready",
                 {{"can_save_state", trainer.can_save_state()},
                  {"supports_routing_replay", trainer.capabilities().supports_routing_replay != 0},
                  {"data_parallel", {{"rank", trainer.data_parallel().rank}, {"size", trainer.data_parallel().size}}}});
    DecodedBatch share;
    for (;;) {
      RunMessage m = channel.receive(Placement::coordinator(), -1, interrupted, placement.describe(rank) + " waiting for the coordinator");
      if (m.kind == "stop") return RankEnd{0, m.body.value("rank_lost", false)};
      if (m.kind == "train") {
        batch_from(m.body.at("share"), share);
        uint64_t version = 0;
        auto metrics = trainer.train_step(share.abi, &version, m.body.at("global_num_loss_tokens").get<int64_t>());
        nlohmann::json named = nlohmann::json::object();
        for (const auto& metric : metrics) named[metric.name] = metric.value;
        channel.send(Placement::coordinator(), "trained", {{"version", version}, {"metrics", named}});
      } else if (m.kind == "publish") {
        if (!weights)
          throw Error(MLPT_INTERNAL, "publish sent to trainer rank " + std::to_string(group_rank) + " (only data-parallel replica 0 sends)");
        const refit::SentVersion sent = weights->send(trainer, refit::kTransferTimeoutMs);
        channel.send(Placement::coordinator(), "published", {{"version", sent.version}, {"refit", run::refit_stats_json(sent.stats)}});
      } else if (m.kind == "save") {
        trainer.save_state(m.body.at("dir").get<std::string>());
        channel.send(Placement::coordinator(), "saved");
      } else if (m.kind == "load") {
        trainer.load_state(m.body.at("dir").get<std::string>());
        channel.send(Placement::coordinator(), "loaded", {{"version", trainer.export_weights().version}});
      } else {
        throw Error(MLPT_INTERNAL, "unknown message '" + m.kind + "' from the coordinator");
      }
    }
  } catch (...) {
    return report_rank_failure(std::current_exception(), channel, placement, rank, interrupted);
  }
}

}  // namespace mlpt::dist
