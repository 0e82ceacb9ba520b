#include "image_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/types.hpp"
#include "process.hpp"
#include "sif_image.hpp"
#include "state_dir.hpp"

namespace mlpt::sandbox {
namespace {

namespace fs = std::filesystem;
using sdk::Error;

bool clean_absolute(const std::string& p) {
  if (p.empty() || p[0] != '/') return false;
  if (p.find("/../") != std::string::npos || p.find("/./") != std::string::npos || p.find("//") != std::string::npos)
    return false;
  return !(p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0) && !(p.size() >= 2 && p.compare(p.size() - 2, 2, "/.") == 0);
}

bool under(const std::string& p, const std::string& prefix) {
  return p == prefix || (p.size() > prefix.size() && p.compare(0, prefix.size(), prefix) == 0 && p[prefix.size()] == '/');
}

// Runs a helper tool to completion with a generous timeout; returns (status, output).
std::pair<int, std::string> run_tool(const std::string& exe, const std::vector<std::string>& argv, int64_t timeout_ms) {
  sdk::StringSink out(1 << 16);
  ChildSetup s;
  s.exe = exe;
  s.argv = argv;
  s.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  RunRequest r;
  r.timeout_ms = timeout_ms;
  r.sink = out.sink();
  RunResult res = run_process(s, r);
  return {res.exit_code, out.text()};
}

// lchown of every entry below and including `dir` (links themselves, never their targets).
bool chown_tree(const std::string& dir, uid_t uid, gid_t gid) {
  if (::lchown(dir.c_str(), uid, gid) != 0) return false;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end; it.increment(ec))
    if (::lchown(it->path().c_str(), uid, gid) != 0) return false;
  return !ec;
}

}  // namespace

ImageRoot::~ImageRoot() {
  if (mountpoint.empty()) return;
  // The FUSE daemon exits once its mount is gone.
  if (::umount2(mountpoint.c_str(), 0) != 0) ::umount2(mountpoint.c_str(), MNT_DETACH);
  ::rmdir(mountpoint.c_str());
  ::rmdir(fs::path(mountpoint).parent_path().c_str());
}

void parse_binds(const std::string& text, const std::string& where, const std::vector<std::string>& allowed,
                 std::vector<HostBind>& binds, std::vector<std::pair<std::string, std::string>>& env) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, where + " is not JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(MLPT_INVALID_ARGUMENT, where + " must hold a JSON object");
  for (auto& [key, v] : j.items()) {
    if (key == "binds") {
      if (!v.is_array()) throw Error(MLPT_INVALID_ARGUMENT, where + ": \"binds\" must be an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const auto& e = v[i];
        std::string at = where + ": binds[" + std::to_string(i) + "]";
        HostBind b;
        if (e.is_string()) {
          b.host = b.path = e.get<std::string>();
        } else if (e.is_object()) {
          for (auto& [k, x] : e.items()) {
            if (k == "host" && x.is_string()) b.host = x.get<std::string>();
            else if (k == "path" && x.is_string()) b.path = x.get<std::string>();
            else if (k == "optional" && x.is_boolean()) b.optional = x.get<bool>();
            else throw Error(MLPT_INVALID_ARGUMENT, at + ": unknown or mistyped key \"" + k + "\"");
          }
          if (b.path.empty()) b.path = b.host;
        } else {
          throw Error(MLPT_INVALID_ARGUMENT, at + " must be a path string or {\"host\", \"path\", \"optional\"}");
        }
        if (!clean_absolute(b.host) || !clean_absolute(b.path))
          throw Error(MLPT_INVALID_ARGUMENT, at + ": paths must be absolute without '.', '..' or '//' (\"" + b.host + "\")");
        if (b.path == "/") throw Error(MLPT_INVALID_ARGUMENT, at + ": cannot bind over /");
        bool ok = false;
        for (auto& p : allowed) ok = ok || under(b.host, p);
        if (!ok)
          throw Error(MLPT_PERMISSION_DENIED, at + ": host path \"" + b.host +
                                                  "\" is outside the runtime's allowed_bind_prefixes");
        binds.push_back(b);
      }
    } else if (key == "env") {
      if (!v.is_object()) throw Error(MLPT_INVALID_ARGUMENT, where + ": \"env\" must be an object of strings");
      for (auto& [k, x] : v.items()) {
        if (!x.is_string() || k.empty() || k.find('=') != std::string::npos)
          throw Error(MLPT_INVALID_ARGUMENT, where + ": env \"" + k + "\" must be a string");
        env.emplace_back(k, x.get<std::string>());
      }
    } else {
      throw Error(MLPT_INVALID_ARGUMENT, where + ": unknown key \"" + key + "\" (expected \"binds\", \"env\")");
    }
  }
}

