// The trainer's data-parallel group (mlpt_component_group, ABI 1.2): every rank trains its share of
// the step's global batch, and the ranks sum their gradients, loss and counts over MPI, so each
// applies the same AdamW update and holds the same weights. A group of one needs nothing. A larger
// group needs a process started by an MPI launcher (the host initialises MPI) and a plugin built
// with MPI; its ranks find each other through the host's key-value store (each puts its MPI world
// rank under "<group>/world_rank/<r>") and build their own communicator from those ranks only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mlpt/mlpt.h"

namespace mlpt::ref {

class TrainerGroup {
 public:
  explicit TrainerGroup(const mlpt_component_group* group);  // NULL: a group of one
  ~TrainerGroup();
  TrainerGroup(const TrainerGroup&) = delete;
  TrainerGroup& operator=(const TrainerGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Element-wise sums over the group, in place; every rank gets the same bits.
  void sum(float* values, size_t count) const;
  void sum(double* values, size_t count) const;
  int64_t sum(int64_t value) const;
  // Returns once every rank has arrived.
  void barrier() const;

 private:
  std::string name_;
  int rank_ = 0, size_ = 1;
  void* comm_ = nullptr;  // the group's MPI communicator, when size_ > 1
};

}  // namespace mlpt::ref
