// C++ adapter for the trainer component (mlpt/trainer.h): derive from mlpt::sdk::Trainer, give the
// class a constructor taking the config JSON, list trainer_component<YourTrainer>(...). A trainer
// that runs as one rank of a group (ABI 1.2) takes (config JSON, const mlpt_component_group*)
// instead; the group is NULL when the host passes none (a group of one).
//
// publish_weights (ABI 1.2) is the adapter's: it sends what export_weights hands out (the rank's
// shards with their descriptors) through the bound sender, so a trainer implements export only. A
// trainer that knows which exported elements changed since its last publish says so through
// changed_since_published (mlpt/sdk/changed_elements.hpp); the adapter attaches it to the send and
// calls published() once the send succeeded.
//
// A trainer whose ranks hold parts of one model overrides data_parallel() with its replica; the
// adapter writes it into create's out_data_parallel_rank / _size, or refuses a host whose args lack
// those fields when the ranks of a replica would otherwise get different shares.
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "mlpt/sdk/changed_elements.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/transport.hpp"
#include "mlpt/trainer.h"

namespace mlpt::sdk {

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual void train_step(mlpt_train_step_args& args) = 0;
  virtual void compute_logprobs(mlpt_compute_logprobs_args& args) = 0;
  virtual void export_weights(mlpt_export_weights_args& args) = 0;
  virtual void save_state(std::string_view path) = 0;
  virtual void load_state(std::string_view path) = 0;

  // trainer.h, out_data_parallel_rank / _size: which batch share this rank trains. {0, 0}: every
  // rank of the group is a replica of its own.
  struct DataParallel {
    int32_t rank = 0, size = 0;
  };
  virtual DataParallel data_parallel() const { return {}; }

  // Optional, called by publish_weights right after export_weights: which of the exported elements
  // may differ from the version this rank published last (the entry's promise,
  // mlpt/sdk/changed_elements.hpp), or nullptr when the trainer cannot say. The entry and its
  // masks stay valid until published() or the next export.
  virtual const ChangedElementsExtension* changed_since_published() { return nullptr; }
  // The export of `version` reached the transport: the next masks count from it.
  virtual void published(uint64_t version) { (void)version; }
};

namespace detail {
inline Trainer* as_trainer(mlpt_trainer* t) {
  if (!t) throw Error(MLPT_INVALID_ARGUMENT, "trainer handle is NULL");
  return reinterpret_cast<Trainer*>(t);
}
// Hands the host the trainer's data-parallel replica (create args, since 1.2). A host whose args end
// before those fields gives every group rank its own share: refused unless that is what the trainer
// wants anyway.
inline void report_data_parallel(mlpt_trainer_create_args* a, const Trainer& t, const mlpt_component_group* group) {
  const Trainer::DataParallel dp = t.data_parallel();
  if (MLPT_HAS_FIELD(a, mlpt_trainer_create_args, out_data_parallel_size)) {
    a->out_data_parallel_rank = dp.rank;
    a->out_data_parallel_size = dp.size;
    return;
  }
  const int32_t group_size = group ? group->size : 1, group_rank = group ? group->rank : 0;
  if (dp.size != 0 && (dp.size != group_size || dp.rank != group_rank))
    throw Error(MLPT_FAILED_PRECONDITION,
                "this trainer's rank " + std::to_string(group_rank) + " of " + std::to_string(group_size) +
                    " is in data-parallel replica " + std::to_string(dp.rank) + " of " + std::to_string(dp.size) +
                    " and must train that replica's batch share, but the host's mlpt_trainer_create_args (struct_size " +
                    std::to_string(a->struct_size) + ") has no out_data_parallel_rank / out_data_parallel_size (ABI 1.2) to say so");
}

inline void require_batch(const mlpt_train_batch* b) {
  require_struct(b, MLPT_TRAIN_BATCH_STRUCT_SIZE, "mlpt_train_batch");
  if (!b->offsets || (!b->tokens && b->num_sequences > 0))
    throw Error(MLPT_INVALID_ARGUMENT, "mlpt_train_batch: offsets and tokens are required");
  if (b->offsets[0] != 0) throw Error(MLPT_INVALID_ARGUMENT, "mlpt_train_batch: offsets[0] != 0");
  for (size_t i = 0; i < b->num_sequences; ++i)
    if (b->offsets[i + 1] < b->offsets[i])
      throw Error(MLPT_INVALID_ARGUMENT,
                  "mlpt_train_batch: offsets decrease at sequence " + std::to_string(i));
}

// trainer.h, publish_weights: the export, sent as it is.
inline void publish_exported(mlpt_publish_weights_args& a) {
  BoundTransport sender(a.sender, "sender");
  mlpt_export_weights_args e{};
  e.struct_size = MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE;
  e.trainer = a.trainer;
  as_trainer(a.trainer)->export_weights(e);
  mlpt_transport_send_args s{};
  s.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
  s.transport = sender.endpoint();
  s.version = e.out_weight_version;
  s.tensors = e.out_tensors;
  s.num_tensors = e.out_num_tensors;
  s.timeout_ms = a.timeout_ms;
  s.shards = e.out_shards;
  s.ready = &e.out_ready;
  const ChangedElementsExtension* changes = as_trainer(a.trainer)->changed_since_published();
  s.extension_start = changes ? &changes->header : nullptr;
  sender.send(s);
  as_trainer(a.trainer)->published(e.out_weight_version);
  uint64_t bytes = 0;
  for (size_t i = 0; i < e.out_num_tensors; ++i) bytes += nbytes(e.out_tensors[i].tensor);
  a.out_weight_version = e.out_weight_version;
  a.out_bytes = bytes;
}
}  // namespace detail

