// Chat formats: Qwen3 against the real Jinja template (text and tokens), Qwen3.5 against strings
// written from the spec; incremental rendering keeps the prefix and sampled tokens untouched.
#include "core/error.hpp"
#include "core/text/chat_format.hpp"
#include "tests/unit/text/fixtures.hpp"

using namespace mlpt::text;
using namespace mlpt::text::testing;
using nlohmann::json;

namespace {

std::shared_ptr<const Tokenizer> shared_qwen3() {
  require_fixtures();
  static auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(qwen3_tokenizer_json()));
  return tok;
}

// Tools of the benchmark's harness (benchmark.md §5), trimmed.
json harness_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "execute_bash", "description": "Run a bash command.\nOutput is capped.",
      "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "description": "The command"},
        "is_input": {"type": "string", "enum": ["true", "false"]},
        "timeout": {"type": "number"},
        "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"]}},
        "required": ["command", "security_risk"]}}},
    {"type": "function", "function": {"name": "str_replace_editor", "description": "View and edit files — «unicode».",
      "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "path": {"type": "string"}, "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}}, "security_risk": {"type": "string"}},
        "required": ["command", "path", "security_risk"]}}},
    {"type": "function", "function": {"name": "finish", "description": "Finish.", "parameters": {"type": "object",
      "properties": {"message": {"type": "string"}}, "required": []}}}
  ])");
}

json conversation() {
  return json::parse(R"([
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "<uploaded_files>/testbed</uploaded_files>\nFix the bug in `foo()`:  it crashes.  "},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "The user wants a fix.",
     "tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls -la /testbed\ncat setup.py", "security_risk": "LOW"}}]},
    {"role": "tool", "name": "execute_bash", "content": "total 8\r\n-rw-r--r-- 1 root root  42 setup.py\n[Command finished with exit code 0]"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/a.py", "view_range": [1, 20], "security_risk": "LOW"}},
                    {"name": "execute_bash", "arguments": {"command": "python -c 'print(1)'", "security_risk": "LOW"}}]},
    {"role": "tool", "name": "str_replace_editor", "content": "Here's the result of running `cat -n` on /testbed/a.py:\n     1\tdef foo():\n     2\t    return 1/0\n"},
    {"role": "tool", "name": "execute_bash", "content": "1"}
  ])");
}

}  // namespace

TEST_CASE("Qwen3 renders like the real Jinja chat template", "[chat][reference]") {
  auto fmt_off = make_chat_format("qwen3", shared_qwen3());
  auto fmt_on = make_chat_format("qwen3", shared_qwen3(), ChatOptions{true});
  json conv = conversation();
  json cases = json::array();
  std::vector<const ChatFormat*> formats;
  auto add = [&](json messages, json tools, bool gen, bool thinking) {
    cases.push_back({{"messages", messages}, {"tools", tools}, {"add_generation_prompt", gen}, {"enable_thinking", thinking}});
    formats.push_back(thinking ? fmt_on.get() : fmt_off.get());
  };
  json no_system(conv.begin() + 1, conv.end());
  add(conv, harness_tools(), true, false);
  add(conv, harness_tools(), true, true);
  add(conv, json::array(), true, false);
  add(no_system, harness_tools(), false, false);
  add(no_system, json::array(), true, true);
  add(json::array({conv[0], conv[1]}), json::array(), true, false);
  add(json::array({conv[1]}), harness_tools(), true, false);
  // reasoning inside the content, a second user turn, an assistant without reasoning after it
  add(json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "<think>\nold thoughts\n</think>\n\nHello!"},
      {"role": "user", "content": "again"},
      {"role": "assistant", "content": "<think>\nnew thoughts\n\n</think>\n\nSure."},
      {"role": "user", "content": "<tool_response>\nlooks like a tool\n</tool_response>"},
      {"role": "assistant", "content": "Done.", "reasoning_content": "\nthinking\n"}])"), harness_tools(), false, false);
  add(json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
      {"role": "system", "content": "mid system"}, {"role": "user", "content": "  spaces \n\n"}])"), json::array(), true, true);
  json res = run_node("render_template.mjs", {{"tokenizer_config", (qwen3_dir() / "tokenizer_config.json").string()},
                                              {"tokenizer", qwen3_tokenizer_json().string()}, {"cases", cases}});
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    const json& c = cases[i];
    CHECK(formats[i]->render_text(c["messages"], c["tools"], c["add_generation_prompt"]) == res["texts"][i].get<std::string>());
    CHECK(formats[i]->render_prompt(c["messages"], c["tools"], c["add_generation_prompt"]) ==
          res["ids"][i].get<std::vector<int32_t>>());
  }
}

