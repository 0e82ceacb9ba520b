#include "grading.hpp"

#include <cctype>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace mlpt::r2e {

namespace {
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

const std::vector<std::string>& hidden_test_patterns() {
  static const std::vector<std::string> p = {"r2e_tests", "r2e_tests/*", "run_tests.sh"};
  return p;
}

std::string exclusion_script(const std::vector<std::string>& untracked, bool drop_added_hooks) {
  std::string s = "set --\n";
  std::set<std::string> seen;
  for (const auto& list : {untracked, hidden_test_patterns()})
    for (const auto& p : list)
      if (!p.empty() && seen.insert(p).second) s += "set -- \"$@\" " + quote("--exclude=" + p) + "\n";
  if (!drop_added_hooks) return s;
  // git apply: the first matching pattern decides; with any --include, unmatched paths are skipped,
  // hence the final --include='*' ('*' crosses '/').
  s += "git -c safe.directory='*' -c core.quotepath=false ls-files -- conftest.py '*/conftest.py' pytest.ini '*/pytest.ini' > /tmp/mlpt_tracked_hooks.$$\n"
       "while IFS= read -r f; do set -- \"$@\" \"--include=$f\"; done < /tmp/mlpt_tracked_hooks.$$\n"
       "set -- \"$@\" '--exclude=conftest.py' '--exclude=*/conftest.py' '--exclude=pytest.ini' '--exclude=*/pytest.ini' '--include=*'\n";
  return s;
}

std::string apply_command(const std::string& ws, const std::string& patch_file,
                          const std::vector<std::string>& untracked, const std::string& extra,
                          bool drop_added_hooks) {
  return "cd " + quote(ws) + " && {\n" + exclusion_script(untracked, drop_added_hooks) +
         "git -c safe.directory='*' apply --whitespace=fix" + (extra.empty() ? "" : " " + extra) +
         " \"$@\" " + quote(patch_file) + "\n} 2>&1";
}

std::string prepare_script(const std::string& ws, const std::string& patch_file,
                           const std::vector<std::string>& untracked, bool drop_added_hooks) {
  std::string s = "cd " + quote(ws) + " || exit 97\n"
                  "git -c safe.directory='*' -c core.quotepath=false ls-files --others --exclude-standard > /tmp/mlpt_untracked\n";
  s += exclusion_script(untracked, drop_added_hooks);
  // The grader's own untracked list goes first (before the includes of tracked pytest hooks).
  s += "while IFS= read -r f; do set -- \"--exclude=$f\" \"$@\"; done < /tmp/mlpt_untracked\n";
  // Every printed section is bounded, so a patch with huge or many files cannot push the markers
  // past the exec output limit.
  s += "echo @@UNTRACKED@@; head -c 262144 /tmp/mlpt_untracked; echo\n"
       "echo @@NUMSTAT@@; git -c safe.directory='*' apply --whitespace=fix --numstat \"$@\" " + quote(patch_file) + " 2>/dev/null | head -c 262144; echo\n"
       "echo @@APPLY@@; git -c safe.directory='*' apply --whitespace=fix \"$@\" " + quote(patch_file) + " > /tmp/mlpt_apply.out 2>&1\n"
       "rc=$?; head -c 65536 /tmp/mlpt_apply.out\n"
       "echo \"@@APPLY_RC@@ $rc\"\n"
       "rm -rf r2e_tests run_tests.sh\n";
  return s;
}

Prepared parse_prepare(const std::string& out) {
  Prepared p;
  size_t u = out.find("@@UNTRACKED@@\n"), n = out.find("@@NUMSTAT@@\n"), a = out.find("@@APPLY@@\n"),
         rc = out.rfind("@@APPLY_RC@@ ");
  if (u == std::string::npos || n == std::string::npos || a == std::string::npos || rc == std::string::npos || !(u < n && n < a && a < rc))
    return p;
  std::string list = out.substr(u + 14, n - u - 14);
  for (size_t start = 0; start < list.size();) {
    size_t nl = list.find('\n', start);
    if (nl == std::string::npos) nl = list.size();
    if (nl > start) p.untracked.push_back(list.substr(start, nl - start));
    start = nl + 1;
  }
  p.numstat = out.substr(n + 12, a - n - 12);
  p.apply_output = out.substr(a + 10, rc - a - 10);
  p.apply_exit = std::atoi(out.c_str() + rc + 13);
  p.complete = true;
  return p;
}

nlohmann::json json_field(const nlohmann::json& record, const std::string& key) {
  if (!record.contains(key)) throw std::invalid_argument("task record has no field \"" + key + "\"");
  const auto& v = record[key];
  if (!v.is_string()) return v;
  try {
    return nlohmann::json::parse(v.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("task record field \"" + key + "\" is not valid JSON: " + e.what());
  }
}

std::map<std::string, std::string> clean_test_names(const std::map<std::string, std::string>& tests) {
  std::map<std::string, std::string> decolored, out;
  for (const auto& [name, status] : tests) {
    std::string d;
    for (size_t i = 0; i < name.size(); ++i) {
      if (name[i] == '\x1b' && i + 1 < name.size() && name[i + 1] == '[') {
        size_t j = i + 2;
        while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
        if (j > i + 2 && j < name.size() && name[j] == 'm') {
          i = j;
          continue;
        }
      }
      d += name[i];
    }
    decolored[d] = status;
  }
  // In name order, a later name that cuts to the same one wins, as in R2E's dict comprehension.
  for (const auto& [name, status] : decolored) out[name.substr(0, name.find(" - "))] = status;
  return out;
}

Comparison compare(const std::map<std::string, std::string>& expected_raw,
                   const std::map<std::string, std::string>& got_raw) {
  // As R2E-Gym's reward: both maps' names cleaned alike; the parsed map must have as many entries
  // as the expected one, and every parsed entry but the key "" (a collection error without "::")
  // must be expected with its status.
  const auto expected = clean_test_names(expected_raw), got = clean_test_names(got_raw);
  Comparison c;
  if (got.size() != expected.size())
    c.mismatches.push_back({{"test", "(count)"}, {"expected", std::to_string(expected.size())}, {"got", std::to_string(got.size())}});
  for (const auto& [name, status] : got) {
    if (name.empty()) continue;
    auto it = expected.find(name);
    if (it == expected.end()) c.mismatches.push_back({{"test", name}, {"expected", "ABSENT"}, {"got", status}});
    else if (it->second != status) c.mismatches.push_back({{"test", name}, {"expected", it->second}, {"got", status}});
  }
  c.match = c.mismatches.empty() && !expected.empty();
  return c;
}

}  // namespace mlpt::r2e
