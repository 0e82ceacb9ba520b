#include "model/parallel/model_parallel.hpp"

#include <type_traits>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

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