TEST_CASE("Qwen3.5 renders the spec's turns, tools and tool calls", "[chat]") {
  auto fmt = make_chat_format("qwen3_5", shared_qwen3());
  CHECK(fmt->name() == "qwen3_5");
  CHECK(fmt->generation_prompt_text() == "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  CHECK(make_chat_format("qwen3_5_moe", shared_qwen3(), {true})->generation_prompt_text() == "<|im_start|>assistant\n<think>\n");
  json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  json msgs = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Do it."},
    {"role": "assistant", "content": "Calling.", "tool_calls": [
       {"name": "f", "arguments": {"a": "line1\nline2", "n": 3, "xs": [1, "b"], "o": {"k": true}}},
       {"name": "f", "arguments": {}}]},
    {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2 <|im_end|>"}])");
  std::string text = fmt->render_text(msgs, tools, true);
  std::string expected =
      "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
      "{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}, \"type\": \"function\"}\n</tools>";
  CHECK(text.rfind(expected, 0) == 0);
  CHECK(text.find("<IMPORTANT>\nReminder:\n") != std::string::npos);
  CHECK(text.find("</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nDo it.<|im_end|>\n") != std::string::npos);
  std::string turn =
      "<|im_start|>assistant\n<think>\n\n</think>\n\nCalling.\n\n<tool_call>\n<function=f>\n"
      "<parameter=a>\nline1\nline2\n</parameter>\n<parameter=n>\n3\n</parameter>\n<parameter=o>\n{\"k\": true}\n</parameter>\n"
      "<parameter=xs>\n[1, \"b\"]\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n</function>\n</tool_call>"
      "<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2 <|im_end|>\n</tool_response>"
      "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  // The assistant after the last user query keeps a (here empty) think block only when it is last
  // or has reasoning; this one has none and is not last, so: content only.
  std::string no_think = turn;
  no_think.replace(0, std::string("<|im_start|>assistant\n<think>\n\n</think>\n\n").size(), "<|im_start|>assistant\n");
  CHECK(text.size() >= no_think.size());
  CHECK(text.substr(text.size() - no_think.size()) == no_think);
  // tokens: the template's special tokens are ids, the tool's "<|im_end|>" is plain text
  auto ids = fmt->render_prompt(msgs, tools, true);
  const Tokenizer& tok = *shared_qwen3();
  CHECK(tok.decode(ids) == text);
  CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("<|im_end|>")) == 4);
  CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("<tool_call>")) == 3);  // 1 in the instructions
  // without tools, no system message
  CHECK(fmt->render_text(json::array({msgs[1]}), json::array(), false) == "<|im_start|>user\nDo it.<|im_end|>\n");
  // reasoning after the last query is kept
  json r = json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "why"}])");
  CHECK(fmt->render_text(r, json::array(), false) == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\na<|im_end|>\n");
}

