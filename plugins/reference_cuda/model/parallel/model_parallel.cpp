#include "model/parallel/model_parallel.hpp"

#include <string>
#include <type_traits>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {
[[noreturn]] void no_point_to_point(const char* call) {
  throw sdk::Error(MLPT_UNIMPLEMENTED, std::string("model parallel: this communicator has no ") + call +
                                           " (pipeline parallelism needs point-to-point messages)");
}
}  // namespace

void Communicator::reduce_scatter_v(const float*, float*, const size_t*) {
  throw sdk::Error(
      MLPT_UNIMPLEMENTED,
      "model parallel: this communicator has no reduce_scatter_v (the distributed optimizer's gradient sum)");
}
void Communicator::send(const float*, size_t, int) { no_point_to_point("send"); }
void Communicator::recv(float*, size_t, int) { no_point_to_point("recv"); }
void Communicator::send_recv(const float*, size_t, int, float*, size_t, int) { no_point_to_point("send_recv"); }

void check_groups(const ModelShard& s, const ModelParallel* p) {
  const int pp = p ? p->pipeline_size() : 1, pp_rank = p && p->pipeline ? p->pipeline->rank() : 0;
  if (pp != s.pp || pp_rank != s.pp_rank)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model parallel: the weights are pipeline stage " + std::to_string(s.pp_rank) +
                                                " of " + std::to_string(s.pp) + ", but the batch's pipeline group makes it " +
                                                std::to_string(pp_rank) + " of " + std::to_string(pp));
  const int tp = p ? p->tensor_size() : 1, ep = p ? p->expert_size() : 1;
  const int tp_rank = p && p->tensor ? p->tensor->rank() : 0, ep_rank = p && p->expert ? p->expert->rank() : 0;
  if (tp != s.tp || ep != s.ep || tp_rank != s.tp_rank || ep_rank != s.ep_rank)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "model parallel: the weights are the shard of tp rank " + std::to_string(s.tp_rank) + " of " +
                         std::to_string(s.tp) + ", ep rank " + std::to_string(s.ep_rank) + " of " + std::to_string(s.ep) +
                         ", but the batch's groups make this tp rank " + std::to_string(tp_rank) + " of " +
                         std::to_string(tp) + ", ep rank " + std::to_string(ep_rank) + " of " + std::to_string(ep) +
                         " (one rank: no groups and unsharded weights)");
  const int blocks = p ? p->routed_size() : 1, block = p && p->routed_group() ? p->routed_group()->rank() : 0;
  if (s.sharded() && (blocks != s.expert_blocks() || block != s.expert_block()))
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model parallel: the weights hold routed-expert block " +
                                                std::to_string(s.expert_block()) + " of " + std::to_string(s.expert_blocks()) +
                                                " (expert tensor parallel " + std::to_string(s.etp) +
                                                "), but the batch's routed group makes this rank " + std::to_string(block) +
                                                " of " + std::to_string(blocks));
}

template <class T>
void sum_over(Communicator* group, T* values, size_t count) {
  if (!group || group->size() == 1) return;
  if constexpr (std::is_same_v<T, float>)
    group->all_reduce_sum(values, count);
  else
    throw sdk::Error(MLPT_UNIMPLEMENTED, "model parallelism computes in float32 only");
}

template void sum_over<float>(Communicator*, float*, size_t);
template void sum_over<double>(Communicator*, double*, size_t);

}  // namespace mlpt::ref
