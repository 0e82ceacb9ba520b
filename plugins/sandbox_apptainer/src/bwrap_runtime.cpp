#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>

#include "runtimes.hpp"
#include "seccomp_filter.hpp"
#include "state_dir.hpp"

namespace mlpt::sandbox {
namespace {

namespace fs = std::filesystem;
using sdk::Error;

// Folders on the way to a sandbox's root: the sandbox uid (which runs bwrap) may pass, not list.
constexpr fs::perms kTraverse = fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec;

void make_dir(const std::string& d, fs::perms perms = fs::perms::owner_all) {
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) throw Error(MLPT_INTERNAL, "cannot create " + d + ": " + ec.message());
  fs::permissions(d, perms, ec);
}

std::vector<std::pair<std::string, std::string>> merged_env(
    const RuntimeConfig& c, const std::vector<std::pair<std::string, std::string>>& image_env) {
  auto env = base_environment();
  auto put = [&](const std::pair<std::string, std::string>& kv) {
    for (auto& e : env)
      if (e.first == kv.first) {
        e.second = kv.second;
        return;
      }
    env.push_back(kv);
  };
  for (auto& kv : c.env) put(kv);
  for (auto& kv : image_env) put(kv);
  return env;
}

class BwrapSandbox final : public ShellSandbox {
 public:
  BwrapSandbox(BwrapRuntime& rt, std::shared_ptr<ImageRoot> image, uint64_t n, long long memory_bytes, long long pids)
      : ShellSandbox(rt.config(), open_files_per_process(memory_bytes, pids, rt.config().max_open_files)),
        rt_(rt),
        image_(std::move(image)) {
    dir_ = rt.dir() + "/sandboxes/" + std::to_string(n);
    make_dir(dir_, kTraverse);
    make_dir(dir_ + "/layer");
    make_dir(dir_ + "/root", kTraverse);
    // The writable layer is a tmpfs of its own, so its size is bounded whatever the state dir is
    // on; it goes with the sandbox (destroy unmounts below dir_; a dead host's is swept).
    const std::string size = "size=" + std::to_string(rt.sizing().writable_layer_mb) + "m,mode=0700";
    const std::string layer = dir_ + "/layer";
    if (::mount("mlpt-sandbox-layer", layer.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) != 0) {
      int e = errno;
      remove_tree(dir_);
      throw Error(MLPT_INTERNAL, "cannot mount the writable layer (tmpfs " + size + ") at " + layer + ": " + std::strerror(e));
    }
    upper_ = layer + "/upper";
    make_dir(upper_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                         fs::perms::others_exec);
    make_dir(layer + "/work");
    // The layer's root is the sandbox's "/": owned by the sandbox uid, i.e. by root inside.
    if (::chown(upper_.c_str(), static_cast<uid_t>(rt.config().sandbox_uid), static_cast<gid_t>(rt.config().sandbox_gid)) != 0) {
      int e = errno;
      unmount_below(dir_);
      remove_tree(dir_);
      throw Error(MLPT_INTERNAL, "cannot hand " + upper_ + " to the sandbox uid: " + std::strerror(e));
    }
    try {
      if (rt.cgroups()) cgroup_ = std::make_unique<Cgroup>(*rt.cgroups(), "mlpt-sandbox-" + rt.owner_tag() + "-s" + std::to_string(n), memory_bytes, pids);
    } catch (...) {
      unmount_below(dir_);
      remove_tree(dir_);
      throw;
    }
    overlay_options_ = "lowerdir=" + image_->lower + ",upperdir=" + upper_ + ",workdir=" + dir_ + "/layer/work";
    env_ = merged_env(rt.config(), image_->env);
  }
  ~BwrapSandbox() override {
    cgroup_.reset();  // kills anything left
    unmount_below(dir_);
    remove_tree(dir_);
  }

 protected:
  RunResult run_shell(const std::string& command, const std::string& workdir, int64_t timeout_ms, size_t limit,
                      std::string_view stdin_data, const mlpt_sink* sink) override {
    BwrapPlan plan{dir_ + "/root", image_->binds, env_, workdir, command, rt_.config().seccomp};
    ChildSetup s;
    s.exe = rt_.bwrap_path;
    s.argv = bwrap_argv(rt_.bwrap_path, plan);
    s.run_as_uid = rt_.config().sandbox_uid;
    s.run_as_gid = rt_.config().sandbox_gid;
    if (plan.seccomp) s.fd4_data = rt_.seccomp_program();
    s.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    s.overlay_target = plan.root;
    s.overlay_options = overlay_options_;
    return run_contained(std::move(s), cgroup_.get(), timeout_ms, limit, stdin_data, sink);
  }

