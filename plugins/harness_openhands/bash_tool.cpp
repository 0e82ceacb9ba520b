#include "bash_tool.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "text_util.hpp"

namespace mlpt::openhands {

const char* const kTimeoutMessageTemplate =
    "You may wait longer to see additional output by sending empty command '', send other commands to "
    "interact with "
    "the current process, send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous command "
    "before sending "
    "your new command, or use the timeout parameter in execute_bash for future commands.";
const char* const kContinuePrefix = "[Below is the output of the previous command.]\n";

namespace {

// Arguments: STATE MODE (run|poll|key) HARD SOFT CAP (deciseconds; HARD 0 = soft rules) [SIGNAL].
// The driver travels with every call (bash -c), so nothing the agent writes can stand in for it; it
// runs with a PATH of system folders only (a `cat` or `stat` the agent drops in /usr/local/bin is
// not the harness's), and gives the command the agent's PATH back.
// The command runs in a background subshell of its own process group whose EXIT trap saves the
// cwd, the exported environment (as data: NAME=value records, never a script run again), the
// interpreter and the exit code; the driver polls the output file and prints what is new (head and
// tail when huge) followed by its status lines. In run mode it first makes sure the state folder can
// hold the call (a real folder; what stands where its files go is removed) and says whether it
// started the command (@@MLPT_STARTED@@) or could not (status nocmd). A command that replaces the
// EXIT trap still ends `done`: the driver waits for its own child and takes the exit status itself.
const char* const kDriver = R"DRIVER(__mlpt_s=$1 mode=$2 hard=$3 soft=$4 cap=$5 sig=$6
__mlpt_path=$PATH; PATH=/usr/sbin:/usr/bin:/sbin:/bin
half=65536
now() {
  local t=$EPOCHREALTIME
  if [ -n "$t" ]; then t=${t//[.,]/}; echo $(( 10#$t / 100000 )); else echo $(( $(date +%s%N) / 100000000 )); fi
}
running() { [ -f "$__mlpt_s/pid" ] && [ ! -f "$__mlpt_s/done" ] && kill -0 "$(cat "$__mlpt_s/pid")" 2>/dev/null; }
status=
case "$mode" in
run)
  if running; then status=busy
  elif [ -L "$__mlpt_s" ] || [ ! -d "$__mlpt_s" ] || [ ! -f "$__mlpt_s/cmd" ] || [ ! -r "$__mlpt_s/cmd" ]; then status=nocmd
  else
    rm -rf -- "$__mlpt_s/done" "$__mlpt_s/pid" "$__mlpt_s/reported" "$__mlpt_s/out" "$__mlpt_s/shown"
    for f in cwd env py; do [ -e "$__mlpt_s/$f" ] && [ ! -f "$__mlpt_s/$f" ] && rm -rf -- "$__mlpt_s/$f"; done
    if ! { : > "$__mlpt_s/out" && echo 0 > "$__mlpt_s/shown"; } 2>/dev/null; then status=nocmd; else
      cwd=$(cat "$__mlpt_s/cwd" 2>/dev/null)
      cd "${cwd:-/testbed}" 2>/dev/null || cd /testbed 2>/dev/null || cd /
      set -m
      ( trap 'ec=$?; pwd > "'"$__mlpt_s"'/cwd"; for __n in $(compgen -e); do printf "%s=%s\0" "$__n" "${!__n}"; done > "'"$__mlpt_s"'/env"; command -v python > "'"$__mlpt_s"'/py" 2>/dev/null; echo $ec > "'"$__mlpt_s"'/done"' EXIT
        trap 'exit 130' INT; trap 'exit 129' HUP; trap 'exit 131' QUIT; trap 'exit 143' TERM
        PATH=$__mlpt_path
        if [ -f "$__mlpt_s/env" ]; then while IFS= read -r -d '' __kv; do export "$__kv" 2>/dev/null; done < "$__mlpt_s/env"; fi
        unset __kv
        . "$__mlpt_s/cmd" ) < /dev/null > "$__mlpt_s/out" 2>&1 &
      child=$!; echo $child > "$__mlpt_s/pid"
      set +m
      printf '@@MLPT_STARTED@@\n'
    fi
  fi ;;
key)
  if running; then
    p=$(cat "$__mlpt_s/pid"); kill -s "$sig" -- "-$p" 2>/dev/null || kill -s "$sig" "$p" 2>/dev/null
  else status=none; fi ;;
poll)
  if ! running && { [ ! -f "$__mlpt_s/done" ] || [ -f "$__mlpt_s/reported" ]; }; then status=none; fi ;;
esac
if [ "$status" = nocmd ]; then printf '\n@@MLPT_STATUS@@ nocmd -1\n'; exit 0; fi
if [ -z "$status" ]; then
  start=$(now); last=$start; size=$(stat -c %s "$__mlpt_s/out" 2>/dev/null || echo 0)
  while :; do
    if [ -f "$__mlpt_s/done" ]; then status=done; break; fi
    if ! kill -0 "$(cat "$__mlpt_s/pid" 2>/dev/null)" 2>/dev/null; then
      sleep 0.05; if [ -f "$__mlpt_s/done" ]; then status=done
      elif [ -n "$child" ]; then wait "$child"; code=$?; echo $code > "$__mlpt_s/done" 2>/dev/null; status=done
      else status=lost; fi; break
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
printf '\n@@MLPT_STATUS@@ %s %s\n@@MLPT_CWD@@ %s\n@@MLPT_PY@@ %s\n' "$status" "${code:-$(cat "$__mlpt_s/done" 2>/dev/null || echo -1)}" \
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

