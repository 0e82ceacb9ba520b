// The whole benchmark loop, end to end, learning: tiny Qwen3.5 model (random init, 1.6M
// parameters), letters task (reward 1 when the reply starts with a vowel), 4 prompts × 16
// rollouts per step, trainer -> in-process transport -> engine every step, staleness <= 1,
// validation pass@4 from step 15. A randomly initialised policy starts at the share of vowel-initial
// tokens among the first-token choices (about 0.1 here) and must end clearly above it.
#include "../letters_learning_run.hpp"

TEST_CASE("the async GRPO loop raises the reward of the tiny model on the letters task") {
  mlpt_test::check_letters_run_learns(mlpt_test::tiny_letters_config(), "letters task");
}

// The GPU components' code on the CPU: configs/tiny.toml with the qwen35_bf16 trainer and engine
// (trainer/device_trainer, engine/device_backend over the bf16-emulating ops) in place of
// qwen35_cpu; the weights go from the trainer's masters through the in-process transport into the
// engine's bf16 copies. It must learn by the same criterion; the GPU test runs the same with
// qwen35_cuda.
TEST_CASE("the letters run on the qwen35_bf16 trainer and engine (the GPU components' code) learns as the CPU run does") {
  mlpt_test::check_letters_run_learns(mlpt_test::with_model_components(mlpt_test::tiny_letters_config(), "qwen35_bf16"),
                                      "letters task on qwen35_bf16");
}
