// `mlpt run` with a model-parallel trainer (configs/tiny-tensor-parallel.toml: the coordinator, two
// tensor-parallel trainer ranks and one rollout worker): layouts the run cannot take are refused
// before it writes anything, naming the config and its keys.
#include <catch2/catch.hpp>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

namespace {

void write_tensor_parallel_config(const fs::path& file, const fs::path& out,
                                  const std::vector<std::pair<std::string, std::string>>& edits) {
  write_config(fs::path(MLPT_SOURCE_DIR) / "configs/tiny-tensor-parallel.toml", file, out,
               "${MLPT_CACHE_DIR}/runs/tiny-tensor-parallel", edits);
}

}  // namespace

TEST_CASE("mlpt run refuses a model-parallel trainer the placement or the refit cannot take, before writing anything") {
  require_tiny_model();
  mlpt_test::TempDir dir("tensor_parallel_refusals");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "refused.toml";
  struct Refusal {
    const char* what;
    std::vector<std::pair<std::string, std::string>> edits;
    std::vector<std::string> named;  // what the error must name
  };
  const std::vector<Refusal> refusals = {
      {"two trainer ranks cannot hold tensor_parallel 2 x expert_parallel 2",
       {{"tensor_parallel = ", "tensor_parallel = 2\nexpert_parallel = 2"}},
       {"[placement] trainer_ranks", "tensor_parallel 2", "expert_parallel 2"}},
      {"a sparse refit relays one rank's export, which holds half the model",
       {{"checkpoint_every_steps = ", "checkpoint_every_steps = 0\nrefit = \"sparse\""}},
       {"[run] refit = \"sparse\"", "refit = \"dense\""}},
  };
  for (const auto& r : refusals) {
    INFO(r.what);
    write_tensor_parallel_config(config, out, r.edits);
    int status = 0;
    const std::string output = mlpt_test::run_command(launch("tensor-parallel-refused", 300, false) + config.string() + " 2>&1", &status);
    INFO(output);
    CHECK(WEXITSTATUS(status) != 0);
    CHECK(output.find(config.string()) != std::string::npos);
    for (const auto& name : r.named) CHECK(output.find(name) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}
