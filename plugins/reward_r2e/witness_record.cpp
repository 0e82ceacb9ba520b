#include "witness_record.hpp"

#include <set>

#include <mlpt/sdk/sha256.hpp>

namespace mlpt::r2e {

namespace {

const std::string kMarker = "\n@@MLPT_WITNESS@@ ";

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The summary's name of a pytest node id: the parts after the file, joined with '.' ("" without "::").
std::string summary_name(const std::string& nodeid) {
  size_t sep = nodeid.find("::");
  if (sep == std::string::npos) return "";
  std::string tail = nodeid.substr(sep + 2);
  for (size_t p; (p = tail.find("::")) != std::string::npos;) tail.replace(p, 2, ".");
  return tail;
}

// What the summary may say of one test, from the witness's own view of its phases.
struct Allowed {
  std::set<std::string> statuses;
  bool may_be_absent = false;
  std::string seen;  // "setup=ok call=exc teardown=ok"
};

Allowed allowed_of(const nlohmann::json& e) {
  Allowed a;
  const std::string setup = e.value("setup", "none"), call = e.value("call", "none"), teardown = e.value("teardown", "none");
  const bool xfail = e.value("xfail", false);
  a.seen = "setup=" + setup + " call=" + call + " teardown=" + teardown + (xfail ? " xfail-marked" : "");
  if (setup == "exc") a.statuses.insert("ERROR");
  else if (call == "ok") a.statuses.insert(xfail ? "FAILED" : "PASSED");  // a passing xfail: XPASS, or FAILED when strict
  else if (call == "exc" && !xfail) a.statuses.insert("FAILED");
  if (teardown == "exc") a.statuses.insert("ERROR");
  a.may_be_absent = xfail || a.statuses.empty();
  return a;
}

}  // namespace

std::string supervised_command(const std::string& dir, const std::string& key_file, const std::string& nonce,
                               const std::string& workspace, const std::string& command) {
  return "cd " + quote(workspace) + " && exec python3 -I -B " + quote(dir + "/supervisor.py") + " " + quote(key_file) + " " +
         quote(nonce) + " " + quote(workspace) + " " + quote(command);
}

WitnessRecord split_witness_record(const std::string& output, const std::string& key, const std::string& nonce) {
  WitnessRecord r;
  size_t at = output.rfind(kMarker);
  if (at == std::string::npos) return r.why = "the output has no record from the grading supervisor", r;
  const std::string line = output.substr(at + kMarker.size());
  size_t space = line.find(' ');
  if (line.empty() || line.back() != '\n' || line.find('\n') != line.size() - 1 || space != 64)
    return r.why = "bytes follow the grading supervisor's record", r;
  const std::string mac = line.substr(0, 64), text = line.substr(65, line.size() - 66);
  if (sdk::hmac_sha256_hex(key, text) != mac) return r.why = "the record's signature is not the grading supervisor's", r;
  try {
    r.record = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return r.why = "the signed record is not valid JSON", r;
  }
  if (!r.record.is_object() || r.record.value("nonce", "") != nonce) return r.why = "the record is from another grading", r;
  if (!r.record["out_bytes"].is_number_unsigned() || r.record["out_bytes"].get<uint64_t>() != at)
    return r.why = "the output holds bytes the supervisor did not forward", r;
  r.run_output = output.substr(0, at);
  if (sdk::sha256_hex(r.run_output) != r.record.value("out_sha256", ""))
    return r.why = "the output differs from what the supervisor forwarded", r;
  r.ok = true;
  return r;
}

WitnessVerdict cross_check(const nlohmann::json& record, const std::map<std::string, std::string>& summary, int exit_code) {
  WitnessVerdict v;
  auto fail = [&](const std::string& why) { return v.why = why, v; };
  std::map<std::string, Allowed> seen;
  const nlohmann::json* finish = nullptr;
  bool boot = false, collected = false;
  const auto& events = record.value("events", nlohmann::json::array());
  for (const auto& e : events) {
    if (!e.is_object() || !e.contains("t") || !e["t"].is_string()) continue;
    const std::string t = e["t"];
    if (t == "violation") v.violations.push_back({{"what", e.value("what", "")}, {"at", e.value("at", "")}});
    else if (t == "suspect") v.suspects.push_back({{"what", e.value("what", "")}, {"at", e.value("at", "")}});
    else if (t == "boot") boot = true;
    else if (t == "collected") collected = true;
    else if (t == "finish") finish = &e;
    else if (t == "test" && e.contains("id") && e["id"].is_string()) {
      Allowed a = allowed_of(e);
      auto [it, fresh] = seen.emplace(summary_name(e["id"]), a);
      if (!fresh) {  // the same name in two files: either may be the summary's line
        it->second.statuses.insert(a.statuses.begin(), a.statuses.end());
        it->second.may_be_absent = it->second.may_be_absent && a.may_be_absent;
      }
    }
  }
  if (record.value("exit", -1) != exit_code) return fail("the supervisor saw exit status " + std::to_string(record.value("exit", -1)));
  if (record.value("events_malformed", 0) != 0)
    return fail(std::to_string(record.value("events_malformed", 0)) + " lines on the witness's channel were not the witness's");
  if (record.value("events_cut", false)) return fail("the witness's events passed their limit");
  if (!v.violations.empty()) return fail("the witness refused: " + v.violations[0].value("what", ""));
  if (!boot) return fail("the witness did not start (the run did not use the supervisor's python3/pytest)");
  if (!collected || finish == nullptr) return fail("the witness saw no complete pytest session (the process ended inside it)");
  if (finish->value("exitstatus", -1) != exit_code)
    return fail("pytest ended with status " + std::to_string(finish->value("exitstatus", -1)) + " but the run exited " + std::to_string(exit_code));
  for (const auto& [name, status] : summary) {
    if (name.empty()) continue;  // a collection error: no test to compare
    auto it = seen.find(name);
    if (it == seen.end()) return fail("the summary lists " + name + ", which the witness did not see run");
    if (!it->second.statuses.count(status)) return fail("the summary says " + status + " " + name + ", the witness saw " + it->second.seen);
  }
  for (const auto& [name, a] : seen)
    if (!a.may_be_absent && !summary.count(name)) return fail("the summary leaves out " + name + " (the witness saw " + a.seen + ")");
  v.agrees = true;
  return v;
}

}  // namespace mlpt::r2e
