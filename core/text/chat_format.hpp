// Chat formats: how messages become tokens for a model family, and how the model's reply becomes
// tool calls. Two implementations, chosen by name: "qwen3" (Hermes JSON inside <tool_call>, the
// template of Qwen3's tokenizer_config.json) and "qwen3_5" (XML <function=…><parameter=…>).
//
// Token-in, token-out: a rollout's sequence is rendered once (render_prompt) and then only ever
// extended (append_turns); the tokens the engine generated are never re-tokenized. Template glue
// (<|im_start|>, <tool_response>, …) becomes special tokens; message content is encoded as plain
// text, so a file containing "<|im_end|>" cannot end a turn.
//
// Messages use the harness ABI's vocabulary (mlpt/harness.h): {"role", "content", "name",
// "tool_calls": [{"name", "arguments"}], "reasoning_content"}; tools are OpenAI-style function
// schemas {"type": "function", "function": {"name", "description", "parameters"}}.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text/tokenizer.hpp"

namespace mlpt::text {

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;

  // The whole prompt as text: system turn (with tools), every message, and (when asked) the
  // generation prompt with thinking disabled — the benchmark's mode.
  virtual std::string render_text(const nlohmann::json& messages, const nlohmann::json& tools,
                                  bool add_generation_prompt) const = 0;
  // The same as tokens, content encoded as plain text.
  virtual std::vector<int32_t> render_prompt(const nlohmann::json& messages, const nlohmann::json& tools) const = 0;

  // The tokens that follow the model's turn at the end of `sequence`: the end of that turn when the
  // engine stopped before its stop token (`closed` false), then `messages` (consecutive tool results
  // merged into one user turn, user messages), then the next generation prompt. `sequence` itself
  // is not changed: the result is appended by the caller.
  virtual std::vector<int32_t> append_turns(const std::vector<int32_t>& sequence, bool closed,
                                            const nlohmann::json& messages) const = 0;

  // The model's decoded reply as {"content", "tool_calls": [{"name", "arguments"}], "parse_errors"}.
  // Never throws for garbled output: each problem is a parse_errors entry the harness shows the model.
  virtual nlohmann::json parse_reply(const std::string& text, const nlohmann::json& tools) const = 0;

  // Tokens that end a generated turn (<|im_end|>).
  virtual std::vector<int32_t> stop_tokens() const = 0;
};

// "qwen3" or "qwen3_5"; throws mlpt::Error for another name or a tokenizer lacking the format's
// special tokens.
std::unique_ptr<ChatFormat> make_chat_format(const std::string& name, const Tokenizer& tokenizer);

// JSON as Python's json.dumps(ensure_ascii=False) writes it (", " and ": " separators), which is
// what the templates' tojson produces.
std::string python_json(const nlohmann::json& value);

}  // namespace mlpt::text
