// The NCCL transport's side channel: a TCP socket carrying the ncclUniqueId at bootstrap, then per
// version the metadata and the receivers' acks, as frames {u32 type, u64 length, payload}. Every call
// takes a deadline, so no peer can block the other beyond its timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mlpt::transport::nccl {

using Clock = std::chrono::steady_clock;

enum FrameType : uint32_t { kHello = 1, kSetup = 2, kMeta = 3, kAck = 4, kBye = 5 };

struct Frame {
  uint32_t type = 0;
  std::vector<uint8_t> payload;
};

class TcpChannel {
 public:
  TcpChannel() = default;
  explicit TcpChannel(int fd) : fd_(fd) {}
  ~TcpChannel();
  TcpChannel(TcpChannel&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  TcpChannel& operator=(TcpChannel&& o) noexcept;

  // Connects to "host:port", retrying until `deadline` (the sender may not listen yet). Throws.
  static TcpChannel connect(const std::string& address, Clock::time_point deadline);

  // False (with `error` set) on timeout, a closed connection or a socket error.
  bool write(uint32_t type, const void* data, size_t size, Clock::time_point deadline, std::string& error);
  bool read(Frame& frame, Clock::time_point deadline, std::string& error);
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  bool write_all(const void* data, size_t size, Clock::time_point deadline, std::string& error);
  bool read_all(void* data, size_t size, Clock::time_point deadline, std::string& error);
  int fd_ = -1;
};

class TcpListener {
 public:
  explicit TcpListener(const std::string& address);  // throws MLPT_UNAVAILABLE naming the address
  ~TcpListener();
  // One connection, or an invalid channel after `deadline`.
  TcpChannel accept(Clock::time_point deadline);
  // host:port where peers connect: the bound port (the one the system picked for port 0), and this
  // machine's name for a wildcard host.
  std::string reachable_address() const;

 private:
  int fd_ = -1;
  std::string address_;
};

}  // namespace mlpt::transport::nccl
