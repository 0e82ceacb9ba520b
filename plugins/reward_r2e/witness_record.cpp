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

WitnessVerdict judged_statuses(const nlohmann::json& record, int exit_code) {
  WitnessVerdict v;
  auto fail = [&](const std::string& why) { return v.why = why, v; };
  bool boot = false, finished = false;
  std::string untrusted;
  for (const auto& e : record.value("events", nlohmann::json::array())) {
    if (!e.is_object() || !e.contains("t") || !e["t"].is_string()) continue;
    const std::string t = e["t"], id = e.value("id", "");
    if (t == "violation" || t == "suspect")
      (t == "violation" ? v.violations : v.suspects)
          .push_back({{"what", e.value("what", "")}, {"at", e.value("at", "")}, {"child", e.value("child", "")}});
    else if (t == "boot") boot = true;
    else if (t == "finish") finished = true;
    else if (t == "untrusted" && untrusted.empty()) untrusted = (id.empty() ? "" : id + ": ") + e.value("why", "");
    else if (t == "verdict") v.statuses[summary_name(id)] = e.value("status", "");
  }
  if (record.value("exit", -1) != exit_code) return fail("the supervisor saw exit status " + std::to_string(record.value("exit", -1)));
  if (!record.value("judged", false)) return fail("the witness's judge never connected (the run did not use the supervisor's python3/pytest)");
  if (record.value("events_malformed", 0) != 0 || record.value("events_cut", false))
    return fail("the judge's events are malformed or passed their limit");
  if (!boot || !finished) return fail("the judge did not finish (the run ended inside it)");
  if (!v.violations.empty()) return fail("the witness refused: " + v.violations[0].value("what", ""));
  if (!untrusted.empty()) return fail("the judge could not trust " + untrusted);
  v.agrees = true;
  return v;
}

}  // namespace mlpt::r2e
