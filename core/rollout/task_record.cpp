#include "core/rollout/task_record.hpp"

#include <fstream>

#include "core/error.hpp"

namespace mlpt::rollout {

namespace {

using nlohmann::json;

const json& field(const json& row, const std::string& where, const char* name, json::value_t a,
                  json::value_t b = json::value_t::discarded) {
  if (!row.contains(name)) throw Error(MLPT_INVALID_ARGUMENT, where + ": missing field \"" + name + "\"");
  const json& v = row[name];
  auto t = v.type();
  bool ok = t == a || t == b || (a == json::value_t::number_integer && v.is_number_integer());
  if (!ok) throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"" + name + "\" has type " + v.type_name());
  return v;
}

// A field R2E-Gym stores either as JSON text or as the JSON itself.
json json_or_text(const json& row, const std::string& where, const char* name) {
  const json& v = field(row, where, name, json::value_t::string, json::value_t::object);
  if (!v.is_string()) return v;
  try {
    return json::parse(v.get<std::string>());
  } catch (const json::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"" + name + "\" is not valid JSON text: " + e.what());
  }
}

}  // namespace

std::filesystem::path TaskRecord::image(const std::filesystem::path& images) const {
  return images / (repo_name + "_final_" + commit_hash + ".sif");
}

TaskRecord parse_task_record(const json& row, const std::string& where) {
  if (!row.is_object()) throw Error(MLPT_INVALID_ARGUMENT, where + ": a task record must be a JSON object");
  using t = json::value_t;
  TaskRecord r;
  r.repo_name = field(row, where, "repo_name", t::string).get<std::string>();
  const std::string image = field(row, where, "docker_image", t::string).get<std::string>();
  r.commit_hash = field(row, where, "commit_hash", t::string).get<std::string>();
  if (r.repo_name.empty() || r.repo_name.find('/') != std::string::npos)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"repo_name\" must be a non-empty name without '/'");
  if (r.commit_hash.empty() || r.commit_hash.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"commit_hash\" must be a lower-case hex commit id");
  json pcc = json_or_text(row, where, "parsed_commit_content");
  if (pcc.is_object() && pcc.contains("old_commit_hash") && pcc["old_commit_hash"].is_string())
    r.base_commit = pcc["old_commit_hash"].get<std::string>();
  json_or_text(row, where, "execution_result_content");
  for (const char* list : {"modified_files", "modified_entity_summaries", "relevant_files"})
    field(row, where, list, t::array);
  for (const char* count : {"num_non_test_files", "num_non_test_func_methods", "num_non_test_lines"})
    field(row, where, count, t::number_integer, t::number_unsigned);
  field(row, where, "prompt", t::string);
  r.problem_statement = field(row, where, "problem_statement", t::string).get<std::string>();
  json expected = json_or_text(row, where, "expected_output_json");
  if (!expected.is_object() || expected.empty())
    throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"expected_output_json\" must map test names to statuses");
  for (auto& [name, status] : expected.items()) {
    if (!status.is_string() || (status != "PASSED" && status != "FAILED" && status != "ERROR"))
      throw Error(MLPT_INVALID_ARGUMENT, where + ": field \"expected_output_json\": test \"" + name +
                                             "\" has status " + status.dump() + " (expected PASSED, FAILED or ERROR)");
    r.expected[name] = status.get<std::string>();
  }
  if (row.contains("instance_id")) {
    r.instance_id = field(row, where, "instance_id", t::string).get<std::string>();
  } else {
    size_t slash = image.find('/');
    std::string owner = slash == std::string::npos ? r.repo_name : image.substr(0, slash);
    r.instance_id = owner + "__" + r.repo_name + "-" + r.commit_hash;
  }
  r.row = row;
  return r;
}

std::vector<TaskRecord> load_task_records(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(MLPT_NOT_FOUND, file.string() + ": task file cannot be read");
  std::vector<TaskRecord> tasks;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file.string() + ":" + std::to_string(n);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::parse_error& e) {
      throw Error(MLPT_INVALID_ARGUMENT, where + ": not valid JSON at byte " + std::to_string(e.byte) + " of the line: " + e.what());
    }
    tasks.push_back(parse_task_record(row, where));
    tasks.back().line = n;
  }
  if (tasks.empty()) throw Error(MLPT_INVALID_ARGUMENT, file.string() + ": no task records");
  return tasks;
}

const TaskRecord& find_task(const std::vector<TaskRecord>& tasks, const std::string& id) {
  const TaskRecord* partial = nullptr;
  int partial_count = 0;
  for (const auto& t : tasks) {
    if (t.instance_id == id) return t;
    if (t.instance_id.find(id) != std::string::npos) partial = &t, ++partial_count;
  }
  if (partial_count == 1) return *partial;
  // Name the candidates: the ones that matched, else every task (up to a screenful).
  std::string list;
  int listed = 0;
  for (const auto& t : tasks)
    if ((!partial_count || t.instance_id.find(id) != std::string::npos) && listed++ < 20) list += "\n  " + t.instance_id;
  if (listed > 20) list += "\n  ... and " + std::to_string(listed - 20) + " more";
  throw Error(MLPT_NOT_FOUND, "task \"" + id + "\": " +
                                  (partial_count ? std::to_string(partial_count) + " tasks match; give the full instance id:"
                                                 : "no task has this instance id; the tasks are:") + list);
}

}  // namespace mlpt::rollout
