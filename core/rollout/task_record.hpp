// R2E-Gym task records (docs/benchmark.md §4): one JSON object per JSONL line with the fields of the
// dataset; a malformed row is an error naming file, line and field. The sandbox image of a record
// is <images>/<repo_name>_final_<commit_hash>.sif.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::rollout {

struct TaskRecord {
  int64_t line = 0;          // 1-based line in its file
  std::string instance_id;   // {owner}__{repo}-{commit}
  std::string repo_name, commit_hash, base_commit, problem_statement;
  std::map<std::string, std::string> expected;  // test name -> PASSED | FAILED | ERROR
  nlohmann::json row;        // the record as read (what harness and reward receive)

  std::filesystem::path image(const std::filesystem::path& images) const;
};

// Checks one row; `where` ("file:line") prefixes every error.
TaskRecord parse_task_record(const nlohmann::json& row, const std::string& where);
std::vector<TaskRecord> load_task_records(const std::filesystem::path& file);
// The record whose instance id is `id`, or the only one whose id contains it; throws otherwise.
const TaskRecord& find_task(const std::vector<TaskRecord>& tasks, const std::string& id);

}  // namespace mlpt::rollout
