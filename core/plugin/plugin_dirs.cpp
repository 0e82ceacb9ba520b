#include "core/plugin/plugin_dirs.hpp"

#include <cstdlib>
#include <sstream>

#include "core/error.hpp"

namespace mlpt::plugin {

std::vector<std::filesystem::path> plugin_dirs() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("MLPT_PLUGIN_PATH")) {
    std::stringstream in(env);
    for (std::string d; std::getline(in, d, ':');)
      if (!d.empty()) dirs.emplace_back(d);
  }
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto bin = exe.parent_path();
    dirs.push_back(bin / ".." / "lib" / "mlpt" / "plugins");
    dirs.push_back(bin / ".." / "plugins");
  }
  return dirs;
}

std::filesystem::path resolve_plugin(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos) return name_or_path;
  std::string searched;
  for (const auto& dir : plugin_dirs()) {
    auto candidate = dir / name_or_path;
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return std::filesystem::weakly_canonical(candidate, ec);
    searched += "\n  " + dir.lexically_normal().string();
  }
  throw Error(MLPT_NOT_FOUND, "plugin '" + name_or_path + "' not found; searched:" + searched +
                                  "\n(set MLPT_PLUGIN_PATH or give a path)");
}

}  // namespace mlpt::plugin
