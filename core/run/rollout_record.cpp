#include "core/run/rollout_record.hpp"

#include <zlib.h>

#include <sstream>

#include "core/error.hpp"
#include "mlpt/reward.h"

namespace mlpt::run {
namespace {

using nlohmann::json;

json flag_names(uint32_t flags) {
  json names = json::array();
  if (flags & MLPT_REWARD_FLAG_HIT_LIMIT) names.push_back("hit_limit");
  if (flags & MLPT_REWARD_FLAG_TEST_TIMEOUT) names.push_back("test_timeout");
  if (flags & MLPT_REWARD_FLAG_AGENT_TIMEOUT) names.push_back("agent_timeout");
  return names;
}

// Lines of a gzip file (several members read as one stream); throws naming the file. A process that
// died mid-run leaves its member unterminated: the complete lines before that are returned.
std::vector<std::string> read_lines(const std::filesystem::path& file) {
  gzFile in = gzopen(file.c_str(), "rb");
  if (!in) throw Error(MLPT_NOT_FOUND, file.string() + ": cannot be read (no rollouts recorded?)");
  std::vector<std::string> lines;
  std::string line;
  char buf[65536];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (buf[i] == '\n') lines.push_back(std::move(line)), line.clear();
      else line += buf[i];
    }
  }
  // A truncated member may end the reads with 0 rather than -1; its error is still recorded.
  int code = Z_OK;
  const char* message = gzerror(in, &code);
  const std::string error = n < 0 || code != Z_OK ? std::string(message ? message : "read error") : "";
  gzclose(in);
  if (!error.empty() && lines.empty()) throw Error(MLPT_DATA_LOSS, file.string() + ": " + error);
  return lines;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::string content_of(const json& message) {
  if (!message.contains("content")) return "";
  const json& c = message["content"];
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{"type": "text", "text": ...}]
    std::string s;
    for (const auto& part : c)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) s += part["text"].get<std::string>();
    return s;
  }
  return c.dump();
}

}  // namespace

json rollout_json(const rollout::Trajectory& t, const json& task, bool validation, int64_t step) {
  json turns = json::array();
  for (const auto& turn : t.transcript.turns)
    turns.push_back({{"reply", turn.reply},
                     {"observation", turn.observation},
                     {"context_tokens", turn.context_tokens},
                     {"generated_tokens", turn.generated_tokens},
                     {"weight_version", turn.weight_version},
                     {"generation_s", turn.generation_s},
                     {"environment_s", turn.environment_s}});
  json record = {{"kind", validation ? "validation" : "train"},
                 {"step", step},
                 {"task", task.value("instance_id", std::string())},
                 {"prompt_index", t.prompt_index},
                 {"sample", t.sample_index},
                 {"weight_version", {{"min", t.min_weight_version}, {"max", t.max_weight_version}}},
                 {"tokens", {{"total", t.tokens.size()}, {"generated", t.generated_tokens()}}},
                 {"start_messages", t.transcript.start_messages},
                 {"turns", turns},
                 {"end", mlpt_episode_end_name(t.end)},
                 {"truncated", t.truncated},
                 {"result", t.transcript.result},
                 {"reward",
                  {{"value", t.reward},
                   {"reason", t.reward_reason},
                   {"flags", flag_names(t.reward_flags)},
                   {"details", t.transcript.reward_details}}},
                 {"timings",
                  {{"generation_s", t.generation_s},
                   {"environment_s", t.environment_s},
                   {"reward_s", t.reward_s},
                   {"core_s", t.core_s}}}};
  if (!t.rollout_worker.empty()) record["rollout_worker"] = t.rollout_worker;
  return record;
}

RolloutRecorder::RolloutRecorder(const std::filesystem::path& output_dir) : path_(output_dir / kRolloutsFile) {
  if (std::filesystem::exists(path_)) {
    auto lines = read_lines(path_);
    next_id_ = static_cast<int64_t>(lines.size());
    // An earlier attempt that crashed may have left its member open, and appending after it would
    // make the rest unreadable: the complete records are rewritten as one closed member first.
    {
      const auto tmp = path_.string() + ".tmp";
      gzFile out = gzopen(tmp.c_str(), "wb6");
      if (!out) throw Error(MLPT_UNAVAILABLE, tmp + ": cannot be opened for writing");
      for (auto& l : lines) l += '\n', gzwrite(out, l.data(), static_cast<unsigned>(l.size()));
      if (gzclose(out) != Z_OK) throw Error(MLPT_DATA_LOSS, tmp + ": write failed");
      std::filesystem::rename(tmp, path_);
    }
  }
  file_ = gzopen(path_.c_str(), "ab6");
  if (!file_) throw Error(MLPT_UNAVAILABLE, path_.string() + ": cannot be opened for writing");
}

