// Images as read-only root trees on the host: the SIF's squashfs partition mounted with squashfuse
// at its offset (shared by every sandbox of that image; unmounted when the last is gone and it
// falls out of the keep-mounted list), or, when FUSE is not usable, extracted once with unsquashfs
// into the cache directory under the partition's content hash. Also reads the image's request for
// host binds (/.mlpt/binds.json).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"

namespace mlpt::sandbox {

struct HostBind {
  std::string host;  // absolute host path
  std::string path;  // where it appears inside (defaults to `host`)
  bool optional = false;
};

struct ImageRoot {
  std::string image;  // the SIF path as given
  std::string lower;  // the read-only root tree on the host
  std::vector<HostBind> binds;
  std::vector<std::pair<std::string, std::string>> env;
  std::string mountpoint;  // non-empty when squashfuse-mounted (unmounted by the destructor)
  ~ImageRoot();
};

// Parses the binds file's text; `allowed` is the list of host prefixes an image may bind.
// Throws sdk::Error(INVALID_ARGUMENT) naming `where` and the entry.
void parse_binds(const std::string& text, const std::string& where, const std::vector<std::string>& allowed,
                 std::vector<HostBind>& binds, std::vector<std::pair<std::string, std::string>>& env);

class ImageStore {
 public:
  ImageStore(const RuntimeConfig& config, std::string images_dir);
  // Thread-safe. Validates the SIF (sdk::Error INVALID_ARGUMENT/NOT_FOUND naming the field).
  std::shared_ptr<ImageRoot> acquire(const std::string& image);
  const char* mode() const { return use_fuse_ ? "squashfuse" : "extract"; }

 private:
  std::shared_ptr<ImageRoot> open(const std::string& image);
  void mount_fuse(ImageRoot& root, uint64_t offset, const std::string& key);
  void extract(ImageRoot& root, uint64_t offset, uint64_t size);

  const RuntimeConfig& config_;
  std::string images_dir_;
  bool use_fuse_ = true, fuse_fallback_ = false;
  std::mutex mutex_;
  struct Slot {
    std::mutex mutex;
    std::weak_ptr<ImageRoot> root;
  };
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  std::deque<std::shared_ptr<ImageRoot>> recent_;  // keeps the last few mounted
  int counter_ = 0;
};

}  // namespace mlpt::sandbox
