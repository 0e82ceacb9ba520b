// Chat formats: rendering conversations to tokens (token-in, token-out) and parsing replies.
// Messages and tools are JSON in the harness ABI's vocabulary:
//   message {"role": "system"|"user"|"assistant"|"tool", "content": str, "name": str (tool),
//            "tool_calls": [{"name": str, "arguments": {...}}], "reasoning_content": str}
//   tool    {"type": "function", "function": {"name", "description", "parameters"}}
// Template text and message content are tokenized apart: special tokens are recognised only in the
// template's own text, so content such as a file holding "<|im_end|>" stays plain text.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text/tokenizer.hpp"
#include "core/text/tool_call_parser.hpp"

namespace mlpt::text {

struct ChatOptions {
  bool enable_thinking = false;  // the benchmark runs with thinking disabled
};

// A rendered conversation: template pieces (which may name special tokens) and content pieces.
class Rendered {
 public:
  void literal(std::string_view template_text);  // splits out the format's special tokens
  void content(std::string_view text);           // never special
  std::string text() const;
  std::vector<int32_t> tokens(const Tokenizer& tok) const;

 private:
  struct Part {
    bool special;
    std::string text;
  };
  std::vector<Part> parts_;
};

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual std::string name() const = 0;

  // The whole prompt: system (+ tools), the messages, and the generation prompt if asked. The tools
  // are rendered with their keys in the order given (an nlohmann::json converts in its sorted order).
  std::vector<int32_t> render_prompt(const nlohmann::json& messages, const nlohmann::ordered_json& tools,
                                     bool add_generation_prompt = true) const;
  std::string render_text(const nlohmann::json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt = true) const;

  // Multi-turn: `existing` is the sequence so far (prompt + generated tokens exactly as sampled);
  // returns only the tokens to append for `new_messages` (tool results, a user nudge) and the next
  // generation prompt. Closes the assistant turn (`<|im_end|>` if the sample lacks it, then "\n").
  // Throws mlpt::Error if new_messages holds an assistant or system message (they are never re-rendered).
  std::vector<int32_t> append_turns(std::span<const int32_t> existing, const nlohmann::json& new_messages,
                                    bool add_generation_prompt = true) const;
  // Appends in place and checks that the tokens already there were left unchanged.
  void extend(std::vector<int32_t>& sequence, const nlohmann::json& new_messages, bool add_generation_prompt = true) const;

  std::vector<int32_t> generation_prompt() const;
  std::string generation_prompt_text() const;

  // Decoded assistant text to {content, tool_calls, parse_errors}; never throws on model output.
  virtual ParsedReply parse_reply(std::string_view text, const nlohmann::json& tools) const = 0;

  const Tokenizer& tokenizer() const { return *tok_; }

 protected:
  ChatFormat(std::shared_ptr<const Tokenizer> tok, ChatOptions options) : tok_(std::move(tok)), options_(options) {}
  void render(Rendered& out, const nlohmann::json& messages, const nlohmann::ordered_json& tools,
              bool add_generation_prompt) const;
  void render_turns(Rendered& out, const nlohmann::json& messages, size_t first, long last_query) const;
  virtual void render_tools_system(Rendered& out, const nlohmann::ordered_json& tools,
                                   const std::string* system) const = 0;
  virtual void render_tool_calls(Rendered& out, const nlohmann::json& calls, bool content_empty) const = 0;
  virtual void render_generation_prompt(Rendered& out) const = 0;
  // Whether an assistant turn after the last user query gets its think block. Qwen3 writes it only
  // into the last turn or one with reasoning; Qwen3.5 (spec §6) into every such turn.
  virtual bool think_block_after_query(bool is_last, bool has_reasoning) const { return is_last || has_reasoning; }

  std::shared_ptr<const Tokenizer> tok_;
  ChatOptions options_;
};

// "qwen3" / "qwen3_moe" (Hermes JSON tool calls) or "qwen3_5" / "qwen3_5_moe" / "qwen3.5" (XML tool
// calls), as in the model config's model_type. Throws mlpt::Error for anything else.
std::unique_ptr<ChatFormat> make_chat_format(std::string_view model_type, std::shared_ptr<const Tokenizer> tok,
                                             ChatOptions options = {});

// JSON as the templates' `tojson` writes it (Python json.dumps: ", " and ": ", non-ASCII kept, keys
// in the value's own order, as transformers' tojson does not sort them).
std::string to_template_json(const nlohmann::ordered_json& value);
std::string to_template_json(const nlohmann::json& value);

}  // namespace mlpt::text