 private:
  BwrapRuntime& rt_;
  std::shared_ptr<ImageRoot> image_;
  std::string dir_, upper_, overlay_options_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::unique_ptr<Cgroup> cgroup_;
};

}  // namespace

std::vector<std::string> bwrap_argv(const std::string& bwrap, const BwrapPlan& p) {
  std::vector<std::string> a = {bwrap, "--bind", p.root, "/", "--dev", "/dev", "--proc", "/proc"};
  for (auto& b : p.binds) {
    a.push_back(b.optional ? "--ro-bind-try" : "--ro-bind");
    a.push_back(b.host);
    a.push_back(b.path);
  }
  // A user namespace: root inside, the unprivileged uid bwrap runs as outside.
  a.insert(a.end(), {"--unshare-user", "--uid", "0", "--gid", "0"});
  for (const char* f : {"--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                        "--die-with-parent", "--new-session", "--clearenv"})
    a.push_back(f);
  a.insert(a.end(), {"--hostname", "sandbox", "--cap-drop", "ALL"});
  if (p.seccomp) a.insert(a.end(), {"--seccomp", "4"});
  for (auto& [k, v] : p.env) a.insert(a.end(), {"--setenv", k, v});
  a.insert(a.end(), {"--chdir", p.workdir, "--", "/bin/sh", "-c", p.command});
  return a;
}

BwrapRuntime::BwrapRuntime(RuntimeConfig config) : config_(std::move(config)) {
  bwrap_path = find_executable(config_.bwrap);
  if (bwrap_path.empty()) throw Error(MLPT_FAILED_PRECONDITION, "bwrap runtime: '" + config_.bwrap + "' is not on PATH");
  if (config_.seccomp) seccomp_ = seccomp_bpf_program();
  make_dir(config_.state_dir, kTraverse);
  std::string why;
  cgroups_ = CgroupParents::detect(why);
  if (!cgroups_) {
    if (config_.require_limits)
      throw Error(MLPT_FAILED_PRECONDITION, "bwrap runtime cannot enforce memory and process limits: " + why +
                                                " (set require_limits = false to run without them)");
    sdk::log(MLPT_LOG_WARNING, "sandbox.bwrap", "running WITHOUT memory/process limits: " + why);
  }
  budget_bytes_ = sandbox_budget_bytes(host_memory_bytes(cgroups_));
  sizing_ = size_sandboxes(config_, budget_bytes_);
  int swept = sweep_stale(config_.state_dir, cgroups_);
  if (swept) sdk::log(MLPT_LOG_INFO, "sandbox.bwrap", "swept state of " + std::to_string(swept) + " dead owner(s)");
  tag_ = new_owner_tag();
  dir_ = config_.state_dir + "/" + tag_;
  make_dir(dir_, kTraverse);
  make_dir(dir_ + "/images");
  make_dir(dir_ + "/sandboxes", kTraverse);
  images_ = std::make_unique<ImageStore>(config_, dir_ + "/images");
}

BwrapRuntime::~BwrapRuntime() {
  images_.reset();
  unmount_below(dir_);
  remove_tree(dir_);
}

std::unique_ptr<sdk::Sandbox> BwrapRuntime::create(const mlpt_sandbox_create_args& args) {
  std::string image(sdk::view(args.image));
  if (image.empty()) throw Error(MLPT_INVALID_ARGUMENT, "image is empty");
  if (args.memory_limit_mb < 0 || args.max_processes < 0)
    throw Error(MLPT_INVALID_ARGUMENT, "memory_limit_mb and max_processes must be >= 0");
  auto root = images_->acquire(image);
  long long mem = sandbox_memory_bytes(args.memory_limit_mb, sizing_, budget_bytes_);
  long long procs = args.max_processes ? args.max_processes : config_.default_max_processes;
  return std::make_unique<BwrapSandbox>(*this, std::move(root), next_++, mem, procs);
}

}  // namespace mlpt::sandbox
