#include "state_dir.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace mlpt::sandbox {
namespace {

namespace fs = std::filesystem;

std::string start_time(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  size_t close = s.rfind(')');
  if (close == std::string::npos) return "";
  std::stringstream rest(s.substr(close + 2));
  std::string field;
  // Fields after the command name start at 3 (state); start time is field 22.
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return "";
}

std::string unescape_mountinfo(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string new_owner_tag() {
  static std::atomic<int> seq{0};
  long pid = ::getpid();
  return "p" + std::to_string(pid) + "-" + start_time(pid) + "-r" + std::to_string(seq++);
}

bool owner_alive(const std::string& tag) {
  if (tag.size() < 2 || tag[0] != 'p') return true;  // not ours: leave it alone
  size_t a = tag.find('-'), b = tag.find('-', a + 1);
  if (a == std::string::npos || b == std::string::npos) return true;
  long pid = std::atol(tag.substr(1, a - 1).c_str());
  std::string st = tag.substr(a + 1, b - a - 1);
  if (pid <= 0) return true;
  std::string now = start_time(pid);
  return !now.empty() && now == st;
}

void unmount_below(const std::string& dir) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  std::vector<std::string> points;
  std::string prefix = dir + "/";
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string id, parent, devno, root, point;
    ss >> id >> parent >> devno >> root >> point;
    point = unescape_mountinfo(point);
    if (point == dir || point.rfind(prefix, 0) == 0) points.push_back(point);
  }
  std::sort(points.begin(), points.end(), [](auto& x, auto& y) { return x.size() > y.size(); });
  for (auto& p : points) ::umount2(p.c_str(), MNT_DETACH);
}

void remove_tree(const std::string& dir) {
  std::error_code ec;
  struct stat top {};
  if (::lstat(dir.c_str(), &top) != 0) return;
  // Never descend into another filesystem (a mount we failed to remove).
  std::vector<fs::path> stack{dir}, order;
  while (!stack.empty()) {
    fs::path p = stack.back();
    stack.pop_back();
    order.push_back(p);
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_dev != top.st_dev) continue;
    for (auto& e : fs::directory_iterator(p, ec)) stack.push_back(e.path());
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    struct stat st {};
    if (::lstat(it->c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev == top.st_dev) ::rmdir(it->c_str());
    } else {
      ::unlink(it->c_str());
    }
  }
}

int sweep_stale(const std::string& state_dir, const std::optional<CgroupParents>& cgroups) {
  int swept = 0;
  std::error_code ec;
  std::vector<std::string> dead;
  for (auto& e : fs::directory_iterator(state_dir, ec)) {
    std::string tag = e.path().filename().string();
    if (!owner_alive(tag)) dead.push_back(tag);
  }
  if (cgroups) {
    for (const std::string* parent : {&cgroups->pids, &cgroups->memory})
      for (auto& e : fs::directory_iterator(*parent, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind("mlpt-sandbox-", 0) == 0 && !owner_alive(n.substr(13)) &&
            std::find(dead.begin(), dead.end(), n.substr(13)) == dead.end())
          dead.push_back(n.substr(13));
      }
  }
  for (auto& tag : dead) {
    std::string d = state_dir + "/" + tag;
    unmount_below(d);
    remove_tree(d);
    if (cgroups) {
      remove_cgroup_tree(cgroups->pids + "/mlpt-sandbox-" + tag);
      if (!cgroups->unified) remove_cgroup_tree(cgroups->memory + "/mlpt-sandbox-" + tag);
    }
    ++swept;
  }
  return swept;
}

}  // namespace mlpt::sandbox