DriverReport parse_driver_output(const std::string& given) {
  DriverReport r;
  static const std::string kStarted = "@@MLPT_STARTED@@\n";
  r.started = given.compare(0, kStarted.size(), kStarted) == 0;
  const std::string raw = r.started ? given.substr(kStarted.size()) : given;
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
  return "{ [ -d " + d + " ] && [ ! -L " + d + " ]; } || rm -rf -- " + d + "; rm -rf -- " + d + "/cmd " + d +
         "/cwd 2>/dev/null; mkdir -p " + d + " && printf '%s\\n' " + shell_quote(start_dir_) + " > " + d +
         "/cwd";
}

void BashTool::install() {
  ShellResult r = ws_.shell(install_command(), 30000);
  if (r.exit_code != 0)
    throw std::runtime_error("cannot set up the execute_bash state folder " + dir_ + ": " + r.output);
}

ShellResult BashTool::call_driver(const std::string& arguments, int64_t timeout_ms) {
  // An absolute bash: a `bash` the agent puts earlier on PATH is not the harness's.
  return ws_.shell(
      "/bin/bash -c " + shell_quote(kDriver) + " mlpt-bash " + shell_quote(dir_) + " " + arguments,
      timeout_ms);
}

std::string BashTool::run(const nlohmann::json& args) {
  const std::string command = args.contains("command") && args["command"].is_string()
                                  ? args["command"].get<std::string>()
                              : args.contains("command") ? args["command"].dump()
                                                         : "";
  bool is_input = false;
  if (args.contains("is_input")) {
    const auto& v = args["is_input"];
    is_input = v.is_boolean()
                   ? v.get<bool>()
                   : v.is_string() && (v.get<std::string>() == "true" || v.get<std::string>() == "True");
  }
  double hard_s = 0;
  std::string timeout_text;
  if (args.contains("timeout") && args["timeout"].is_number() && args["timeout"].get<double>() > 0) {
    hard_s = std::min(args["timeout"].get<double>(), limits_.max_command_s);
    timeout_text = hard_s < args["timeout"].get<double>() ? python_number(nlohmann::json(hard_s))
                                                          : python_number(args["timeout"]);
  }
  auto ds = [](double s) { return std::to_string(std::max<int64_t>(1, std::llround(s * 10))); };
  const std::string hard = hard_s > 0 ? ds(hard_s) : "0";
  const std::string tail = " " + hard + " " + ds(limits_.soft_timeout_s) + " " + ds(limits_.max_command_s);
  const int64_t exec_ms = static_cast<int64_t>((std::max(hard_s, limits_.max_command_s) + 30) * 1000);
  const std::string key = special_key_of(command);
  auto soft_text = [&] {
    double s = limits_.soft_timeout_s;
    return s == std::floor(s) ? std::to_string(static_cast<int64_t>(s)) : python_number(nlohmann::json(s));
  };
  auto limit_text = [&] {
    return timeout_text.empty() ? python_number(nlohmann::json(static_cast<int64_t>(limits_.max_command_s)))
                                : timeout_text;
  };
  auto finish = [&](const DriverReport& rep, const std::string& prefix) {
    if (rep.status == "none") return std::string("ERROR: No previous running command to retrieve logs from.");
    std::string t = rep.status == "soft" ? soft_text() : limit_text();
    return format_observation(rep, rep.status == "busy" ? std::string(kContinuePrefix) : prefix, command, t,
                              key);
  };

  if (!key.empty() && signal_of(key)) {
    return finish(parse_driver_output(call_driver("key" + tail + " " + signal_of(key), exec_ms).output),
                  kContinuePrefix);
  }
  if (is_input || std::string(rstrip(command)).empty()) {
    if (!std::string(rstrip(command)).empty())
      return "ERROR: The running command does not read input in this environment (its standard input is "
             "closed). "
             "Send an empty command to see more output, or C-c to interrupt it.";
    return finish(parse_driver_output(call_driver("poll" + tail, exec_ms).output), kContinuePrefix);
  }
  // The command always runs or is answered with what stopped it: when the agent has changed what the
  // harness keeps in its state folder (the folder, the command file), the folder is restored once and
  // the command is run, and the observation says so.
  std::string restored;
  for (int attempt = 0;; ++attempt) {
    std::string why;
    try {
      ws_.write_file(dir_ + "/cmd", command + "\n", 0644);
    } catch (const std::exception& e) {
      why = std::string("the command file could not be written (") + e.what() + ")";
    }
    if (why.empty()) {
      ShellResult r = call_driver("run" + tail, exec_ms);
      DriverReport rep = parse_driver_output(r.output);
      if (rep.started || rep.status == "busy") return finish(rep, restored);
      why = rep.status == "nocmd" ? std::string("the command file was gone when the shell looked for it")
                                  : "the shell did not start (exit code " + std::to_string(r.exit_code) +
                                        ": " + std::string(rstrip(valid_utf8(r.output.substr(0, 400)))) + ")";
    }
    if (attempt == 1)
      return "ERROR: Your command was not run: " + why +
             ", after the harness had restored its state folder " + dir_ + ".";
    ShellResult r = ws_.shell(install_command(), 30000);
    if (r.exit_code != 0)
      return "ERROR: Your command was not run: " + why +
             ", and the harness could not restore its state folder " + dir_ + " (" +
             std::string(rstrip(valid_utf8(r.output.substr(0, 400)))) + ").";
    restored = "[The shell session was reset: " + why + ". The harness restored its state folder " + dir_ +
               " (working directory back to " + start_dir_ + ") and ran your command.]\n";
  }
}

}  // namespace mlpt::openhands
