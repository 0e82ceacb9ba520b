#include "ucx_common.hpp"

#include <arpa/inet.h>
#include <ucs/config/global_opts.h>
#include <unistd.h>

#include <fstream>

#include "mlpt/sdk/settings.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;

Config parse_config(std::string_view text, bool sender) {
  Config c;
  sdk::Settings s(text, "transport ucx");
  c.address = s.string_or("address", c.address);
  c.receivers = static_cast<size_t>(s.integer_or("receivers", static_cast<int64_t>(c.receivers), 1));
  c.senders =
      static_cast<size_t>(s.integer_or("senders", static_cast<int64_t>(c.senders), 1, kMaxSenderRanks));
  c.bucket_bytes = static_cast<uint64_t>(
      s.integer_or("bucket_bytes", static_cast<int64_t>(c.bucket_bytes), 4096, (int64_t(1) << 32) - 1));
  c.verify_checksum = s.boolean_or("verify_checksum", c.verify_checksum);
  c.timeout_ms = s.integer_or("timeout_ms", c.timeout_ms, 0);
  c.name = s.string_or("name", c.name);
  c.shared_memory = s.boolean_or("shared_memory", c.shared_memory);
  c.test_only_corrupt_bucket = s.integer_or("test_only_corrupt_bucket", c.test_only_corrupt_bucket, 0);
  c.test_only_exit_after_buckets =
      s.integer_or("test_only_exit_after_buckets", c.test_only_exit_after_buckets, 0);
  c.test_only_sender_exit_after_buckets =
      s.integer_or("test_only_sender_exit_after_buckets", c.test_only_sender_exit_after_buckets, 0);
  s.reject_unknown();
  if (!sender && c.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    c.name = "pid " + std::to_string(getpid()) + "@" + host;
  }
  return c;
}

std::string status_text(ucs_status_t s) {
  return ucs_status_string(s);
}

void put_box(std::vector<uint8_t>& out, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& extent) {
  put<uint32_t>(out, static_cast<uint32_t>(offset.size()));
  for (size_t d = 0; d < offset.size(); ++d) put<int64_t>(out, offset[d]), put<int64_t>(out, extent[d]);
}

bool get_box(const uint8_t*& p, const uint8_t* end, std::vector<int64_t>& offset,
             std::vector<int64_t>& extent) {
  uint32_t ndim = 0;
  if (!get(p, end, ndim) || ndim > 64) return false;
  offset.resize(ndim), extent.resize(ndim);
  for (uint32_t d = 0; d < ndim; ++d)
    if (!get(p, end, offset[d]) || !get(p, end, extent[d])) return false;
  return true;
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

bool get_string(const uint8_t*& p, const uint8_t* end, std::string& s) {
  uint32_t n = 0;
  if (!get(p, end, n) || static_cast<size_t>(end - p) < n) return false;
  s.assign(reinterpret_cast<const char*>(p), n);
  p += n;
  return true;
}

void fail(mlpt_error_code code, const std::string& what, ucs_status_t s) {
  throw Error(code, what + ": " + status_text(s));
}

sockaddr_storage resolve(const std::string& address, socklen_t* length) {
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      throw Error(MLPT_INVALID_ARGUMENT, "ucx address \"" + address + "\" is not \"[v6]:port\"");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
      throw Error(MLPT_INVALID_ARGUMENT, "ucx address \"" + address + "\" is not \"host:port\"");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
    throw Error(MLPT_INVALID_ARGUMENT,
                "ucx address \"" + address + "\": port \"" + port + "\" is not a number 0..65535");
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res)
    throw Error(MLPT_INVALID_ARGUMENT,
                "ucx address \"" + address + "\": cannot resolve host \"" + host + "\": " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  *length = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

std::string describe(const sockaddr_storage& addr) {
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    port = ntohs(a->sin_port);
    return std::string(ip) + ":" + std::to_string(port);
  }
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    port = ntohs(a->sin6_port);
    return "[" + std::string(ip) + "]:" + std::to_string(port);
  }
  return "unknown address";
}

std::string machine_identity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

void destroy_worker(ucp_worker_h worker, bool abandoned) {
  const ucs_log_level_t level = ucs_global_opts.log_component.log_level;
  if (abandoned && level > UCS_LOG_LEVEL_ERROR) ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_ERROR;
  ucp_worker_destroy(worker);
  ucs_global_opts.log_component.log_level = level;
}

ucp_context_h make_context(const std::string& who) {
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), who + ": reading the UCX configuration");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM;
  params.name = "mlpt-transport-ucx";
  ucp_context_h context = nullptr;
  ucs_status_t s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  check(s, who + ": initialising UCX");
  return context;
}

}  // namespace mlpt::transport::ucx
