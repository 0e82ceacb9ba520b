// Shared by the transport tests and their peer program: loading a transport plugin through the core
// loader, an endpoint wrapper that turns errors into mlpt::Error, a deterministic mixed-dtype tensor
// set, a dump format for what a peer received, and child processes on loopback.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "mlpt/sdk/types.hpp"
#include "mlpt/transport.h"
#include "tests/support/loopback_port.hpp"

extern char** environ;

namespace transport_test {

inline std::string plugin_path(const std::string& name) {
  return std::string(MLPT_PLUGIN_DIR) + "/libmlpt_transport_" + name + ".so";
}

// One loaded transport component; keeps its host and plugin alive.
struct Loaded {
  std::unique_ptr<mlpt::plugin::HostServices> host = std::make_unique<mlpt::plugin::HostServices>();
  std::shared_ptr<mlpt::plugin::Plugin> plugin;
  mlpt::plugin::Component component;
  const mlpt_transport_api* api = nullptr;

  explicit Loaded(const std::string& name) {
    plugin = mlpt::plugin::Plugin::load(plugin_path(name), *host);
    component = plugin->component(MLPT_COMPONENT_TRANSPORT, name);
    api = component.table<mlpt_transport_api>();
  }
  const mlpt_transport_capabilities* caps() const { return component.caps<mlpt_transport_capabilities>(); }
};

struct Received {
  uint64_t version = 0;
  const mlpt_named_tensor* tensors = nullptr;
  size_t count = 0;
  const mlpt_tensor_shard* shards = nullptr;  // NULL: whole tensors
};

class Endpoint {
 public:
  // `ranks`: the component group this endpoint is one rank of (sender ranks); NULL: a group of one.
  Endpoint(const Loaded& t, mlpt_transport_role role, const std::string& config, const std::string& group = "g",
           const mlpt_component_group* ranks = nullptr)
      : t_(t) {
    mlpt_transport_create_args a{};
    a.struct_size = MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE;
    a.config_json = {config.data(), config.size()};
    a.role = role;
    a.group = {group.data(), group.size()};
    a.component_group = ranks;
    mlpt::plugin::check(t_.component, t_.api->create(&a), "create");
    handle_ = a.transport;
  }
  ~Endpoint() { t_.api->destroy(handle_); }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // `shards`: parallel to `tensors`, the part of its global tensor each is (NULL: whole tensors).
  void send(uint64_t version, const std::vector<mlpt_named_tensor>& tensors, int64_t timeout_ms,
            const mlpt_tensor_shard* shards = nullptr) {
    mlpt_transport_send_args a{};
    a.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
    a.transport = handle_;
    a.version = version;
    a.tensors = tensors.data();
    a.num_tensors = tensors.size();
    a.timeout_ms = timeout_ms;
    a.shards = shards;
    mlpt::plugin::check(t_.component, t_.api->send(&a), "send");
  }
  // `want` / `want_shards`: the wanted layout (empty: every published tensor whole).
  Received receive(uint64_t min_version, int64_t timeout_ms, const std::vector<mlpt_named_tensor>& want = {},
                   const mlpt_tensor_shard* want_shards = nullptr) {
    mlpt_transport_receive_args a{};
    a.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
    a.transport = handle_;
    a.min_version = min_version;
    a.timeout_ms = timeout_ms;
    a.want_tensors = want.empty() ? nullptr : want.data();
    a.want_shards = want.empty() ? nullptr : want_shards;
    a.num_want = want.size();
    mlpt::plugin::check(t_.component, t_.api->receive(&a), "receive");
    return {a.out_version, a.out_tensors, a.out_num_tensors, a.out_shards};
  }
  void release(uint64_t version) {
    mlpt_transport_release_args a{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, handle_, version, nullptr};
    mlpt::plugin::check(t_.component, t_.api->release_received(&a), "release_received");
  }

 private:
  const Loaded& t_;
  mlpt_transport* handle_ = nullptr;
};

// ---- A deterministic tensor set: mixed dtypes, a 0-byte, a 1-byte and a 0-d tensor, sizes that
// are no multiple of any bucket. Contents depend on (seed, version). ----
struct TensorSet {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLDataType> dtypes;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<mlpt_named_tensor> views;

  void add(std::string name, DLDataType dtype, std::vector<int64_t> shape) {
    names.push_back(std::move(name));
    dtypes.push_back(dtype);
    shapes.push_back(std::move(shape));
  }
  // Allocates, fills and builds the views (call after the last add).
  void fill(uint64_t seed) {
    bytes.resize(names.size());
    views.resize(names.size());
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < names.size(); ++i) {
      size_t n = 1;
      for (auto d : shapes[i]) n *= static_cast<size_t>(d);
      bytes[i].resize(n * mlpt::sdk::element_bytes(dtypes[i]));
      for (auto& b : bytes[i]) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b = static_cast<uint8_t>(x >> 24);
      }
      auto& v = views[i];
      v = mlpt_named_tensor{};
      v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      v.name = {names[i].data(), names[i].size()};
      v.tensor.data = bytes[i].empty() ? nullptr : bytes[i].data();
      v.tensor.device = {kDLCPU, 0};
      v.tensor.ndim = static_cast<int32_t>(shapes[i].size());
      v.tensor.dtype = dtypes[i];
      v.tensor.shape = shapes[i].data();
    }
  }
};

