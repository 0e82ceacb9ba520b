// Help on every command: `mlpt --help` lists every registered command (read from the MLPT_COMMAND
// lines of core/cli/) and every tool beside it; `CMD --help`, `CMD -h` and `mlpt help CMD` print a
// usage line that names `mlpt CMD` (never an internal tool name) with exit 0; a group word alone
// lists its sub-commands; a bad log level is refused.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string out;
};

Result mlpt(const std::string& args) {
  Result r;
  FILE* p = popen((std::string(MLPT_BIN) + " " + args + " 2>&1 </dev/null").c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The names registered with MLPT_COMMAND("name", ...) in core/cli/*.cpp.
std::set<std::string> registered_commands() {
  std::set<std::string> names;
  const std::regex registration("MLPT_COMMAND\\(\"([a-z ]+)\"");
  for (const auto& e : fs::directory_iterator(fs::path(MLPT_SOURCE_DIR) / "core" / "cli")) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    std::stringstream s;
    s << in.rdbuf();
    const std::string text = s.str();
    for (std::sregex_iterator it(text.begin(), text.end(), registration), end; it != end; ++it) names.insert((*it)[1]);
  }
  return names;
}

// The tools mlpt-WORD beside the mlpt executable.
std::set<std::string> tools() {
  std::set<std::string> words;
  for (const auto& e : fs::directory_iterator(fs::path(MLPT_BIN).parent_path())) {
    const auto name = e.path().filename().string();
    if (name.rfind("mlpt-", 0) == 0) words.insert(name.substr(5));
  }
  return words;
}

}  // namespace

TEST_CASE("mlpt --help lists every command and tool, then each command's help names mlpt") {
  const auto commands = registered_commands();
  REQUIRE(commands.size() >= 8);
  const Result overview = mlpt("--help");
  CHECK(overview.code == 0);
  CHECK(mlpt("-h").out == overview.out);
  CHECK(mlpt("help").out == overview.out);
  for (const auto& name : commands) {
    INFO(name);
    CHECK_THAT(overview.out, Catch::Contains("  mlpt " + name + " "));
    for (const std::string& form : {name + " --help", name + " -h", "help " + name}) {
      INFO(form);
      const Result r = mlpt(form);
      CHECK(r.code == 0);
      CHECK(r.out.rfind("usage: mlpt " + name + " ", 0) == 0);
      CHECK(r.out.size() > ("usage: mlpt " + name).size() + 10);
    }
    // --help after other arguments still helps rather than running the command.
    CHECK(mlpt(name + " some-argument --help").out.rfind("usage: mlpt " + name + " ", 0) == 0);
  }
  const auto beside = tools();
  CHECK(beside.count("model"));
  for (const auto& word : beside) {
    INFO(word);
    CHECK_THAT(overview.out, Catch::Contains("  mlpt " + word + " "));
    for (const std::string& form : {word + " --help", word + " -h", "help " + word}) {
      INFO(form);
      const Result r = mlpt(form);
      CHECK(r.code == 0);
      CHECK_THAT(r.out, Catch::Contains("mlpt " + word + " "));
      CHECK_THAT(r.out, !Catch::Contains("mlpt-" + word));
    }
  }
}

TEST_CASE("a group word lists its sub-commands, then bad words and log levels are refused") {
  for (const std::string group : {"check", "plugins"}) {
    INFO(group);
    const Result help = mlpt(group + " --help");
    CHECK(help.code == 0);
    CHECK_THAT(help.out, Catch::Contains("sub-commands"));
    for (const auto& name : registered_commands())
      if (name.rfind(group + " ", 0) == 0) CHECK_THAT(help.out, Catch::Contains("mlpt " + name + " "));
    const Result bare = mlpt(group);
    CHECK(bare.code == 2);
    CHECK(bare.out == help.out);
  }
  const Result unknown = mlpt("frobnicate");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.out, Catch::Contains("unknown command 'frobnicate'"));
  const Result level = mlpt("--log-level loud plugins list");
  CHECK(level.code == 2);
  CHECK_THAT(level.out, Catch::Contains("log level must be debug, info, warning, error or off"));
  CHECK(mlpt("--log-level error --version").code == 0);
}

TEST_CASE("log records go to stderr: stdout carries only the command's result") {
  // A plugin built for a newer ABI minor loads with a note the host logs at info.
  const std::string plugin = std::string(MLPT_BUILD_DIR) + "/tests/integration/plugin_loading/variants/libc_plugin_3.so";
  REQUIRE(std::filesystem::exists(plugin));
  std::string out;
  FILE* p = popen((std::string(MLPT_BIN) + " --log-level info plugins inspect " + plugin + " 2>/dev/null </dev/null").c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_THAT(out, Catch::Contains("c-plugin"));  // the result, on stdout
  CHECK(out.find("] [info]") == std::string::npos);
  // The record is there, on stderr.
  CHECK_THAT(mlpt("--log-level info plugins inspect " + plugin).out,
             Catch::Contains("] [info]") && Catch::Contains("built for ABI 1.99, newer than this host's"));
}