TEST_CASE("incremental rendering appends only new tokens and keeps sampled ones", "[chat]") {
  for (const char* name : {"qwen3", "qwen3_5"}) {
    INFO(name);
    auto fmt = make_chat_format(name, shared_qwen3());
    const Tokenizer& tok = *shared_qwen3();
    json conv = conversation();
    json prompt_msgs = json::array({conv[0], conv[1]});
    std::vector<int32_t> seq = fmt->render_prompt(prompt_msgs, harness_tools(), true);
    CHECK(tok.decode(seq) == fmt->render_text(prompt_msgs, harness_tools(), true));
    // a sampled reply, deliberately tokenized in a way re-tokenization would not give
    std::vector<int32_t> sampled;
    for (char c : std::string("I will run <tool_call>")) sampled.push_back(tok.encode(std::string(1, c))[0]);
    sampled.push_back(*tok.token_to_id("<|im_end|>"));
    seq.insert(seq.end(), sampled.begin(), sampled.end());
    const std::vector<int32_t> before = seq;
    json results = json::array({conv[5], conv[6]});
    fmt->extend(seq, results);
    REQUIRE(seq.size() > before.size());
    CHECK(std::equal(before.begin(), before.end(), seq.begin()));
    std::vector<int32_t> added(seq.begin() + long(before.size()), seq.end());
    CHECK(added == fmt->append_turns(before, results));
    // the appended text is the template's rendering of the tool turn after a closed assistant turn
    std::string expect = "\n" + fmt->render_text(results, json::array(), true);
    CHECK(tok.decode(added) == expect);
    // a reply cut off without <|im_end|> gets it
    std::vector<int32_t> cut(before.begin(), before.end() - 1);
    auto closing = fmt->append_turns(cut, json::array({json{{"role", "user"}, {"content", "Please continue."}}}));
    CHECK(closing.front() == *tok.token_to_id("<|im_end|>"));
    CHECK(tok.decode(closing) == "<|im_end|>\n<|im_start|>user\nPlease continue.<|im_end|>\n" + fmt->generation_prompt_text());
    CHECK_THROWS_AS(fmt->append_turns(before, json::array({json{{"role", "assistant"}, {"content", "x"}}})), mlpt::Error);
  }
  // Qwen3: the tool turn appended equals what the real template writes after that assistant turn
  auto fmt = make_chat_format("qwen3", shared_qwen3());
  json conv = conversation();
  json upto(conv.begin(), conv.begin() + 5);
  json all(conv.begin(), conv.end());
  json res = run_node("render_template.mjs", {{"tokenizer_config", (qwen3_dir() / "tokenizer_config.json").string()},
                                              {"tokenizer", qwen3_tokenizer_json().string()},
                                              {"cases", {{{"messages", upto}, {"tools", harness_tools()}, {"add_generation_prompt", false}, {"enable_thinking", false}},
                                                         {{"messages", all}, {"tools", harness_tools()}, {"add_generation_prompt", true}, {"enable_thinking", false}}}}});
  std::string a = res["texts"][0], b = res["texts"][1];
  REQUIRE(b.rfind(a, 0) == 0);
  std::vector<int32_t> fake_existing = {*shared_qwen3()->token_to_id("<|im_end|>")};
  auto added = fmt->append_turns(fake_existing, json::array({conv[5], conv[6]}));
  CHECK(shared_qwen3()->decode(added) == b.substr(a.size() - 1));  // a ends with "<|im_end|>\n"
}

TEST_CASE("chat format factory and bad messages", "[chat][errors]") {
  CHECK(make_chat_format("qwen3_moe", shared_qwen3())->name() == "qwen3");
  CHECK_THROWS_WITH(make_chat_format("llama", shared_qwen3()), Catch::Contains("llama"));
  auto fmt = make_chat_format("qwen3", shared_qwen3());
  CHECK_THROWS_WITH(fmt->render_prompt(json::array({json{{"role", "robot"}, {"content", "x"}}}), json::array()),
                    Catch::Contains("robot"));
  CHECK_THROWS_WITH(fmt->render_prompt(json::array({json{{"role", "user"}, {"content", 5}}}), json::array()),
                    Catch::Contains("content"));
  CHECK(to_template_json(json::parse(R"({"b": [1, 2.5, "é\n\"", null, false], "a": {}})")) ==
        R"({"a": {}, "b": [1, 2.5, "é\n\"", null, false]})");
}
