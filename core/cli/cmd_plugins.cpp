// `mlpt plugins inspect PATH.so` and `mlpt plugins list`: what a plugin provides, as a table or JSON.
#include <iostream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/plugin/describe.hpp"
#include "core/plugin/plugin_dirs.hpp"

namespace mlpt::cli {
namespace {

void print_table(const nlohmann::json& d) {
  std::cout << d["name"].get<std::string>() << " " << d["version"].get<std::string>() << "  (built for ABI "
            << d["abi_version"].get<std::string>() << ", speaks ABI " << d["negotiated_abi_version"].get<std::string>()
            << " with this host)\n  file: " << d["path"].get<std::string>() << "\n";
  if (!d["build_info"].get<std::string>().empty())
    std::cout << "  built with: " << d["build_info"].get<std::string>() << "\n";
  for (const auto& n : d["notes"]) std::cout << "  note: " << n.get<std::string>() << "\n";
  std::cout << "  components:\n";
  for (const auto& c : d["components"]) {
    std::string head = "    " + c["kind"].get<std::string>() + " " + c["name"].get<std::string>();
    std::cout << head << std::string(head.size() < 36 ? 36 - head.size() : 1, ' ')
              << c["description"].get<std::string>() << "\n      ";
    for (auto it = c["capabilities"].begin(); it != c["capabilities"].end(); ++it)
      std::cout << it.key() << "=" << it.value() << " ";
    std::cout << "\n";
  }
}

int inspect(const std::vector<std::string>& argv) {
  Args args(argv, {"--json"}, {});
  plugin::HostServices host;
  auto p = plugin::Plugin::load(plugin::resolve_plugin(args.positional(0, "PATH.so")), host);
  auto d = plugin::describe(*p);
  if (args.flag("--json")) std::cout << d.dump(2) << "\n";
  else print_table(d);
  return 0;
}

// Every lib*.so in the plugin folders; a file that fails to load is reported, not fatal.
int list(const std::vector<std::string>& argv) {
  Args args(argv, {"--json"}, {});
  plugin::HostServices host;
  nlohmann::json all = nlohmann::json::array();
  int failures = 0;
  for (const auto& dir : plugin::plugin_dirs()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".so") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        auto p = plugin::Plugin::load(f, host);
        all.push_back(plugin::describe(*p));
      } catch (const Error& e) {
        ++failures;
        all.push_back({{"path", f.string()}, {"error", e.what()}});
      }
    }
  }
  if (args.flag("--json")) {
    std::cout << all.dump(2) << "\n";
  } else {
    if (all.empty()) std::cout << "no plugins found\n";
    for (const auto& d : all) {
      if (d.contains("error")) std::cout << "FAILED " << d["error"].get<std::string>() << "\n";
      else print_table(d);
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

MLPT_COMMAND("plugins inspect", "PATH.so [--json]", "describe a plugin: components and capabilities", &inspect);
MLPT_COMMAND("plugins list", "[--json]", "load and describe every plugin in the plugin folders", &list);

}  // namespace mlpt::cli
