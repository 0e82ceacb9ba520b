#include "bash_tool.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "text_util.hpp"

namespace mlpt::openhands {

const char* const kTimeoutMessageTemplate =
    "You may wait longer to see additional output by sending empty command '', send other commands to interact with "
    "the current process, send keys to interrupt/kill the command, or use the timeout parameter in execute_bash for "
    "future commands.";
const char* const kContinuePrefix = "[Below is the output of the previous command.]\n";

namespace {

// Arguments: MODE (run|poll|key) HARD SOFT CAP (deciseconds; HARD 0 = soft rules) [SIGNAL].
// The command runs in a background subshell of its own process group whose EXIT trap saves the
// cwd, the exported environment, the interpreter and the exit code; the driver polls the output
// file and prints what is new (head and tail when huge) followed by its status lines.
const char* const kDriver = R"DRIVER(#!/bin/bash
__mlpt_s=$(cd "$(dirname "$0")" && pwd)
mode=$1 hard=$2 soft=$3 cap=$4 sig=$5
half=65536
now() {
  local t=$EPOCHREALTIME
  if [ -n "$t" ]; then t=${t//[.,]/}; echo $(( 10#$t / 100000 )); else echo $(( $(date +%s%N) / 100000000 )); fi
}
running() { [ -f "$__mlpt_s/pid" ] && [ ! -f "$__mlpt_s/done" ] && kill -0 "$(cat "$__mlpt_s/pid")" 2>/dev/null; }
status=
case "$mode" in
run)
  if running; then status=busy; else
    rm -f "$__mlpt_s/done" "$__mlpt_s/pid" "$__mlpt_s/reported"; : > "$__mlpt_s/out"; echo 0 > "$__mlpt_s/shown"
    cwd=$(cat "$__mlpt_s/cwd" 2>/dev/null)
    cd "${cwd:-/testbed}" 2>/dev/null || cd /testbed 2>/dev/null || cd /
    set -m
    ( trap 'ec=$?; pwd > "'"$__mlpt_s"'/cwd"; export -p > "'"$__mlpt_s"'/env"; command -v python > "'"$__mlpt_s"'/py" 2>/dev/null; echo $ec > "'"$__mlpt_s"'/done"' EXIT
      trap 'exit 130' INT; trap 'exit 129' HUP; trap 'exit 131' QUIT; trap 'exit 143' TERM
      [ -f "$__mlpt_s/env" ] && . "$__mlpt_s/env" >/dev/null 2>&1
      . "$__mlpt_s/cmd" ) < /dev/null > "$__mlpt_s/out" 2>&1 &
    echo $! > "$__mlpt_s/pid"
    set +m
  fi ;;
key)
  if running; then
    p=$(cat "$__mlpt_s/pid"); kill -s "$sig" -- "-$p" 2>/dev/null || kill -s "$sig" "$p" 2>/dev/null
  else status=none; fi ;;
poll)
  if ! running && { [ ! -f "$__mlpt_s/done" ] || [ -f "$__mlpt_s/reported" ]; }; then status=none; fi ;;
esac
if [ -z "$status" ]; then
  start=$(now); last=$start; size=$(stat -c %s "$__mlpt_s/out" 2>/dev/null || echo 0)
  while :; do
    if [ -f "$__mlpt_s/done" ]; then status=done; break; fi
    if ! kill -0 "$(cat "$__mlpt_s/pid" 2>/dev/null)" 2>/dev/null; then
      sleep 0.05; if [ -f "$__mlpt_s/done" ]; then status=done; else status=lost; fi; break
    fi
    t=$(now); s=$(stat -c %s "$__mlpt_s/out" 2>/dev/null || echo 0)
    if [ "$s" != "$size" ]; then size=$s; last=$t; fi
    if [ "$hard" -gt 0 ]; then
      if [ $((t - start)) -ge "$hard" ]; then status=hard; break; fi
    else
      if [ $((t - last)) -ge "$soft" ]; then status=soft; break; fi
      if [ $((t - start)) -ge "$cap" ]; then status=cap; break; fi
    fi
    sleep 0.05
  done
fi
shown=$(cat "$__mlpt_s/shown" 2>/dev/null || echo 0); size=$(stat -c %s "$__mlpt_s/out" 2>/dev/null || echo 0)
n=$((size - shown))
if [ "$n" -gt $((2 * half)) ]; then
  tail -c +$((shown + 1)) "$__mlpt_s/out" | head -c "$half"; printf '\n@@MLPT_CUT@@\n'; tail -c "$half" "$__mlpt_s/out"
elif [ "$n" -gt 0 ]; then
  tail -c +$((shown + 1)) "$__mlpt_s/out" | head -c "$n"
