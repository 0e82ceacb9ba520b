#include "core/text/chat_format.hpp"

#include "core/error.hpp"
#include "core/text/qwen_chat_formats.hpp"
#include "core/text/unicode.hpp"

namespace mlpt::text {
namespace {

using nlohmann::json;

// The special tokens the Qwen templates write; only template literals are searched for them.
constexpr std::string_view kSpecials[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>",
                                          "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                                          "</think>"};

std::string str(const json& m, const char* key) {
  if (!m.is_object() || !m.contains(key) || m[key].is_null()) return "";
  if (!m[key].is_string()) throw Error(std::string("chat message: '") + key + "' must be a string, got " + m[key].dump());
  return m[key].get<std::string>();
}
std::string role_of(const json& m) {
  std::string r = str(m, "role");
  if (r != "system" && r != "user" && r != "assistant" && r != "tool")
    throw Error("chat message: unknown role '" + r + "' in " + m.dump().substr(0, 200));
  return r;
}

std::string strip_nl(std::string s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) while (b < e && s[b] == '\n') ++b;
  if (right) while (e > b && s[e - 1] == '\n') --e;
  return s.substr(b, e - b);
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace

void Rendered::literal(std::string_view t) {
  while (!t.empty()) {
    size_t best = std::string_view::npos, len = 0;
    for (std::string_view sp : kSpecials)
      if (size_t at = t.find(sp); at != std::string_view::npos && (at < best || (at == best && sp.size() > len)))
        best = at, len = sp.size();
    if (best == std::string_view::npos) return content(t);
    content(t.substr(0, best));
    parts_.push_back({true, std::string(t.substr(best, len))});
    t.remove_prefix(best + len);
  }
}

void Rendered::content(std::string_view text) {
  if (text.empty()) return;
  if (!parts_.empty() && !parts_.back().special) parts_.back().text += text;
  else parts_.push_back({false, std::string(text)});
}

std::string Rendered::text() const {
  std::string s;
  for (const auto& p : parts_) s += p.text;
  return s;
}

std::vector<int32_t> Rendered::tokens(const Tokenizer& tok) const {
  std::vector<int32_t> ids;
  for (const auto& p : parts_) {
    if (!p.special) {
      tok.encode_into(p.text, false, ids);
      continue;
    }
    auto id = tok.token_to_id(p.text);
    if (!id) throw Error("chat format: the tokenizer has no special token " + p.text);
    ids.push_back(*id);
  }
  return ids;
}

namespace {
template <class Json>
std::string template_json(const Json& v) {
  switch (v.type()) {
    case Json::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + template_json(v[i]);
      return s + "]";
    }
    case Json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it, first = false)
        s += (first ? "" : ", ") + Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace) + ": " +
             template_json(it.value());
      return s + "}";
    }
    default:
      return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}
}  // namespace

std::string to_template_json(const nlohmann::ordered_json& v) { return template_json(v); }
std::string to_template_json(const json& v) { return template_json(v); }

