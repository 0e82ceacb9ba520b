// The process-wide meeting place of the in-process transport: one Group per `group` name, holding
// the sender ranks' published version and what every receiver currently holds.
//
// Version and lifetime rules (also in README.md):
//   1. A sender publishes version v by handing over its DLPack pointers; nothing is copied. v must
//      be greater than every version it published before (a non-increasing send is an error).
//      With several sender ranks (ABI 1.2: a sender group of n), each sends its own shards of v,
//      and v is published once all n have; until then receivers see the previous version.
//   2. Before publishing v, send waits until (a) `receivers` receivers are attached to the group and
//      (b) none of them still holds an older version. Only then may the trainer's memory of the old
//      version change, so this is what makes zero-copy safe. Waiting past the timeout gives
//      MLPT_DEADLINE_EXCEEDED naming the receivers still holding (or the count still missing).
//   3. The sender's memory of v must stay valid and unchanged from send(v) until send(v+1) returns
//      or the sender is destroyed (the ABI's zero-copy rule; the trainer's export guarantees it).
//   4. receive(min_version) returns the newest published version >= min_version (never an older
//      one), waiting up to its timeout. A receiver holds at most one version: it must release it
//      before receiving again. Names and shapes it was given live until that release.
//   5. Destroying the sender waits (up to the sender's timeout_ms) for receivers to release, then
//      detaches; receivers then get MLPT_UNAVAILABLE once nothing newer than what they had is left.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::transport::inprocess {

// One published version (or one sender rank's part of it): the senders' pointers, with names,
// shapes and shard descriptors copied so that they outlive the senders' calls (the data itself is
// the senders', zero-copy).
struct Published {
  uint64_t version = 0;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes, strides, global_shapes, offsets;
  std::vector<mlpt_named_tensor> tensors;
  std::vector<mlpt_tensor_shard> shards;  // parallel to tensors; empty: every tensor is whole
  mlpt_device_ready ready{MLPT_DEVICE_READY_STRUCT_SIZE, MLPT_READY_ON_RETURN, nullptr, nullptr};  // the sender's

  // The tensors of `parts` (one per sender rank, in rank order) as one version. Parts whose device
  // data is ready only after an event each cannot be joined under one event (MLPT_UNIMPLEMENTED).
  static std::shared_ptr<Published> join(uint64_t version, const std::vector<std::shared_ptr<Published>>& parts);
  // A copy of `count` tensors with their descriptors (`shards` NULL: whole).
  static std::shared_ptr<Published> copy(uint64_t version, const mlpt_named_tensor* tensors, const mlpt_tensor_shard* shards,
                                         size_t count);
};

struct ReceiverSlot {
  std::string name;                  // "receiver #k of group 'g'"
  std::shared_ptr<Published> held;   // what it received and has not released
  uint64_t last_version = 0;         // newest version it has received
};

struct Group {
  std::mutex mutex;
  std::condition_variable changed;
  int32_t sender_ranks = 1;          // ranks of the sender group (the senders' component group)
  std::vector<bool> rank_attached;   // per sender rank
  bool sender_left = false;          // a sender was here and is gone
  size_t expected_receivers = 1;     // the senders' "receivers"
  std::vector<uint64_t> rank_last_version;  // per sender rank: newest version it sent (0: none)
  uint64_t last_version = 0;         // newest version published (0: none yet)
  std::map<uint64_t, std::vector<std::shared_ptr<Published>>> partial;  // versions not every rank sent yet
  std::shared_ptr<Published> newest;
  bool has_sender() const {
    for (bool a : rank_attached)
      if (a) return true;
    return false;
  }
  std::vector<ReceiverSlot*> receivers;
  size_t receivers_ever = 0;
};

// The group named `name`, created on first use; groups live for the rest of the process (there are
// a handful per run and this keeps every endpoint's pointer valid).
std::shared_ptr<Group> group_named(const std::string& name);

}  // namespace mlpt::transport::inprocess
