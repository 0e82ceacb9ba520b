#include "cgroup.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sandbox {
namespace {

namespace fs = std::filesystem;
using sdk::Error;

bool write_file(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  if (!f) return false;
  f << value;
  f.flush();
  return static_cast<bool>(f);
}

bool writable_dir(const std::string& d) { return !d.empty() && ::access(d.c_str(), W_OK) == 0; }

std::vector<int> read_pids(const std::string& procs) {
  std::vector<int> out;
  std::ifstream f(procs);
  int p;
  while (f >> p) out.push_back(p);
  return out;
}

}  // namespace

std::optional<CgroupParents> CgroupParents::detect(std::string& why) {
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2path;
  CgroupParents p;
  while (std::getline(f, line)) {
    // "hierarchy-id:controllers:path"
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::stringstream cs(ctrl);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "pids") p.pids = "/sys/fs/cgroup/pids" + path;
      if (c == "memory") p.memory = "/sys/fs/cgroup/memory" + path;
    }
    if (ctrl.empty()) v2path = path;
  }
  if (writable_dir(p.pids) && writable_dir(p.memory) && fs::exists(p.pids + "/cgroup.procs")) return p;
  // cgroup v2: both controllers in one tree, enabled for our children in subtree_control.
  if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    std::string dir = "/sys/fs/cgroup" + v2path;
    if (writable_dir(dir)) {
      write_file(dir + "/cgroup.subtree_control", "+pids +memory");
      std::ifstream sc(dir + "/cgroup.subtree_control");
      std::string enabled((std::istreambuf_iterator<char>(sc)), {});
      if (enabled.find("pids") != std::string::npos && enabled.find("memory") != std::string::npos) {
        CgroupParents u;
        u.pids = u.memory = dir;
        u.unified = true;
        return u;
      }
      why = "cgroup v2 at " + dir + " does not delegate the pids and memory controllers";
      return std::nullopt;
    }
  }
  why = "no writable pids and memory cgroup (tried '" + p.pids + "' and '" + p.memory + "')";
  return std::nullopt;
}

Cgroup::Cgroup(const CgroupParents& parents, const std::string& name, long long memory_bytes, long long max_pids) {
  auto make = [&](const std::string& parent) {
    std::string d = parent + "/" + name;
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) throw Error(MLPT_INTERNAL, "cannot create cgroup " + d + ": " + ec.message());
    dirs_.push_back(d);
    procs_.push_back(d + "/cgroup.procs");
    return d;
  };
  auto set = [&](const std::string& file, const std::string& value) {
    if (!write_file(file, value)) throw Error(MLPT_INTERNAL, "cannot set " + file + " to " + value + ": " + std::strerror(errno));
  };
  try {
    if (parents.unified) {
      std::string d = make(parents.pids);
      set(d + "/pids.max", std::to_string(max_pids));
      set(d + "/memory.max", std::to_string(memory_bytes));
      write_file(d + "/memory.swap.max", "0");
    } else {
      std::string p = make(parents.pids);
      set(p + "/pids.max", std::to_string(max_pids));
      std::string m = make(parents.memory);
      set(m + "/memory.limit_in_bytes", std::to_string(memory_bytes));
      // Swap counts too where the kernel accounts it (memsw must be >= the memory limit).
      if (fs::exists(m + "/memory.memsw.limit_in_bytes")) write_file(m + "/memory.memsw.limit_in_bytes", std::to_string(memory_bytes));
      // Kernels before 4.6 charge kernel memory (open files, inodes, page tables) to a v1 cgroup only
      // once a kmem limit is set; newer ones always do and may refuse the write, which is harmless.
      if (fs::exists(m + "/memory.kmem.limit_in_bytes")) write_file(m + "/memory.kmem.limit_in_bytes", std::to_string(memory_bytes));
    }
  } catch (...) {
    for (auto& d : dirs_) ::rmdir(d.c_str());
    throw;
  }
}

std::vector<int> Cgroup::members() const {
  std::vector<int> all;
  for (auto& p : procs_)
    for (int pid : read_pids(p)) all.push_back(pid);
  return all;
}

size_t Cgroup::kill_all() const {
  for (int round = 0; round < 500; ++round) {
    std::vector<int> m = members();
    if (m.empty()) return 0;
    for (int pid : m) ::kill(pid, SIGKILL);
    ::usleep(round < 10 ? 1000 : 10000);
  }
  return members().size();
}

Cgroup::~Cgroup() {
  kill_all();
  for (auto& d : dirs_) {
    for (int i = 0; i < 100 && ::rmdir(d.c_str()) != 0 && errno == EBUSY; ++i) ::usleep(10000);
  }
}

void remove_cgroup_tree(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) remove_cgroup_tree(e.path().string());
  for (int round = 0; round < 100; ++round) {
    auto m = read_pids(dir + "/cgroup.procs");
    if (m.empty()) break;
    for (int pid : m) ::kill(pid, SIGKILL);
    ::usleep(10000);
  }
  ::rmdir(dir.c_str());
}

}  // namespace mlpt::sandbox