void ChatFormat::render(Rendered& out, const json& messages, const nlohmann::ordered_json& tools,
                        bool add_generation_prompt) const {
  if (!messages.is_array()) throw Error("chat format: messages must be a JSON array");
  bool has_tools = tools.is_array() && !tools.empty();
  bool first_system = !messages.empty() && role_of(messages[0]) == "system";
  if (has_tools) {
    std::string sys = first_system ? str(messages[0], "content") : "";
    render_tools_system(out, tools, first_system ? &sys : nullptr);
  } else if (first_system) {
    out.literal("<|im_start|>system\n");
    out.content(str(messages[0], "content"));
    out.literal("<|im_end|>\n");
  }
  // The last "real" user query: assistant turns after it keep their reasoning.
  long last_query = long(messages.size()) - 1;
  for (long i = long(messages.size()) - 1; i >= 0; --i) {
    const json& m = messages[size_t(i)];
    if (role_of(m) != "user") continue;
    std::string c = str(m, "content");
    if (starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>")) continue;
    last_query = i;
    break;
  }
  render_turns(out, messages, first_system ? 1 : 0, last_query);
  if (add_generation_prompt) render_generation_prompt(out);
}

void ChatFormat::render_turns(Rendered& out, const json& messages, size_t first, long last_query) const {
  for (size_t i = first; i < messages.size(); ++i) {
    const json& m = messages[i];
    std::string role = role_of(m);
    bool is_last = i + 1 == messages.size();
    if (role == "user" || role == "system") {
      out.literal("<|im_start|>" + role + "\n");
      out.content(str(m, "content"));
      out.literal("<|im_end|>\n");
    } else if (role == "assistant") {
      std::string content = str(m, "content"), reasoning;
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string()) {
        reasoning = m["reasoning_content"].get<std::string>();
      } else if (size_t close = content.rfind("</think>"); close != std::string::npos) {
        std::string before = content.substr(0, content.find("</think>"));
        before = strip_nl(before, false, true);
        if (size_t open = before.rfind("<think>"); open != std::string::npos) before = before.substr(open + 7);
        reasoning = strip_nl(before, true, false);
        content = strip_nl(content.substr(close + 8), true, false);
      }
      out.literal("<|im_start|>assistant\n");
      if (long(i) > last_query && think_block_after_query(is_last, !reasoning.empty())) {
        out.literal("<think>\n");
        out.content(strip_nl(reasoning, true, true));
        out.literal("\n</think>\n\n");
        out.content(strip_nl(content, true, false));
      } else {
        out.content(content);
      }
      if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty())
        render_tool_calls(out, m["tool_calls"], content.empty());
      out.literal("<|im_end|>\n");
    } else {  // tool results merge into one user turn
      if (i == first || role_of(messages[i - 1]) != "tool") out.literal("<|im_start|>user");
      out.literal("\n<tool_response>\n");
      out.content(str(m, "content"));
      out.literal("\n</tool_response>");
      if (is_last || role_of(messages[i + 1]) != "tool") out.literal("<|im_end|>\n");
    }
  }
}

std::vector<int32_t> ChatFormat::render_prompt(const json& messages, const nlohmann::ordered_json& tools,
                                               bool add_generation_prompt) const {
  Rendered r;
  render(r, messages, tools, add_generation_prompt);
  return r.tokens(*tok_);
}

std::string ChatFormat::render_text(const json& messages, const nlohmann::ordered_json& tools,
                                    bool add_generation_prompt) const {
  Rendered r;
  render(r, messages, tools, add_generation_prompt);
  return r.text();
}

std::vector<int32_t> ChatFormat::append_turns(std::span<const int32_t> existing, const json& new_messages,
                                              bool add_generation_prompt) const {
  if (!new_messages.is_array()) throw Error("append_turns: new messages must be a JSON array");
  for (const auto& m : new_messages) {
    std::string role = role_of(m);
    if (role != "tool" && role != "user")
      throw Error("append_turns: only tool results and user messages can be appended, not '" + role + "'");
  }
  Rendered r;
  // Close the sampled assistant turn as the template would have written it.
  int32_t im_end = *tok_->token_to_id("<|im_end|>");
  if (existing.empty() || existing.back() != im_end) r.literal("<|im_end|>");
  r.literal("\n");
  render_turns(r, new_messages, 0, -1);
  if (add_generation_prompt) render_generation_prompt(r);
  return r.tokens(*tok_);
}

void ChatFormat::extend(std::vector<int32_t>& sequence, const json& new_messages, bool add_generation_prompt) const {
  const std::vector<int32_t> before = sequence;
  auto added = append_turns(sequence, new_messages, add_generation_prompt);
  sequence.insert(sequence.end(), added.begin(), added.end());
  if (!std::equal(before.begin(), before.end(), sequence.begin()))
    throw Error("chat format: appending turns changed the existing tokens");
}

std::vector<int32_t> ChatFormat::generation_prompt() const {
  Rendered r;
  render_generation_prompt(r);
  return r.tokens(*tok_);
}

std::string ChatFormat::generation_prompt_text() const {
  Rendered r;
  render_generation_prompt(r);
  return r.text();
}

std::unique_ptr<ChatFormat> make_chat_format(std::string_view model_type, std::shared_ptr<const Tokenizer> tok,
                                             ChatOptions options) {
  if (!tok) throw Error("make_chat_format: no tokenizer");
  if (model_type == "qwen3" || model_type == "qwen3_moe") return make_qwen3_chat_format(std::move(tok), options);
  if (model_type == "qwen3_5" || model_type == "qwen3_5_moe" || model_type == "qwen3.5")
    return make_qwen35_chat_format(std::move(tok), options);
  throw Error("unknown chat format '" + std::string(model_type) + "' (known: qwen3, qwen3_moe, qwen3_5, qwen3_5_moe)");
}

}  // namespace mlpt::text
