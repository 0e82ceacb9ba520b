#include "tcp_channel.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "mlpt/sdk/error.hpp"

namespace mlpt::transport::nccl {

using mlpt::sdk::Error;

namespace {

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1000));
}

addrinfo* resolve(const std::string& address, bool passive) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw Error(MLPT_INVALID_ARGUMENT, "nccl address \"" + address + "\" is not \"host:port\"");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw Error(MLPT_INVALID_ARGUMENT, "nccl address \"" + address + "\": " + gai_strerror(rc));
  return res;
}

}  // namespace

TcpChannel::~TcpChannel() {
  if (fd_ >= 0) close(fd_);
}

TcpChannel& TcpChannel::operator=(TcpChannel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

TcpChannel TcpChannel::connect(const std::string& address, Clock::time_point deadline) {
  addrinfo* res = resolve(address, false);
  std::string last = "timed out";
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      freeaddrinfo(res);
      return TcpChannel(fd);
    }
    last = std::strerror(errno);
    if (fd >= 0) close(fd);
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  freeaddrinfo(res);
  throw Error(MLPT_UNAVAILABLE, "nccl: no sender reachable at " + address + " (" + last + ")");
}

bool TcpChannel::write_all(const void* data, size_t size, Clock::time_point deadline, std::string& error) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    pollfd pfd{fd_, POLLOUT, 0};
    if (Clock::now() >= deadline) return error = "timed out writing", false;
    if (poll(&pfd, 1, ms_left(deadline)) <= 0) continue;
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
    if (n <= 0) return error = std::string("connection lost (") + std::strerror(errno) + ")", false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool TcpChannel::read_all(void* data, size_t size, Clock::time_point deadline, std::string& error) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    if (Clock::now() >= deadline) return error = "timed out", false;
    if (poll(&pfd, 1, ms_left(deadline)) <= 0) continue;
    ssize_t n = ::recv(fd_, p, size, 0);
    if (n == 0) return error = "connection closed by the peer", false;
    if (n < 0) return error = std::string("connection lost (") + std::strerror(errno) + ")", false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool TcpChannel::write(uint32_t type, const void* data, size_t size, Clock::time_point deadline, std::string& error) {
  uint8_t header[12];
  uint64_t len = size;
  std::memcpy(header, &type, 4);
  std::memcpy(header + 4, &len, 8);
  return write_all(header, sizeof(header), deadline, error) && write_all(data, size, deadline, error);
}

bool TcpChannel::read(Frame& frame, Clock::time_point deadline, std::string& error) {
  uint8_t header[12];
  if (!read_all(header, sizeof(header), deadline, error)) return false;
  uint64_t len = 0;
  std::memcpy(&frame.type, header, 4);
  std::memcpy(&len, header + 4, 8);
  if (len > (1ull << 30)) return error = "frame of " + std::to_string(len) + " bytes refused", false;
  frame.payload.resize(len);
  return read_all(frame.payload.data(), len, deadline, error);
}

TcpListener::TcpListener(const std::string& address) : address_(address) {
  addrinfo* res = resolve(address, true);
  fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool ok = fd_ >= 0 && bind(fd_, res->ai_addr, res->ai_addrlen) == 0 && listen(fd_, 64) == 0;
  std::string why = std::strerror(errno);
  freeaddrinfo(res);
  if (!ok) {
    if (fd_ >= 0) close(fd_);
    throw Error(MLPT_UNAVAILABLE, "nccl: cannot listen at " + address + " (" + why + ")");
  }
}

std::string TcpListener::reachable_address() const {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return address_;
  char host[256] = {};
  char port[16] = {};
  bool wildcard = false;
  if (bound.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
    wildcard = a->sin_addr.s_addr == htonl(INADDR_ANY);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    std::snprintf(port, sizeof(port), "%u", static_cast<unsigned>(ntohs(a->sin_port)));
  } else if (bound.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
    wildcard = IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
    host[0] = '[';
    inet_ntop(AF_INET6, &a->sin6_addr, host + 1, sizeof(host) - 2);
    std::strcat(host, "]");
    std::snprintf(port, sizeof(port), "%u", static_cast<unsigned>(ntohs(a->sin6_port)));
  } else {
    return address_;
  }
  if (wildcard) gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + port;
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

TcpChannel TcpListener::accept(Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, ms_left(deadline)) <= 0) continue;
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return TcpChannel(fd);
    }
  }
  return TcpChannel();
}

}  // namespace mlpt::transport::nccl