ImageStore::ImageStore(const RuntimeConfig& config, std::string images_dir)
    : config_(config), images_dir_(std::move(images_dir)) {
  bool have_fuse = ::access("/dev/fuse", R_OK | W_OK) == 0 && !find_executable(config.squashfuse).empty();
  if (config.image_mount == "squashfuse" && !have_fuse)
    throw Error(MLPT_FAILED_PRECONDITION, "image_mount \"squashfuse\" needs /dev/fuse and " + config.squashfuse);
  use_fuse_ = config.image_mount == "squashfuse" || (config.image_mount == "auto" && have_fuse);
  fuse_fallback_ = config.image_mount == "auto";
  if (!use_fuse_ && find_executable(config.unsquashfs).empty())
    throw Error(MLPT_FAILED_PRECONDITION, "neither squashfuse (with /dev/fuse) nor " + config.unsquashfs + " is usable");
}

std::shared_ptr<ImageRoot> ImageStore::acquire(const std::string& image) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(image, ec);
  struct stat st {};
  if (::stat(image.c_str(), &st) != 0)
    throw Error(MLPT_NOT_FOUND, "image " + image + ": " + std::strerror(errno));
  std::string key = (ec ? image : canon.string()) + "|" + std::to_string(st.st_size) + "|" +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> g(mutex_);
    auto& s = slots_[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::lock_guard<std::mutex> g(slot->mutex);
  if (auto r = slot->root.lock()) return r;
  auto r = open(image);
  slot->root = r;
  std::lock_guard<std::mutex> g2(mutex_);
  if (config_.keep_mounted > 0) {
    recent_.push_back(r);
    while (recent_.size() > config_.keep_mounted) recent_.pop_front();
  }
  return r;
}

