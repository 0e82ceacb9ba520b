// The reference model split over ranks computes what one rank computes, forward (scoring and
// generation with caches) and gradients: tensor parallelism (heads and FFN columns, KV heads
// replicated where tp exceeds them), expert
// parallelism (experts, tokens exchanged all-to-all), pipeline parallelism (layers in stages, the
// residual stream passed between them) and their products, on the tiny and small configs, with
// the router's choice and with replayed experts (R3); and `mpirun -np N mlpt model score --tp T
// --ep E --pp P` prints what the one-rank command prints.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mpirun_command.hpp"
#include "tests/support/test_util.hpp"

namespace fs = std::filesystem;

namespace {

// Float32 partial sums added in another order: what a split reduction may change in a logprob.
constexpr double kLogprobTolerance = 1e-5;  // measured: 4e-7 (tiny), 2.8e-6 (small) under TP=2; EP is exact
// Gradients, relative to each tensor's largest element: measured 6e-6 (tiny), 1.3e-5 (small) under TP=2.
constexpr double kGradientTolerance = 1e-4;
// Hidden states of generation steps (prefill and decode with caches): measured 3.6e-6 (tiny), 1.3e-5
// (small) under TP=2; EP is exact.
constexpr double kGenerationTolerance = 1e-4;

std::string config(const char* name) { return std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json"; }

// Runs an MPI check program's command: it must exit 0; returns the JSON line its first rank
// printed, found by one of its keys.
nlohmann::json run_check(const std::string& cmd, const char* key) {
  int status = 0;
  const std::string out = mlpt_test::run_command(cmd, &status);
  INFO(cmd << "\n" << out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const auto at = out.find("\"" + std::string(key) + "\"");
  REQUIRE(at != std::string::npos);
  const auto line = out.rfind('{', at);
  return nlohmann::json::parse(out.substr(line, out.find('\n', line) - line));
}

// Runs parallel_forward_check over tp × ep × pp ranks: forward (and with `gradients` backward) of
// the shards against one rank.
// With `vocab` > 0 the config's vocabulary size replaced (one that does not split evenly).
nlohmann::json check(int tp, int ep, const std::string& config_path, bool replay, bool gradients = true,
                     int etp = 1, int pp = 1, int64_t vocab = 0) {
  const std::string cmd =
      "timeout -k 5 600 " + mlpt_test::mpirun_command(tp * ep * pp) + PARALLEL_FORWARD_CHECK + " --config " +
      config_path + " --tp " + std::to_string(tp) + " --ep " + std::to_string(ep) + " --etp " +
      std::to_string(etp) + " --pp " + std::to_string(pp) + " --tolerance " +
      std::to_string(kLogprobTolerance) + " --grad-tolerance " + std::to_string(kGradientTolerance) +
      (replay ? " --replay" : "") + (gradients ? " --backward" : "") +
      (vocab > 0 ? " --vocab " + std::to_string(vocab) : "") + " 2>&1";
  const nlohmann::json r = run_check(cmd, "max_logprob_diff");
  INFO(cmd << "\n" << r.dump());
  WARN("tp " << tp << " ep " << ep << " etp " << etp << " pp " << pp << (replay ? " replay" : "") << " " << config_path << ": max |Δlogprob| "
             << r["max_logprob_diff"].get<double>() << ", max |Δhidden| " << r["max_hidden_diff"].get<double>()
             << (gradients ? ", max relative |Δgradient| " + std::to_string(r["max_grad_relative_diff"].get<double>()) : "")
             << ", generation max |Δhidden| " << r["max_generate_hidden_diff"].get<double>());
  CHECK(r["experts_equal"].get<bool>());
  CHECK(r["max_logprob_diff"].get<double>() <= kLogprobTolerance);
  CHECK(r["backward"].get<bool>() == gradients);
  CHECK(r["max_grad_relative_diff"].get<double>() <= kGradientTolerance);
  CHECK(r["max_generate_hidden_diff"].get<double>() <= kGenerationTolerance);
  // The vocabulary split over the TP ranks: the printing rank (TP rank 0) holds the first range,
  // ceil(vocab / tp) rows of the LM head.
  const int64_t V = r["vocab_size"].get<int64_t>();
  CHECK(r["lm_head_rows"].get<int64_t>() == (V + tp - 1) / tp);
  return r;
}

std::string mlpt_model() { return std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model"; }

// A float32 checkpoint of the tiny config (or `model`) in a folder of this process, removed afterwards.
struct TinyCheckpoint {
  fs::path dir;
  explicit TinyCheckpoint(const std::string& name, const char* model = "tiny")
      : dir(fs::temp_directory_path() / ("mlpt-model-parallel-" + name + "-" + std::to_string(::getpid()))) {
    int status = 0;
    const std::string out = mlpt_test::run_command(mlpt_model() + " init --config " + config(model) +
                                                       " --seed 7 --dtype float32 --out " + dir.string() + " 2>&1",
                                                   &status);
    INFO(out);
    REQUIRE(status == 0);
  }
  ~TinyCheckpoint() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// `mpirun -np ranks mlpt model score <layout>` against the one-rank command on the same input: the
// same lines, the same keys, logprobs and top candidates within kLogprobTolerance. Returns the
// largest logprob difference.
double check_score(const char* model, int ranks, const std::string& layout) {
  const TinyCheckpoint checkpoint("score", model);
  const fs::path& dir = checkpoint.dir;
  const std::string tool = mlpt_model();
  int status = 0;
  mlpt_test::write_bytes((dir / "input.txt").string(), "5 17 300 2 99 1000 42 7 7 7 8\n[1, 2, 3]\n\n12,13,14,15,16,1100\n");
  const std::string score = " score --checkpoint " + dir.string() + " --top 3 < " + (dir / "input.txt").string();
  const std::string one = mlpt_test::run_command(tool + score, &status);
  REQUIRE(status == 0);
  const std::string many =
      mlpt_test::run_command("timeout -k 5 300 " + mlpt_test::mpirun_command(ranks) + tool + score + " " + layout, &status);
  INFO("one rank:\n" << one << "\n" << layout << ":\n" << many);
  REQUIRE(status == 0);
  std::istringstream a(one), b(many);
  std::string la, lb;
  int lines = 0;
  double largest = 0;
  while (std::getline(a, la)) {
    REQUIRE(std::getline(b, lb));
    ++lines;
    auto ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
    REQUIRE(ja.size() == jb.size());  // the same keys, nothing added
    CHECK(ja["tokens"] == jb["tokens"]);
    REQUIRE(ja["logprobs"].size() == jb["logprobs"].size());
    for (size_t i = 0; i < ja["logprobs"].size(); ++i)
      largest = std::max(largest, std::abs(ja["logprobs"][i].get<double>() - jb["logprobs"][i].get<double>()));
    REQUIRE(ja["top"].size() == jb["top"].size());
    for (size_t t = 0; t < ja["top"].size(); ++t)
      for (size_t j = 0; j < ja["top"][t].size(); ++j) {
        // The same ids, unless two candidates are closer than the tolerance and trade places.
        const double lp = ja["top"][t][j][1].get<double>(), other = jb["top"][t][j][1].get<double>();
        CHECK(std::abs(lp - other) <= kLogprobTolerance);
        if (ja["top"][t][j][0] != jb["top"][t][j][0]) {
          const double next = ja["top"][t][std::min(j + 1, ja["top"][t].size() - 1)][1].get<double>();
          const double prev = ja["top"][t][j == 0 ? 0 : j - 1][1].get<double>();
          CHECK(std::min(std::abs(lp - next), std::abs(lp - prev)) <= kLogprobTolerance);
        }
      }
  }
  CHECK(lines == 3);  // the empty line prints nothing, as with one rank
  CHECK_FALSE(std::getline(b, lb));  // one rank prints
  WARN("mlpt model score " << layout << " vs one rank: max |Δlogprob| " << largest);
  CHECK(largest <= kLogprobTolerance);
  return largest;
}

}  // namespace

// The distributed log-softmax of vocabulary parallelism against float64 over whole rows, on 2, 3
// and 4 ranks: vocabularies that split evenly and unevenly, padding ids past `valid` in one rank's
// range or filling whole ranges.
TEST_CASE("Vocabulary-parallel log-softmax, gradient, top ids and gathered rows equal float64 over whole rows") {
  for (int tp : {2, 3, 4}) {
    const std::string cmd = "timeout -k 5 120 " + mlpt_test::mpirun_command(tp) + VOCAB_PARALLEL_CHECK +
                            " --tp " + std::to_string(tp) + " 2>&1";
    const nlohmann::json r = run_check(cmd, "gathered_equal");
    INFO(cmd << "\n" << r.dump());
    WARN("tp " << tp << ": max |Δlse| " << r["max_lse_diff"].get<double>() << ", |Δlogprob| "
               << r["max_logprob_diff"].get<double>() << ", |Δgradient| " << r["max_grad_diff"].get<double>()
               << ", |Δtop| " << r["max_top_diff"].get<double>());
    CHECK(r["max_logprob_diff"].get<double>() <= 1e-12);
    CHECK(r["top_ids_equal"].get<bool>());
    CHECK(r["gathered_equal"].get<bool>());
    CHECK(r["ranges_cover"].get<bool>());
  }
}

// MoE parallel folding: the two TP pairs of a TP=2 x EP=2 layout hold different rows (7 and 3
// tokens); every rank's dispatch result equals one rank's experts on its own rows within float32
// rounding (expert_dispatch_check derives the bounds).
TEST_CASE(
    "Expert dispatch with different rows per expert-parallel rank equals one rank's experts on those rows") {
  const std::string cmd =
      "timeout -k 5 120 " + mlpt_test::mpirun_command(4) + EXPERT_DISPATCH_CHECK + " 2>&1";
  const nlohmann::json r = run_check(cmd, "outputs_within_bound");
  INFO(cmd << "\n" << r.dump());
  WARN("folded dispatch: outputs within "
       << r["max_output_diff"].get<double>() << ", weight gradients within "
       << r["max_weight_grad_diff"].get<double>() << " (scale " << r["weight_grad_scale"].get<double>()
       << ")");
  CHECK(r["outputs_within_bound"].get<bool>());
}

TEST_CASE("Tiny config: tensor parallel (TP=2) forward and gradients equal one rank") {
  auto r = check(2, 1, config("tiny"), false);
  CHECK(r["max_grad_relative_diff"].get<double>() > 0);  // the partial sums really were added in another order
}

TEST_CASE("Tiny config: expert parallel (EP=2) forward and gradients equal one rank bit for bit") {
  // EP moves whole rows and sums each token's experts in the one-rank order: nothing to round.
  auto r = check(1, 2, config("tiny"), false);
  CHECK(r["hidden_bitwise_equal"].get<bool>());
  CHECK(r["max_grad_relative_diff"].get<double>() == 0);
}

TEST_CASE("Tiny config: TP=2 x EP=2 over four ranks equals one rank") { check(2, 2, config("tiny"), false); }

// A vocabulary that does not split evenly: ranges of 576 and 575 ids (TP=2), 288 and 287 (TP=4),
// the embedding's gradient on each rank's rows.
TEST_CASE(
    "Tiny config with 1151 ids: TP=2 and TP=4 (two KV heads) split the vocabulary unevenly and equal one "
    "rank") {
  check(2, 1, config("tiny"), false, true, 1, 1, /*vocab=*/1151);
  check(4, 1, config("tiny-tp8"), false, true, 1, 1, /*vocab=*/1151);
}

// Expert tensor parallelism: 1 (the default above: whole experts over every rank of the layout,
// dispatched over all of them, their rows added once to the TP sums) or tp (each expert's FFN
// columns split over the TP ranks as well, the blocks over the EP ranks).
TEST_CASE("Tiny config: expert tensor parallel = TP (expert columns split) under TP=2 and TP=2 x EP=2 equals one rank") {
  check(2, 1, config("tiny"), false, true, /*etp=*/2);
  check(2, 2, config("tiny"), true, true, /*etp=*/2);
}

TEST_CASE("Tiny config: routing replay (R3) under EP=2 and TP=2 x EP=2 uses the given experts") {
  check(1, 2, config("tiny"), true);
  check(2, 2, config("tiny"), true);
}

TEST_CASE("TP=4 with 2 KV heads (each replicated on two ranks) and TP=8 (on four) equal one rank, gradients too") {
  // The 397B model's 2 KV heads at the reference's TP4 (training) and TP8 (generation), scaled down.
  auto r = check(4, 1, config("tiny-tp8"), false);
  CHECK(r["max_grad_relative_diff"].get<double>() > 0);  // the replicas' partial gradients really were summed
  check(8, 1, config("tiny-tp8"), false, /*gradients=*/false);
}

TEST_CASE("TP=4 x EP=2 over eight ranks with replicated KV heads equals one rank") { check(4, 2, config("tiny-tp8"), true); }

TEST_CASE("Small config: TP=2, EP=4 and TP=2 x EP=2 (gradients too) equal one rank, R3 under EP") {
  check(2, 1, config("small-100m"), false, /*gradients=*/false);
  check(1, 4, config("small-100m"), false, /*gradients=*/false);
  check(2, 2, config("small-100m"), true);
}

TEST_CASE("mpirun -np 4 mlpt model score --tp 2 --ep 2 prints the one-rank command's output") {
  check_score("tiny", 4, "--tp 2 --ep 2");
}

// The LM head split over the TP ranks: logprobs and top candidates assembled from each rank's range.
TEST_CASE("mpirun mlpt model score --tp 2, and --tp 4 over two KV heads, print the one-rank output") {
  check_score("tiny", 2, "--tp 2");
  check_score("tiny-tp8", 4, "--tp 4");
}

// Pipeline parallelism passes the residual stream (and its gradient) between stages as it is:
// nothing is summed in another order, so PP alone is bit for bit one rank, and a product with TP
// and EP rounds as that TP and EP do (the same tolerances).
TEST_CASE("Pipeline parallel: PP=2 alone equals one rank bit for bit (forward, gradients, generation), and with R3") {
  auto r = check(1, 1, config("tiny"), false, true, 1, /*pp=*/2);
  CHECK(r["hidden_bitwise_equal"].get<bool>());
  CHECK(r["generate_bitwise_equal"].get<bool>());
  CHECK(r["max_grad_relative_diff"].get<double>() == 0);
  CHECK(r["max_logprob_diff"].get<double>() == 0);
  check(1, 1, config("tiny"), true, false, 1, /*pp=*/4);  // a stage per layer
}

TEST_CASE("Pipeline parallel: PP=2 x TP=2 x EP=2 over eight ranks, and PP=2 x TP=4 over two KV heads, equal one rank") {
  check(2, 2, config("tiny"), true, true, 1, /*pp=*/2);
  check(4, 1, config("tiny-tp8"), false, true, 1, /*pp=*/2);
}

TEST_CASE("mpirun -np 8 mlpt model score --pp 2 --tp 2 --ep 2, --pp 2 --tp 4 (two KV heads) and --pp 2 print the one-rank output") {
  check_score("tiny", 8, "--pp 2 --tp 2 --ep 2");
  check_score("tiny-tp8", 8, "--pp 2 --tp 4");
  CHECK(check_score("tiny", 2, "--pp 2") == 0);  // stages add no rounding of their own
}

TEST_CASE("Pipeline parallel: more stages than layers, or a job of another size, is refused naming the setting") {
  const TinyCheckpoint checkpoint("pp-refused");
  int status = 0;
  std::string out = mlpt_test::run_command("timeout -k 5 120 " + mlpt_test::mpirun_command(8) + mlpt_model() + " score --checkpoint " +
                                               checkpoint.dir.string() + " --pp 8 < /dev/null 2>&1",
                                           &status);
  INFO(out);
  CHECK(status != 0);
  CHECK(out.find("pipeline_parallel 8 exceeds num_hidden_layers 4") != std::string::npos);
  out = mlpt_test::run_command("timeout -k 5 120 " + mlpt_test::mpirun_command(2) + mlpt_model() + " score --checkpoint " +
                                   checkpoint.dir.string() + " --tp 2 --pp 2 < /dev/null 2>&1",
                               &status);
  INFO(out);
  CHECK(status != 0);
  CHECK(out.find("--tp 2 × --ep 1 × --pp 2 = 4 ranks, but the job has 2") != std::string::npos);
}

TEST_CASE("A layout that does not match the job is refused, naming both") {
  int status = 0;
  const std::string out = mlpt_test::run_command(
      "timeout -k 5 120 " + mlpt_test::mpirun_command(2) + mlpt_model() + " score --checkpoint /nonexistent --tp 2 --ep 2 < /dev/null 2>&1",
      &status);
  INFO(out);
  CHECK(status != 0);
  CHECK(out.find("--tp 2 × --ep 2 = 4 ranks, but the job has 2") != std::string::npos);
}

TEST_CASE("Bad input under mpirun ends every rank with an error naming the line") {
  const TinyCheckpoint checkpoint("bad-input");
  const fs::path& dir = checkpoint.dir;
  const std::string tool = mlpt_model();
  int status = 0;
  mlpt_test::write_bytes((dir / "input.txt").string(), "1 2 3\n4 five 6\n");
  const std::string out = mlpt_test::run_command("timeout -k 5 120 " + mlpt_test::mpirun_command(2) + tool +
                                                     " score --checkpoint " + dir.string() + " --ep 2 < " +
                                                     (dir / "input.txt").string() + " 2>&1",
                                                 &status);
  INFO(out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(WEXITSTATUS(status) != 124);  // not the timeout: no rank waits forever
  CHECK(out.find("stdin line 2: 'five' is not a token id") != std::string::npos);
  CHECK(out.find("\"tokens\":[1,2,3]") != std::string::npos);  // the good line before it was scored
}