fi
echo "$size" > "$__mlpt_s/shown"
[ "$status" = done ] && : > "$__mlpt_s/reported"
printf '\n@@MLPT_STATUS@@ %s %s\n@@MLPT_CWD@@ %s\n@@MLPT_PY@@ %s\n' "$status" "$(cat "$__mlpt_s/done" 2>/dev/null || echo -1)" \
  "$(cat "$__mlpt_s/cwd" 2>/dev/null || echo /testbed)" "$(cat "$__mlpt_s/py" 2>/dev/null)"
)DRIVER";

std::string special_key_of(const std::string& command) {
  std::string c(rstrip(command));
  size_t b = c.find_first_not_of(" \t\n");
  c = b == std::string::npos ? "" : c.substr(b);
  return c.size() == 3 && c[0] == 'C' && c[1] == '-' ? c : "";
}

const char* signal_of(const std::string& key) {
  if (key == "C-c") return "INT";
  if (key == "C-d") return "HUP";
  if (key == "C-z") return "TSTP";
  if (key == "C-\\") return "QUIT";
  return nullptr;
}

}  // namespace

std::string python_number(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  double d = v.get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) return std::to_string(static_cast<int64_t>(d)) + ".0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

std::string truncate_observation(const std::string& text, size_t max_chars) {
  const size_t n = code_points(text);
  if (max_chars == 0 || n <= max_chars) return text;
  const size_t half = max_chars / 2;
  return text.substr(0, byte_offset(text, half)) + "\n[... Observation truncated due to length ...]\n" +
         text.substr(byte_offset(text, n - half));
}

DriverReport parse_driver_output(const std::string& raw) {
  DriverReport r;
  size_t at = raw.rfind("\n@@MLPT_STATUS@@ ");
  if (at == std::string::npos) {
    r.status = "lost";
    r.output = raw;
    return r;
  }
  r.output = raw.substr(0, at);
  auto field = [&](const std::string& tag) {
    size_t p = raw.find(tag, at);
    if (p == std::string::npos) return std::string();
    p += tag.size();
    size_t e = raw.find('\n', p);
    return raw.substr(p, e == std::string::npos ? std::string::npos : e - p);
  };
  std::string status = field("\n@@MLPT_STATUS@@ ");
  size_t sp = status.find(' ');
  r.status = status.substr(0, sp);
  if (sp != std::string::npos) {
    try {
      r.exit_code = std::stoi(status.substr(sp + 1));
    } catch (...) {
      r.exit_code = -1;
    }
  }
  r.cwd = field("\n@@MLPT_CWD@@ ");
  r.python = field("\n@@MLPT_PY@@ ");
  if (r.status != "done") r.exit_code = -1;
  // A huge output was cut in the middle by the driver; the observation cap removes that region.
  size_t cut = r.output.find("\n@@MLPT_CUT@@\n");
  if (cut != std::string::npos) r.output.replace(cut, 14, "\n");
  return r;
}

std::string format_observation(const DriverReport& r, const std::string& prefix, const std::string& command,
                               const std::string& timeout_text, const std::string& special_key) {
  std::string out = prefix + std::string(rstrip(valid_utf8(r.output)));
  if (r.status == "done") {
    out += "\n[The command completed with exit code " + std::to_string(r.exit_code) + "." +
           (special_key.empty() ? "" : " CTRL+" + std::string(1, special_key[2] >= 'a' && special_key[2] <= 'z'
                                                                     ? char(special_key[2] - 32) : special_key[2]) +
                                           " was sent.") + "]";
  } else if (r.status == "soft") {
    out += "\n[The command has no new output after " + timeout_text + " seconds. " + kTimeoutMessageTemplate + "]";
  } else if (r.status == "hard" || r.status == "cap") {
    out += "\n[The command timed out after " + timeout_text + " seconds. " + kTimeoutMessageTemplate + "]";
  } else if (r.status == "busy") {
    out += "\n[Your command \"" + command +
           "\" is NOT executed. The previous command is still running - You CANNOT send new commands until the "
           "previous command is completed. By setting `is_input` to `true`, you can interact with the current process: " +
           kTimeoutMessageTemplate + "]";
  } else if (r.status == "lost") {
    out += "\n[The command was stopped before it completed.]";
  }
  if (!r.cwd.empty()) out += "\n[Current working directory: " + r.cwd + "]";
  if (!r.python.empty()) out += "\n[Python interpreter: " + r.python + "]";
  if (r.status == "done") out += "\n[Command finished with exit code " + std::to_string(r.exit_code) + "]";
  return out;
}

