#include "trainer/bf16_trainer.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {

// This process's rank as the MPI launcher numbers it (0 outside one).
int launched_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

Bf16Trainer::Bf16Trainer(std::string_view config_json, const mlpt_component_group* group)
    : Bf16Trainer(config_json, group, CountedOps{}) {}

Bf16Trainer::Bf16Trainer(std::string_view config_json, const mlpt_component_group* group, CountedOps&& ops)
    : DeviceTrainer(config_json, group, "trainer qwen35_bf16", nullptr,
                    [&ops] { return std::make_unique<HostPlatform>(std::move(ops.owned)); }),
      ops_(ops.counted) {}

void Bf16Trainer::train_step(mlpt_train_step_args& args) {
  ops_->reset_peak();
  const size_t held = ops_->live_bytes();
  DeviceTrainer::train_step(args);
  const char* folder = std::getenv("MLPT_MEMORY_TRACE");
  if (!folder || !*folder) return;
  const std::string path = std::string(folder) + "/memory_rank" + std::to_string(launched_rank()) + ".txt";
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw sdk::Error(MLPT_INVALID_ARGUMENT, "MLPT_MEMORY_TRACE: cannot write " + path);
  out << "held " << held << "\npeak " << ops_->peak_bytes() << "\n";
}

}  // namespace mlpt::ref
