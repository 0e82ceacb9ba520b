// The apptainer runtime: drives the apptainer CLI as the reference does, but never as the host's
// root: apptainer itself runs as the sandbox uid, in user-namespace mode with fakeroot (root
// inside, the sandbox uid outside), without capabilities, with the seccomp deny list. UNTESTED on
// the build host (apptainer is not installed there); the argv is checked by a unit test.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtimes.hpp"
#include "seccomp_filter.hpp"
#include "sif_image.hpp"
#include "state_dir.hpp"

namespace mlpt::sandbox {
namespace {

namespace fs = std::filesystem;
using sdk::Error;

class ApptainerSandbox final : public ShellSandbox {
 public:
  ApptainerSandbox(const RuntimeConfig& c, std::string exe, std::string image, std::string dir,
                   std::vector<HostBind> binds, std::vector<std::pair<std::string, std::string>> env,
                   std::unique_ptr<Cgroup> cg, std::string seccomp_profile, int64_t open_files_per_process)
      : ShellSandbox(c, open_files_per_process), exe_(std::move(exe)), image_(std::move(image)), dir_(std::move(dir)),
        binds_(std::move(binds)), env_(std::move(env)), cgroup_(std::move(cg)), seccomp_profile_(std::move(seccomp_profile)) {}
  ~ApptainerSandbox() override {
    cgroup_.reset();
    remove_tree(dir_);
  }