std::string BashTool::install_command() const {
  const std::string d = shell_quote(dir_);
  // Whatever the agent left where the state folder or its files go (a file, a link, folders) goes first.
  return "{ [ -d " + d + " ] && [ ! -L " + d + " ]; } || rm -rf -- " + d + "; rm -rf -- " + d + "/driver.sh " + d + "/cmd " + d +
         "/cwd 2>/dev/null; mkdir -p " + d + " && cat > " + d + "/driver.sh <<'MLPT_DRIVER_EOF'\n" + kDriver + "MLPT_DRIVER_EOF\n" +
         "chmod 755 " + d + "/driver.sh && printf '%s\\n' " + shell_quote(start_dir_) + " > " + d + "/cwd";
}

void BashTool::install() {
  ShellResult r = ws_.shell(install_command(), 30000);
  if (r.exit_code != 0) throw std::runtime_error("cannot install the execute_bash driver in " + dir_ + ": " + r.output);
}

std::string BashTool::run(const nlohmann::json& args) {
  const std::string command = args.contains("command") && args["command"].is_string() ? args["command"].get<std::string>()
                              : args.contains("command") ? args["command"].dump() : "";
  bool is_input = false;
  if (args.contains("is_input")) {
    const auto& v = args["is_input"];
    is_input = v.is_boolean() ? v.get<bool>() : v.is_string() && (v.get<std::string>() == "true" || v.get<std::string>() == "True");
  }
  double hard_s = 0;
  std::string timeout_text;
  if (args.contains("timeout") && args["timeout"].is_number() && args["timeout"].get<double>() > 0) {
    hard_s = std::min(args["timeout"].get<double>(), limits_.max_command_s);
    timeout_text = hard_s < args["timeout"].get<double>() ? python_number(nlohmann::json(hard_s)) : python_number(args["timeout"]);
  }
  auto ds = [](double s) { return std::to_string(std::max<int64_t>(1, std::llround(s * 10))); };
  const std::string hard = hard_s > 0 ? ds(hard_s) : "0";
  const std::string tail = " " + hard + " " + ds(limits_.soft_timeout_s) + " " + ds(limits_.max_command_s);
  const int64_t exec_ms = static_cast<int64_t>((std::max(hard_s, limits_.max_command_s) + 30) * 1000);
  const std::string driver = "bash " + shell_quote(dir_ + "/driver.sh") + " ";
  const std::string key = special_key_of(command);
  auto soft_text = [&] {
    double s = limits_.soft_timeout_s;
    return s == std::floor(s) ? std::to_string(static_cast<int64_t>(s)) : python_number(nlohmann::json(s));
  };
  auto limit_text = [&] { return timeout_text.empty() ? python_number(nlohmann::json(static_cast<int64_t>(limits_.max_command_s))) : timeout_text; };
  auto finish = [&](const ShellResult& r, const std::string& prefix) {
    DriverReport rep = parse_driver_output(r.output);
    // The agent may have removed or replaced the driver (a folder, a link, a huge file): check it in
    // the sandbox by type and size, never read it into the host.
    const std::string drv = shell_quote(dir_ + "/driver.sh");
    if (r.output.find("@@MLPT_STATUS@@") == std::string::npos &&
        ws_.shell("[ -f " + drv + " ] && [ ! -L " + drv + " ] && [ \"$(stat -c %s -- " + drv + ")\" = " +
                      std::to_string(std::string_view(kDriver).size()) + " ]", 30000).exit_code != 0) {
      install();  // the agent removed the state folder; the next call works again
      rep.output += "\n[The shell session was reset.]";
    }
    if (rep.status == "none") return std::string("ERROR: No previous running command to retrieve logs from.");
    std::string t = rep.status == "soft" ? soft_text() : limit_text();
    return format_observation(rep, rep.status == "busy" ? std::string(kContinuePrefix) : prefix, command, t, key);
  };

  if (!key.empty() && signal_of(key)) {
    return finish(ws_.shell(driver + "key" + tail + " " + signal_of(key), exec_ms), kContinuePrefix);
  }
  if (is_input || std::string(rstrip(command)).empty()) {
    if (!std::string(rstrip(command)).empty())
      return "ERROR: The running command does not read input in this environment (its standard input is closed). "
             "Send an empty command to see more output, or C-c to interrupt it.";
    return finish(ws_.shell(driver + "poll" + tail, exec_ms), kContinuePrefix);
  }
  try {
    ws_.write_file(dir_ + "/cmd", command + "\n", 0644);
  } catch (const std::exception&) {
    // The agent put something else where the command file goes: reinstall the state folder, retry once.
    install();
    ws_.write_file(dir_ + "/cmd", command + "\n", 0644);
  }
  return finish(ws_.shell(driver + "run" + tail, exec_ms), "");
}

}  // namespace mlpt::openhands