inline TensorSet mixed_tensors(uint64_t version, int64_t scale = 1) {
  TensorSet s;
  s.add("model.layers.0.mlp.up_proj.weight", {kDLFloat, 32, 1}, {257 * scale, 1031});
  s.add("model.layers.0.self_attn.q_proj.weight", {kDLBfloat, 16, 1}, {3, 77777});
  s.add("model.layers.0.input_layernorm.bias", {kDLInt, 16, 1}, {1001});
  s.add("model.empty", {kDLFloat, 32, 1}, {0, 16});
  s.add("model.one_byte", {kDLUInt, 8, 1}, {1});
  s.add("model.scalar", {kDLFloat, 32, 1}, {});
  s.add("model.small", {kDLFloat, 32, 1}, {7, 13});
  s.add("model.embed_tokens.weight", {kDLInt, 16, 1}, {600001});
  s.fill(version);
  return s;
}

// ---- Dump of what a peer received: count, then per tensor name, dtype, shape, bytes. ----
inline void write_dump(const std::string& path, const mlpt_named_tensor* t, size_t n) {
  std::ofstream out(path, std::ios::binary);
  auto put = [&](const void* p, size_t k) { out.write(static_cast<const char*>(p), static_cast<std::streamsize>(k)); };
  uint64_t count = n;
  put(&count, 8);
  for (size_t i = 0; i < n; ++i) {
    uint64_t len = t[i].name.size;
    put(&len, 8);
    put(t[i].name.data, len);
    put(&t[i].tensor.dtype, sizeof(DLDataType));
    int64_t ndim = t[i].tensor.ndim;
    put(&ndim, 8);
    put(t[i].tensor.shape, sizeof(int64_t) * static_cast<size_t>(ndim));
    const uint64_t nbytes = mlpt::sdk::nbytes(t[i].tensor);
    put(&nbytes, 8);
    put(static_cast<const uint8_t*>(t[i].tensor.data) + t[i].tensor.byte_offset, nbytes);
  }
}

struct DumpedTensor {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The tensors of a dump, or "" and an error in `why` when it is missing or truncated.
inline std::vector<DumpedTensor> read_dump(const std::string& path, std::string& why) {
  std::vector<DumpedTensor> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "no dump at " + path;
    return out;
  }
  auto get = [&](void* p, size_t k) { in.read(static_cast<char*>(p), static_cast<std::streamsize>(k)); return bool(in) || k == 0; };
  uint64_t count = 0;
  get(&count, 8);
  for (size_t i = 0; i < count; ++i) {
    DumpedTensor t;
    uint64_t len = 0, nbytes = 0;
    int64_t ndim = 0;
    bool ok = get(&len, 8);
    t.name.resize(len);
    ok = ok && get(t.name.data(), len) && get(&t.dtype, sizeof(DLDataType)) && get(&ndim, 8);
    t.shape.resize(ok ? static_cast<size_t>(ndim) : 0);
    ok = ok && get(t.shape.data(), sizeof(int64_t) * t.shape.size()) && get(&nbytes, 8);
    t.bytes.resize(ok ? nbytes : 0);
    if (!ok || !get(t.bytes.data(), nbytes)) {
      why = path + ": truncated at tensor " + std::to_string(i);
      return out;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// "" when the dump at `path` equals `expected` bit for bit, else what differs.
inline std::string compare_dump(const std::string& path, const TensorSet& expected) {
  std::string why;
  std::vector<DumpedTensor> got = read_dump(path, why);
  if (!why.empty()) return why;
  if (got.size() != expected.names.size()) return "tensor count " + std::to_string(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const DumpedTensor& t = got[i];
    if (t.name != expected.names[i]) return "tensor " + std::to_string(i) + " is named " + t.name;
    if (t.dtype.code != expected.dtypes[i].code || t.dtype.bits != expected.dtypes[i].bits || t.dtype.lanes != expected.dtypes[i].lanes)
      return t.name + ": dtype differs";
    if (t.shape != expected.shapes[i]) return t.name + ": shape differs";
    if (t.bytes != expected.bytes[i]) return t.name + ": bytes differ";
  }
  return "";
}

// ---- Processes on loopback ----
// A port p with p .. p + count - 1 all free on loopback (sender rank r listens at p + r).
inline int free_ports(int count) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int base = free_port();
    bool all = base + count - 1 <= 65535;
    for (int k = 1; all && k < count; ++k) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(base + k));
      all = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
      close(fd);
    }
    if (all) return base;
  }
  throw std::runtime_error("no " + std::to_string(count) + " consecutive free ports on loopback");
}

// A child process with its stdout on a pipe; killed on destruction if still running.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) throw std::runtime_error("cannot start " + argv[0]);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
  }
  pid_t pid() const { return pid_; }

  // The next stdout line that is not a log record ("[2026-...] [info] ..."), or nothing after
  // `timeout_ms` / at end of output.
  std::optional<std::string> line(int timeout_ms) {
    for (;;) {
      auto l = raw_line(timeout_ms);
      if (!l || l->empty() || (*l)[0] != '[') return l;
    }
  }
  std::optional<std::string> raw_line(int timeout_ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string l = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return l;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Exit status (or 128 + signal), or -1 when still running after `timeout_ms`.
  int wait(int timeout_ms) {
    if (exited_) return status_;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      if (std::chrono::steady_clock::now() >= until) return -1;
      usleep(10000);
    }
  }
  void signal(int sig) { kill(pid_, sig); }
  // SIGSTOP, then true once every thread of the process has stopped: kill() returns before that, and
  // a receiver polling shared memory may take a whole version in the meantime. False after
  // `timeout_ms`, or when the process exited instead (then wait() reports it).
  bool stop(int timeout_ms) {
    kill(pid_, SIGSTOP);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int st = 0;
      if (waitpid(pid_, &st, WUNTRACED | WNOHANG) == pid_) {
        if (WIFSTOPPED(st)) return true;
        exited_ = true;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      usleep(1000);
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
  bool exited_ = false;
  int status_ = -1;
};

}  // namespace transport_test