template <class T>
const mlpt_trainer_api* trainer_api() {
  using detail::as_trainer;
  static const mlpt_trainer_api api = {
      MLPT_TRAINER_API_STRUCT_SIZE,
      [](mlpt_trainer_create_args* a) {
        return guard("trainer.create", [&] {
          require_struct(a, MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_trainer_create_args");
          const mlpt_component_group* group =
              MLPT_HAS_FIELD(a, mlpt_trainer_create_args, component_group) ? a->component_group : nullptr;
          std::unique_ptr<Trainer> t;
          if constexpr (std::is_constructible_v<T, std::string_view, const mlpt_component_group*>)
            t = std::make_unique<T>(view(a->config_json), group);
          else
            t = std::make_unique<T>(view(a->config_json));
          detail::report_data_parallel(a, *t, group);
          a->trainer = reinterpret_cast<mlpt_trainer*>(t.release());
        });
      },
      [](mlpt_trainer* t) { delete reinterpret_cast<Trainer*>(t); },
      [](mlpt_train_step_args* a) {
        return guard("trainer.train_step", [&] {
          require_struct(a, MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE_1_0, "mlpt_train_step_args");
          detail::require_batch(a->batch);
          as_trainer(a->trainer)->train_step(*a);
        });
      },
      [](mlpt_compute_logprobs_args* a) {
        return guard("trainer.compute_logprobs", [&] {
          require_struct(a, MLPT_COMPUTE_LOGPROBS_ARGS_STRUCT_SIZE_1_0, "mlpt_compute_logprobs_args");
          detail::require_batch(a->batch);
          as_trainer(a->trainer)->compute_logprobs(*a);
        });
      },
      [](mlpt_export_weights_args* a) {
        return guard("trainer.export_weights", [&] {
          require_struct(a, MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE_1_0, "mlpt_export_weights_args");
          as_trainer(a->trainer)->export_weights(*a);
        });
      },
      [](mlpt_trainer_state_args* a) {
        return guard("trainer.save_state", [&] {
          require_struct(a, MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE_1_0, "mlpt_trainer_state_args");
          as_trainer(a->trainer)->save_state(view(a->path));
        });
      },
      [](mlpt_trainer_state_args* a) {
        return guard("trainer.load_state", [&] {
          require_struct(a, MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE_1_0, "mlpt_trainer_state_args");
          as_trainer(a->trainer)->load_state(view(a->path));
        });
      },
      nullptr,  // extension_start
      [](mlpt_publish_weights_args* a) {
        return guard("trainer.publish_weights", [&] {
          require_struct(a, MLPT_PUBLISH_WEIGHTS_ARGS_STRUCT_SIZE_1_2, "mlpt_publish_weights_args");
          detail::publish_exported(*a);
        });
      },
  };
  return &api;
}

template <class T>
ComponentSpec trainer_component(std::string_view name, std::string_view description,
                                 const mlpt_trainer_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_TRAINER, name, description, trainer_api<T>(), caps);
}

}  // namespace mlpt::sdk
