// The memory plan of a training step (device_model/step_memory.hpp, rank_memory.hpp) against what
// qwen35_bf16's ranks allocate: each rank of a group under mpirun writes the bytes its buffers held
// when the step began and the most they held during it (MLPT_MEMORY_TRACE, trainer/bf16_trainer.hpp),
// counted by the host platform's ops for every buffer the device trainer asks for. Six sequences of
// 12, 15, 9, 11, 14 and 10 tokens at 15 tokens a micro-batch are six micro-batches of those sizes.
//
// - held: the weights and optimizer state, rank_memory's trainer total exactly (with two
//   data-parallel replicas, half the masters and moments);
// - peak − held, what the step adds, at least what the plan counts exactly (the 1F1B window's kept
//   layer inputs, the LM head's block and vectors, the stage messages: all live at once while the
//   window's first micro-batch runs its backward) and at most that plus the plan's scratch bound.
//   With two replicas each trains a share of the six, so the plan of all six bounds it from above,
//   and the distributed optimizer's range and gather buffers, live together, from below.
#include "device_model/step_memory.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device_model/rank_memory.hpp"
#include "trainer_runs.hpp"

using mlpt_test::TempDir;
using nlohmann::json;
using namespace dist_test;
using namespace mlpt::ref;

namespace {

constexpr int kMicroBatchTokens = 15;
const std::vector<int64_t> kMicroBatches = {12, 15, 9, 11, 14, 10};  // one_rank_step's sequences

struct Traced {
  double held = 0, peak = 0;
};

Traced read_trace(const std::string& folder, int rank) {
  std::ifstream in(folder + "/memory_rank" + std::to_string(rank) + ".txt");
  REQUIRE(in);
  Traced t;
  std::string key;
  double value = 0;
  while (in >> key >> value) (key == "held" ? t.held : t.peak) = value;
  return t;
}

void check_layout(int tp, int ep, int pp, int dp = 1) {
  INFO("tp " << tp << " ep " << ep << " pp " << pp << " dp " << dp);
  TempDir dir("dist_step_memory"), trace("dist_step_memory_trace");
  json settings = {{"tensor_parallel", tp},
                   {"expert_parallel", ep},
                   {"pipeline_parallel", pp},
                   {"micro_batch_tokens", kMicroBatchTokens}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), settings);
  setenv("MLPT_MEMORY_TRACE", trace.str().c_str(), 1);
  const Launch run = train_group(dir, dp * tp * ep * pp, one.settings, "qwen35_bf16");
  unsetenv("MLPT_MEMORY_TRACE");
  INFO(run.output);
  REQUIRE(run.status == 0);
  if (dp == 1)
    CHECK(rank_report(dir, 0)["metrics"]["micro_batches"].get<double>() == double(kMicroBatches.size()));
  const ModelConfig full = load_model_config(one.settings["checkpoint"].get<std::string>() + "/config.json");
  for (int rank = 0; rank < dp * tp * ep * pp; ++rank) {
    const ModelShard shard = ModelShard::of_model_rank(tp, ep, pp, rank % (tp * ep * pp), 1);
    const Traced measured = read_trace(trace.str(), rank);
    const dev::StepMemory plan = dev::step_memory(full, shard, kMicroBatches, dp);
    const double step = measured.peak - measured.held;
    INFO("rank " << rank << " (stage " << shard.pp_rank << "): held " << measured.held << ", step " << step
                 << "; plan kept " << plan.kept_inputs << " head " << plan.head << " messages "
                 << plan.messages << " scratch bound " << plan.scratch_bound << " (measured scratch "
                 << step - plan.counted() << ")");
    CHECK(measured.held == dev::rank_memory_of(full, shard, dp).trainer());
    CHECK(plan.in_flight == std::min<int64_t>(pp - shard.pp_rank, int64_t(kMicroBatches.size())));
    if (dp == 1) CHECK(step >= plan.counted());
    CHECK((dp == 1 ? plan.optimizer == 0 : plan.optimizer > 0));
    CHECK(step >= plan.optimizer);
    CHECK(step <= plan.total());
  }
}

}  // namespace

TEST_CASE("a qwen35_bf16 step allocates what the memory plan says: one rank, TP2, PP2, TP2xEP2, PP2xTP2") {
  check_layout(1, 1, 1);
  check_layout(2, 1, 1);
  check_layout(1, 1, 2);
  check_layout(2, 2, 1);
  check_layout(2, 1, 2);
}

TEST_CASE("a qwen35_bf16 step with the distributed optimizer holds its replica's masters: DP2, DP2xTP2") {
  check_layout(1, 1, 1, 2);
  check_layout(2, 1, 1, 2);
}
