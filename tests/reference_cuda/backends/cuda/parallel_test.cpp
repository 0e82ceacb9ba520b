// The CUDA model under tensor parallelism (TP=2, two MPI ranks on one GPU, the group's sums through
// the host-staged MPI communicator) and expert parallelism (EP=2, TP=2 x EP=2: the routed experts
// dispatched through host memory): logprobs, gradients and generation equal the one-rank CUDA
// model's and the CPU model's within the tolerances below, on the tiny config (cuda_parallel_check.cpp
// does the work; scripts/gpu-check.sh also runs TP=2 over NCCL where there are two GPUs).
//
// Tolerances, stated (not yet measured on a GPU; the first gpu-check run prints the values): TP
// rounds each rank's bf16 partial sums once more than one rank does, so the TP model is held to
// the CUDA model's own tolerances against the CPU (model_test.cpp): logprobs within 0.05 absolute
// at every position and 0.01 on average, against both; generation steps' logprobs within 0.05;
// gradients per tensor with cosine similarity >= 0.99 against the one-rank CUDA model's slices and
// >= 0.98 against the CPU's. Replicated tensors' gradients differ between the ranks by at most 1e-4
// of the tensor's largest element (the same sums; the device backward's atomics add in another
// order on each rank). EP is held to the same values, as estimates: it rounds the combined expert
// outputs to bf16 once (one rank adds each expert's into bf16), which is within what TP adds.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <string>

#include <nlohmann/json.hpp>

#include "mpirun_command.hpp"
#include "tests/support/test_util.hpp"

namespace {

void check_layout(int ranks, int ep, const std::string& communicator) {
  int status = 0;
  const std::string cmd = "timeout -k 5 300 " + mlpt_test::mpirun_command(ranks) + CUDA_PARALLEL_CHECK + " --config " +
                          MLPT_SOURCE_DIR + "/configs/models/tiny.json --communicator " + communicator +
                          " --ep " + std::to_string(ep) +
                          " --logprob-max 0.05 --logprob-mean 0.01 --generation-max 0.05 --grad-cosine 0.99"
                          " --cpu-grad-cosine 0.98 --replicated-spread 1e-4 2>&1";
  const std::string out = mlpt_test::run_command(cmd, &status);
  INFO(cmd << "\n" << out);
  REQUIRE(WIFEXITED(status));
  const auto key = out.find("\"max_logprob_diff_one_rank\"");
  REQUIRE(key != std::string::npos);
  const auto line = out.rfind('{', key);
  const nlohmann::json r = nlohmann::json::parse(out.substr(line, out.find('\n', line) - line));
  WARN("TP=" << r["tp"] << " x EP=" << r["ep"] << " (" << communicator << ") on " << r["devices"] << " GPU: " << r.dump());
  CHECK(r["max_logprob_diff_one_rank"].get<double>() <= 0.05);
  CHECK(r["mean_logprob_diff_one_rank"].get<double>() <= 0.01);
  CHECK(r["max_logprob_diff_cpu"].get<double>() <= 0.05);
  CHECK(r["mean_logprob_diff_cpu"].get<double>() <= 0.01);
  CHECK(r["max_generation_logprob_diff"].get<double>() <= 0.05);
  CHECK(r["min_grad_cosine_one_rank"].get<double>() >= 0.99);
  CHECK(r["min_grad_cosine_cpu"].get<double>() >= 0.98);
  CHECK(r["replicated_gradient_spread"].get<double>() <= 1e-4);
  CHECK(r["experts_replayed"].get<bool>());
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace

TEST_CASE("cuda tensor parallel: TP=2 on one GPU (host-staged MPI) equals one rank and the CPU model") {
  check_layout(2, 1, "staged");
}

TEST_CASE("cuda expert parallel: EP=2 on one GPU (host-staged dispatch) equals one rank and the CPU model") {
  check_layout(2, 2, "staged");
}

TEST_CASE("cuda model parallel: TP=2 x EP=2 on four ranks of one GPU equals one rank and the CPU model") {
  check_layout(4, 2, "staged");
}