RolloutRecorder::~RolloutRecorder() {
  if (file_) gzclose(static_cast<gzFile>(file_));
}

int64_t RolloutRecorder::record(const json& record) {
  std::lock_guard lock(mutex_);
  const int64_t id = next_id_++;
  json line = {{"id", id}};
  line.update(record);
  const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (gzwrite(static_cast<gzFile>(file_), text.data(), static_cast<unsigned>(text.size())) != static_cast<int>(text.size()))
    throw Error(MLPT_DATA_LOSS, path_.string() + ": write failed");
  // Each record is decodable on its own once flushed, so a crash loses at most the one in flight.
  gzflush(static_cast<gzFile>(file_), Z_SYNC_FLUSH);
  return id;
}

void RolloutRecorder::flush() {
  std::lock_guard lock(mutex_);
  gzflush(static_cast<gzFile>(file_), Z_SYNC_FLUSH);
}

std::vector<json> read_rollouts(const std::filesystem::path& output_dir) {
  const auto file = output_dir / kRolloutsFile;
  std::vector<json> records;
  int64_t n = 0;
  for (const auto& line : read_lines(file)) {
    ++n;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) throw Error(MLPT_DATA_LOSS, file.string() + ": record " + std::to_string(n) + " is not JSON");
    records.push_back(std::move(j));
  }
  return records;
}

std::string format_transcript(const json& r) {
  std::ostringstream out;
  const json& reward = r["reward"];
  out << "rollout " << r.value("id", int64_t(-1)) << ": " << r.value("kind", "") << " step " << r.value("step", int64_t(0))
      << ", task " << r.value("task", "") << " (prompt " << r.value("prompt_index", int64_t(0)) << ", sample "
      << r.value("sample", 0) << "), weights v" << r["weight_version"].value("min", uint64_t(0)) << "..v"
      << r["weight_version"].value("max", uint64_t(0)) << "\n";
  out << "reward " << reward.value("value", 0.0) << " (" << reward.value("reason", "") << ")";
  if (!reward["flags"].empty()) out << " flags " << reward["flags"].dump();
  out << "; ended: " << r.value("end", "") << (r.value("truncated", false) ? " (truncated)" : "") << "; "
      << r["tokens"].value("total", int64_t(0)) << " tokens, " << r["tokens"].value("generated", int64_t(0)) << " generated\n";
  const json& tm = r["timings"];
  out << "time: generation " << tm.value("generation_s", 0.0) << " s, environment " << tm.value("environment_s", 0.0)
      << " s, reward " << tm.value("reward_s", 0.0) << " s, core " << tm.value("core_s", 0.0) << " s\n";
  for (const auto& m : r["start_messages"])
    out << "\n[" << m.value("role", "?") << "]\n" << indent(content_of(m), "  ") << "\n";
  int n = 0;
  for (const auto& turn : r["turns"]) {
    out << "\n--- turn " << ++n << " (context " << turn.value("context_tokens", int64_t(0)) << " tokens, generated "
        << turn.value("generated_tokens", int64_t(0)) << ", weights v" << turn.value("weight_version", uint64_t(0)) << ", "
        << turn.value("generation_s", 0.0) << " s) ---\n";
    const json& reply = turn["reply"];
    out << "[assistant]\n" << indent(reply.value("content", std::string()), "  ") << "\n";
    if (reply.contains("tool_calls"))
      for (const auto& call : reply["tool_calls"]) {
        const json& f = call.contains("function") ? call["function"] : call;
        out << "  -> tool call " << f.value("name", std::string("?")) << " "
            << (f.contains("arguments") ? (f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump()) : "")
            << "\n";
      }
    if (reply.contains("parse_errors") && !reply["parse_errors"].empty()) out << "  !! parse errors " << reply["parse_errors"].dump() << "\n";
    if (turn.contains("observation") && turn["observation"].is_object() && turn["observation"].contains("messages"))
      for (const auto& m : turn["observation"]["messages"])
        out << "[" << m.value("role", "?") << (m.contains("name") ? " " + m.value("name", std::string()) : "") << "]\n"
            << indent(content_of(m), "  ") << "\n";
  }
  out << "\nresult: " << r["result"].dump() << "\nreward details: " << reward["details"].dump() << "\n";
  return out.str();
}

}  // namespace mlpt::run
