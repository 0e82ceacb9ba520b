// A Workspace over a host folder (no container), so the tools' exact messages are tested fast.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "workspace.hpp"

namespace agent_env_test {

class HostWorkspace final : public mlpt::openhands::Workspace {
 public:
  explicit HostWorkspace(std::filesystem::path root) : root_(std::move(root)) {}
  mlpt::openhands::ShellResult shell(const std::string& command, int64_t) override {
    std::string full = "cd " + mlpt::openhands::shell_quote(root_.string()) + " && { " + command + "\n} 2>&1";
    FILE* p = popen(full.c_str(), "r");
    mlpt::openhands::ShellResult r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
  }
  std::optional<std::string> read_file(const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write_file(const std::string& path, const std::string& content, uint32_t mode) override {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    std::filesystem::permissions(path, static_cast<std::filesystem::perms>(mode));
  }

 private:
  std::filesystem::path root_;
};

// A fresh folder under the temp dir, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("mlpt_agent_env_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline void write(const std::filesystem::path& p, const std::string& s) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}
inline std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace agent_env_test
