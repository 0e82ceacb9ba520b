// A wire for the refit benches: one TCP connection over the loopback interface, the sender's end
// and the receiver's end in this process (each used from its own thread). Every byte crosses the
// kernel's network stack, as on the run's TCP transports; nothing is handed over by pointer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace refit_bench {

class LoopbackWire {
 public:
  LoopbackWire() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) fail("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      fail("bind/listen on 127.0.0.1");
    send_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (send_fd_ < 0 || ::connect(send_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      fail("connect");
    receive_fd_ = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    if (receive_fd_ < 0) fail("accept");
    const int one = 1;
    ::setsockopt(send_fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~LoopbackWire() {
    ::close(send_fd_);
    ::close(receive_fd_);
  }
  LoopbackWire(const LoopbackWire&) = delete;
  LoopbackWire& operator=(const LoopbackWire&) = delete;

  void send(const void* data, size_t bytes) {
    for (auto* p = static_cast<const char*>(data); bytes > 0;) {
      const ssize_t n = ::send(send_fd_, p, bytes, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("send");
      p += n, bytes -= static_cast<size_t>(n);
    }
  }
  void receive(void* data, size_t bytes) {
    for (auto* p = static_cast<char*>(data); bytes > 0;) {
      const ssize_t n = ::recv(receive_fd_, p, bytes, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("recv");
      p += n, bytes -= static_cast<size_t>(n);
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& what) {
    throw std::runtime_error("loopback wire: " + what + ": " + std::strerror(errno));
  }
  int send_fd_ = -1, receive_fd_ = -1;
};

}  // namespace refit_bench
