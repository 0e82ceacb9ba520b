// A tiny task-like image for tests: /testbed with a hidden test folder, and /.mlpt/binds.json that
// binds the host's /usr, /bin, /sbin, /lib, /lib64 read-only (shell, coreutils, python3, pytest).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sif_image.hpp"

namespace sandbox_test {

// Removes the folder at exit (declared before anything that uses it, so destroyed after).
struct RemoveAtExit {
  std::filesystem::path dir;
  ~RemoveAtExit() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

inline std::filesystem::path scratch_dir() {
  static RemoveAtExit cleanup;
  static std::filesystem::path d = [] {
    auto p = std::filesystem::temp_directory_path() / ("mlpt-sbtest-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    cleanup.dir = p;
    return p;
  }();
  return d;
}

inline void put(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Builds (once per process) and returns the path of the test image.
inline std::string test_image() {
  static std::string path = [] {
    namespace fs = std::filesystem;
    fs::path root = scratch_dir() / "rootfs";
    put(root / "testbed/hello.py", "def greet():\n    return 'hi'\n");
    put(root / "testbed/r2e_tests/test_hello.py", "from hello import greet\n\ndef test_greet():\n    assert greet() == 'hi'\n");
    put(root / "testbed/run_tests.sh", "python3 -m pytest -rA r2e_tests\n");
    put(root / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    fs::create_directories(root / "root");
    fs::create_directories(root / "tmp");
    fs::permissions(root / "tmp", fs::perms::all | fs::perms::sticky_bit);
    put(root / ".mlpt/binds.json",
        R"({"binds": ["/usr", "/bin", "/sbin", "/lib", {"host": "/lib64", "optional": true}], "env": {"PYTHONDONTWRITEBYTECODE": "1"}})");
    fs::path sif = scratch_dir() / "task.sif";
    mlpt::sif::BuildOptions o;
    o.time = 1700000000;
    mlpt::sif::build_sif(root, sif, o);
    return sif.string();
  }();
  return path;
}

}  // namespace sandbox_test