std::shared_ptr<ImageRoot> ImageStore::open(const std::string& image) {
  sif::SifImage sif;
  try {
    sif = sif::read_sif(image);
  } catch (const sif::SifError& e) {
    throw Error(e.kind() == sif::ErrorKind::Io ? MLPT_NOT_FOUND : MLPT_INVALID_ARGUMENT,
                std::string("bad image (") + sif::error_kind_name(e.kind()) + "): " + e.what());
  }
  auto root = std::make_shared<ImageRoot>();
  root->image = image;
  const auto& part = sif.primary_partition();
  std::string key;
  {
    std::lock_guard<std::mutex> g(mutex_);
    key = std::to_string(counter_++);
  }
  bool fuse;
  {
    std::lock_guard<std::mutex> g(mutex_);
    fuse = use_fuse_;
  }
  if (fuse) {
    try {
      mount_fuse(*root, static_cast<uint64_t>(part.offset), key);
    } catch (const Error&) {
      if (!fuse_fallback_) throw;
      std::lock_guard<std::mutex> g(mutex_);
      use_fuse_ = false;  // FUSE does not work here: extract from now on
      fuse = false;
    }
  }
  if (!fuse) extract(*root, static_cast<uint64_t>(part.offset), static_cast<uint64_t>(part.size));

  // The image's request for host binds; never follow a link out of the image.
  std::string meta = root->lower + "/.mlpt", file = meta + "/binds.json";
  struct stat st {};
  if (::lstat(meta.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::lstat(file.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) throw Error(MLPT_INVALID_ARGUMENT, image + ": /.mlpt/binds.json is not a regular file");
    std::ifstream f(file);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    parse_binds(text, image + ": /.mlpt/binds.json", config_.allowed_bind_prefixes, root->binds, root->env);
    for (auto& b : root->binds)
      if (!b.optional && ::access(b.host.c_str(), F_OK) != 0)
        throw Error(MLPT_FAILED_PRECONDITION, image + ": /.mlpt/binds.json asks for host path " + b.host +
                                                  ", which does not exist on this host");
  }
  return root;
}

void ImageStore::mount_fuse(ImageRoot& root, uint64_t offset, const std::string& key) {
  std::string dir = images_dir_ + "/" + key;
  std::string mp = dir + "/root";
  std::error_code ec;
  fs::create_directories(mp, ec);
  if (ec) throw Error(MLPT_INTERNAL, "cannot create " + mp + ": " + ec.message());
  std::string exe = find_executable(config_.squashfuse);
  // squashfuse daemonises once the mount is up, so its exit means the tree is ready. Every file
  // shows as owned by the sandbox uid, so root inside the sandbox's user namespace owns the image
  // as it would in the image's own world; allow_other lets that uid reach the mount.
  std::string options = "offset=" + std::to_string(offset) + ",uid=" + std::to_string(config_.sandbox_uid) +
                        ",gid=" + std::to_string(config_.sandbox_gid) + ",allow_other";
  auto [status, out] = run_tool(exe, {exe, "-o", options, root.image, mp}, 60000);
  struct stat a {}, b {};
  if (status != 0 || ::stat(mp.c_str(), &a) != 0 || ::stat(dir.c_str(), &b) != 0 || a.st_dev == b.st_dev) {
    ::umount2(mp.c_str(), MNT_DETACH);
    ::rmdir(mp.c_str());
    ::rmdir(dir.c_str());
    throw Error(MLPT_UNAVAILABLE, "squashfuse could not mount " + root.image + " (status " + std::to_string(status) + "): " + out);
  }
  root.lower = mp;
  root.mountpoint = mp;
}

void ImageStore::extract(ImageRoot& root, uint64_t offset, uint64_t size) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(sif::content_hash(root.image, offset, size)));
  // Extracted trees belong to the sandbox uid (see mount_fuse), so the uid is part of the name.
  std::string dest = config_.cache_dir + "/" + hex + "-u" + std::to_string(config_.sandbox_uid) + "g" +
                     std::to_string(config_.sandbox_gid);
  std::error_code ec;
  fs::create_directories(config_.cache_dir, ec);
  if (ec) throw Error(MLPT_INTERNAL, "cannot create cache dir " + config_.cache_dir + ": " + ec.message());
  // One extraction per image across processes: a lock file beside the tree.
  int lock = ::open((dest + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) throw Error(MLPT_INTERNAL, "cannot create " + dest + ".lock: " + std::strerror(errno));
  ::flock(lock, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock};
  if (!fs::exists(dest + ".done")) {
    std::string tmp = dest + ".tmp" + std::to_string(::getpid());
    remove_tree(tmp);
    std::string exe = find_executable(config_.unsquashfs);
    auto [status, out] = run_tool(exe, {exe, "-o", std::to_string(offset), "-d", tmp, "-no-progress", "-quiet", root.image}, 600000);
    if (status != 0) {
      remove_tree(tmp);
      throw Error(MLPT_INTERNAL, "unsquashfs could not extract " + root.image + ": " + out);
    }
    if (!chown_tree(tmp, static_cast<uid_t>(config_.sandbox_uid), static_cast<gid_t>(config_.sandbox_gid))) {
      int e = errno;
      remove_tree(tmp);
      throw Error(MLPT_INTERNAL, "cannot hand the extracted image " + root.image + " to the sandbox uid: " + std::strerror(e));
    }
    remove_tree(dest);
    fs::rename(tmp, dest, ec);
    if (ec) throw Error(MLPT_INTERNAL, "cannot move the extracted image to " + dest + ": " + ec.message());
    std::ofstream(dest + ".done") << root.image << "\n";
  }
  root.lower = dest;
}

}  // namespace mlpt::sandbox
