// Plugin mlpt_engine_scripted: component engine "scripted", answers with recorded assistant turns so
// whole rollouts run without a model. Tokenizer-agnostic for byte-level BPE vocabularies: each
// byte is emitted as its single base token (the GPT-2 bytes-to-unicode character), which any
// byte-level decoder turns back into exactly the recorded text.
//
// Config: {"tokenizer": "tokenizer.json", "script": "replies.jsonl", "stop_token": "<|im_end|>",
//          "turn_marker": "<|im_start|>assistant", "max_sequence_length": 65536}
// Script rows: {"match": "text that identifies the prompt", "turns": ["assistant text", ...]}.
// The reply for a prompt: the first row whose match occurs in the decoded prompt, turn index =
// assistant turns already in the prompt (turn markers before the last one). Logprobs are 0.0.
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/settings.hpp>

#include <array>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace {

using mlpt::sdk::Error;
using nlohmann::json;

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100 onwards.
std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> map{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? b : next++;
  return map;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else if (cp < 0x800) s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  else s += static_cast<char>(0xE0 | (cp >> 12)), s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(MLPT_NOT_FOUND, std::string("engine scripted: ") + what + " " + path + " cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ScriptedEngine final : public mlpt::sdk::Engine {
 public:
  explicit ScriptedEngine(std::string_view config_json) {
    mlpt::sdk::Settings s(config_json, "engine scripted");
    const std::string tokenizer = s.string("tokenizer"), script = s.string("script");
    stop_text_ = s.string_or("stop_token", stop_text_);
    marker_ = s.string_or("turn_marker", marker_);
    max_len_ = s.integer_or("max_sequence_length", max_len_, 1);
    s.reject_unknown();
    load_vocab(tokenizer);
    load_script(script);
  }

  void model_info(mlpt_engine_model_info& info) override {
    info.vocab_size = vocab_size_;
    info.num_moe_layers = 0;
    info.experts_per_token = 0;
    info.max_sequence_length = max_len_;
    info.weight_version = version_;
  }

  // The reply is known at once: the request completes (its callback runs) before submit returns,
  // unless the engine is paused; then it completes at resume.
  void submit(std::shared_ptr<mlpt::sdk::GenerationRequest> request) override {
    auto& a = *request;
    if (a.tokens.empty()) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: empty prompt");
    if (a.max_new_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: max_new_tokens must be >= 1");
    if (a.record_routed_experts) throw Error(MLPT_UNIMPLEMENTED, "engine scripted: no routed experts (a scripted engine has no experts)");
    const std::string prompt = decode(a.tokens.data(), a.tokens.size());
    const Row* row = nullptr;
    for (const auto& r : rows_)
      if (prompt.find(r.match) != std::string::npos) {
        row = &r;
        break;
      }
    if (!row) throw Error(MLPT_NOT_FOUND, "engine scripted: no script row matches the prompt");
    size_t markers = 0;
    for (size_t at = prompt.find(marker_); at != std::string::npos; at = prompt.find(marker_, at + marker_.size())) ++markers;
    const size_t turn = markers > 0 ? markers - 1 : 0;  // the last marker opens the turn being generated
    std::vector<int32_t>& out = a.out_tokens;
    if (turn < row->turns.size())
      for (unsigned char b : row->turns[turn]) out.push_back(byte_id_[b]);
    out.push_back(stop_id_);
    const size_t cap = static_cast<size_t>(a.max_new_tokens);
    const mlpt_finish_reason reason = out.size() <= cap ? MLPT_FINISH_STOP : MLPT_FINISH_LENGTH;
    if (out.size() > cap) out.resize(cap);
    a.out_logprobs.assign(out.size(), 0.0f);
    {
      std::lock_guard l(mutex_);
      if (paused_) {
        held_.push_back({std::move(request), reason});
        return;
      }
    }
    a.out_weight_version = version_;
    request->finish(reason);
  }

  void cancel(uint64_t request_id) override {
    std::shared_ptr<mlpt::sdk::GenerationRequest> cancelled;
    {
      std::lock_guard l(mutex_);
      for (auto it = held_.begin(); it != held_.end(); ++it)
        if (it->request->id == request_id) {
          cancelled = std::move(it->request);
          held_.erase(it);
          break;
        }
    }
    if (!cancelled) return;  // unknown or finished: not an error
    cancelled->out_tokens.clear();
    cancelled->out_logprobs.clear();
    cancelled->out_weight_version = version_;
    cancelled->finish(MLPT_FINISH_CANCELLED);
  }
  void session_release(uint64_t) override {}
  void pause() override {
    std::lock_guard l(mutex_);
    if (paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine scripted: already paused (pause does not nest)");
    paused_ = true;
  }
  void resume() override {
    std::vector<Held> held;
    {
      std::lock_guard l(mutex_);
      if (!paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine scripted: not paused");
      paused_ = false;
      held.swap(held_);
    }
    for (auto& h : held) {
      h.request->out_weight_version = version_;
      h.request->finish(h.reason);
    }
  }
  void load_weights(const mlpt_load_weights_args& a) override {
    if (a.version <= version_) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: weight version must increase");
    version_ = a.version;
  }

 private:
  struct Row {
    std::string match;
    std::vector<std::string> turns;
  };

  void load_vocab(const std::string& path) {
    json tok = json::parse(read_file(path, "tokenizer"), nullptr, false);
    if (!tok.is_object() || !tok.contains("model") || !tok["model"].contains("vocab") || !tok["model"]["vocab"].is_object())
      throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + " has no model.vocab object");
    const auto cps = byte_to_codepoint();
    std::unordered_map<std::string, int> byte_of;
    for (int b = 0; b < 256; ++b) byte_of[utf8(cps[b])] = b;
    byte_id_.fill(-1);
    for (auto& [token, id] : tok["model"]["vocab"].items()) {
      int32_t i = id.get<int32_t>();
      vocab_size_ = std::max<int64_t>(vocab_size_, i + 1);
      std::string bytes;
      bool ok = true;
      for (size_t p = 0; p < token.size() && ok;) {  // token text: byte-level characters
        unsigned char c = token[p];
        size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        auto it = byte_of.find(token.substr(p, n));
        if (it == byte_of.end()) ok = false;
        else bytes += static_cast<char>(it->second);
        p += n;
      }
      if (!ok) continue;
      if (bytes.size() == 1) byte_id_[static_cast<unsigned char>(bytes[0])] = i;
      id_bytes_[i] = bytes;
    }
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
      for (const auto& t : tok["added_tokens"]) {
        int32_t i = t["id"].get<int32_t>();
        id_bytes_[i] = t["content"].get<std::string>();
        vocab_size_ = std::max<int64_t>(vocab_size_, i + 1);
        if (t["content"] == stop_text_) stop_id_ = i;
      }
    for (int b = 0; b < 256; ++b)
      if (byte_id_[b] < 0)
        throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + " lacks the base token of byte " + std::to_string(b) +
                                               " (not a byte-level BPE vocabulary)");
    if (stop_id_ < 0) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + " has no added token " + stop_text_);
  }

  void load_script(const std::string& path) {
    std::istringstream in(read_file(path, "script"));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json r = json::parse(line, nullptr, false);
      if (!r.is_object() || !r.contains("match") || !r["match"].is_string() || r["match"].get<std::string>().empty() ||
          !r.contains("turns") || !r["turns"].is_array())
        throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + ":" + std::to_string(n) +
                                               ": a row is {\"match\": non-empty str, \"turns\": [str, ...]}");
      Row row{r["match"].get<std::string>(), {}};
      for (const auto& t : r["turns"]) {
        if (!t.is_string()) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + ":" + std::to_string(n) + ": turns must be strings");
        row.turns.push_back(t.get<std::string>());
      }
      rows_.push_back(std::move(row));
    }
    if (rows_.empty()) throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: " + path + " has no rows");
  }

  std::string decode(const int32_t* ids, size_t n) const {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      auto it = id_bytes_.find(ids[i]);
      if (it == id_bytes_.end())
        throw Error(MLPT_INVALID_ARGUMENT, "engine scripted: token id " + std::to_string(ids[i]) + " is not in the vocabulary");
      s += it->second;
    }
    return s;
  }

  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<int32_t, std::string> id_bytes_;
  std::vector<Row> rows_;
  std::string stop_text_ = "<|im_end|>", marker_ = "<|im_start|>assistant";
  int32_t stop_id_ = -1;
  int64_t vocab_size_ = 0, max_len_ = 65536;
  std::atomic<uint64_t> version_{0};
  struct Held {
    std::shared_ptr<mlpt::sdk::GenerationRequest> request;
    mlpt_finish_reason reason;
  };
  std::mutex mutex_;
  bool paused_ = false;
  std::vector<Held> held_;  // answered while paused: completed at resume
};

const mlpt_engine_capabilities kCapabilities = {MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE, /*returns_logprobs=*/1,
                                                /*returns_routed_experts=*/0, /*keeps_sessions=*/0,
                                                /*supports_cancel=*/0, /*deterministic_seed=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt_engine_scripted", "0.1.0",
                mlpt::sdk::engine_component<ScriptedEngine>("scripted", "answers with recorded assistant turns, one token per byte",
                                                         &kCapabilities))