 protected:
  RunResult run_shell(const std::string& command, const std::string& workdir, int64_t timeout_ms, size_t limit,
                      std::string_view stdin_data, const mlpt_sink* sink) override {
    ApptainerPlan plan{image_, dir_ + "/overlay", workdir, command, binds_, env_, seccomp_profile_};
    ChildSetup s;
    s.exe = exe_;
    s.argv = apptainer_exec_argv(exe_, plan);
    s.env = {"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir_ + "/home"};
    s.run_as_uid = config_.sandbox_uid;
    s.run_as_gid = config_.sandbox_gid;
    return run_contained(std::move(s), cgroup_.get(), timeout_ms, limit, stdin_data, sink);
  }

 private:
  std::string exe_, image_, dir_;
  std::vector<HostBind> binds_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::unique_ptr<Cgroup> cgroup_;
  std::string seccomp_profile_;
};

}  // namespace

std::vector<std::string> apptainer_exec_argv(const std::string& apptainer, const ApptainerPlan& p) {
  // User-namespace mode with fakeroot: root inside, the unprivileged uid apptainer runs as
  // outside; no capabilities, no setuid, the seccomp deny list.
  std::vector<std::string> a = {apptainer, "exec", "--userns", "--fakeroot", "--no-privs"};
  if (!p.seccomp_profile.empty()) a.insert(a.end(), {"--security", "seccomp:" + p.seccomp_profile});
  a.insert(a.end(), {"--containall", "--cleanenv"});
  // A per-sandbox overlay directory keeps writes across commands (removed with the sandbox);
  // without one every command gets a fresh tmpfs.
  if (p.overlay_dir.empty()) a.push_back("--writable-tmpfs");
  else a.insert(a.end(), {"--overlay", p.overlay_dir});
  // No host /sys, home, tmp, host filesystems or cwd; /proc is the pid namespace's own.
  a.insert(a.end(), {"--no-mount", "home,tmp,sys,hostfs,cwd", "--pid", "--net", "--network", "none", "--pwd", p.workdir});
  for (auto& b : p.binds) a.insert(a.end(), {"--bind", b.host + ":" + b.path + ":ro"});
  for (auto& [k, v] : p.env) a.insert(a.end(), {"--env", k + "=" + v});
  a.insert(a.end(), {p.image, "/bin/sh", "-c", p.command});
  return a;
}

ApptainerRuntime::ApptainerRuntime(RuntimeConfig config) : config_(std::move(config)) {
  apptainer_path = find_executable(config_.apptainer);
  if (apptainer_path.empty())
    throw Error(MLPT_FAILED_PRECONDITION, "apptainer runtime: '" + config_.apptainer + "' is not on PATH");
  std::error_code ec;
  fs::create_directories(config_.state_dir, ec);
  std::string why;
  cgroups_ = CgroupParents::detect(why);
  if (!cgroups_ && config_.require_limits)
    throw Error(MLPT_FAILED_PRECONDITION, "apptainer runtime cannot enforce limits: " + why);
  budget_bytes_ = sandbox_budget_bytes(host_memory_bytes(cgroups_));
  sizing_ = size_sandboxes(config_, budget_bytes_);
  sweep_stale(config_.state_dir, cgroups_);
  tag_ = new_owner_tag();
  dir_ = config_.state_dir + "/" + tag_;
  fs::create_directories(dir_, ec);
  // apptainer runs as the sandbox uid: it must pass (not list) the folders on the way.
  constexpr auto traverse = fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec;
  fs::permissions(config_.state_dir, traverse, ec);
  fs::permissions(dir_, traverse, ec);
  if (config_.seccomp) {
    seccomp_profile_ = dir_ + "/seccomp.json";
    std::ofstream(seccomp_profile_) << seccomp_oci_profile();
    fs::permissions(seccomp_profile_, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read, ec);
  }
}

ApptainerRuntime::~ApptainerRuntime() { remove_tree(dir_); }

std::unique_ptr<sdk::Sandbox> ApptainerRuntime::create(const mlpt_sandbox_create_args& args) {
  std::string image(sdk::view(args.image));
  sif::SifImage img;
  try {
    img = sif::read_sif(image);
  } catch (const sif::SifError& e) {
    throw Error(e.kind() == sif::ErrorKind::Io ? MLPT_NOT_FOUND : MLPT_INVALID_ARGUMENT,
                std::string("bad image (") + sif::error_kind_name(e.kind()) + "): " + e.what());
  }
  // The binds file, read straight from the partition.
  std::vector<HostBind> binds;
  auto env = base_environment();
  for (auto& kv : config_.env) env.push_back(kv);
  std::string unsq = find_executable(config_.unsquashfs);
  if (!unsq.empty()) {
    sdk::StringSink out(1 << 20);
    ChildSetup s;
    s.exe = unsq;
    s.argv = {unsq, "-o", std::to_string(img.primary_partition().offset), "-cat", image, ".mlpt/binds.json"};
    RunRequest r;
    r.timeout_ms = 60000;
    r.sink = out.sink();
    if (run_process(s, r).exit_code == 0 && !out.text().empty()) {
      std::vector<std::pair<std::string, std::string>> image_env;
      parse_binds(out.text(), image + ": /.mlpt/binds.json", config_.allowed_bind_prefixes, binds, image_env);
      for (auto& kv : image_env) env.push_back(kv);
    }
  }
  uint64_t n = next_++;
  std::string dir = dir_ + "/" + std::to_string(n);
  std::error_code ec;
  fs::create_directories(dir + "/overlay", ec);
  if (!ec) fs::create_directories(dir + "/home", ec);
  if (ec) throw Error(MLPT_INTERNAL, "cannot create " + dir + ": " + ec.message());
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec, ec);
  for (const char* sub : {"/overlay", "/home"})
    if (::chown((dir + sub).c_str(), static_cast<uid_t>(config_.sandbox_uid), static_cast<gid_t>(config_.sandbox_gid)) != 0)
      throw Error(MLPT_INTERNAL, "cannot hand " + dir + sub + " to the sandbox uid: " + std::strerror(errno));
  std::unique_ptr<Cgroup> cg;
  long long mem = sandbox_memory_bytes(args.memory_limit_mb, sizing_, budget_bytes_);
  long long procs = args.max_processes ? args.max_processes : config_.default_max_processes;
  if (cgroups_) cg = std::make_unique<Cgroup>(*cgroups_, "mlpt-sandbox-" + tag_ + "-s" + std::to_string(n), mem, procs);
  return std::make_unique<ApptainerSandbox>(config_, apptainer_path, image, dir, std::move(binds), std::move(env),
                                            std::move(cg), seccomp_profile_,
                                            open_files_per_process(mem, procs, config_.max_open_files));
}

}  // namespace mlpt::sandbox
