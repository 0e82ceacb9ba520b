// What the UCX sender and receiver share: the config, the wire vocabulary (tags and active
// messages), addresses, and turning UCX statuses into mlpt errors.
#pragma once

#include <ucp/api/ucp.h>

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mlpt/sdk/error.hpp"

namespace mlpt::transport::ucx {

using Clock = std::chrono::steady_clock;

struct Config {
  // sender: where to listen; receiver: where to connect. Empty: met through the host's key-value
  // store (the sender listens on a port the system picks and publishes it).
  std::string address;
  size_t receivers = 1;                // sender: how many receivers every send waits for
  size_t senders = 1;                  // receiver with an address: how many sender ranks (rank r at port + r)
  uint64_t bucket_bytes = 16ull << 20; // largest message on the wire
  bool verify_checksum = true;         // sender: compute per-bucket xxhash64; receiver: check it
  int64_t timeout_ms = 30000;          // receiver: how long to keep trying to connect; both: teardown bound
  std::string name;                    // receiver: how the sender names it in errors
  // sender: a receiver on this machine gets its streams over a second endpoint without peer error
  // handling, so that UCX may use shared memory (see open_stream_endpoint in ucx_sender.cpp).
  bool shared_memory = true;
  // Test-only fault injection, named so nobody sets them by accident:
  int64_t test_only_corrupt_bucket = -1;     // receiver flips a byte of this bucket after it lands
  int64_t test_only_exit_after_buckets = -1; // receiver process _exit()s after this many buckets landed
  int64_t test_only_sender_exit_after_buckets = -1;  // sender process _exit()s after this many bucket sends
};
Config parse_config(std::string_view json, bool sender);

// ---- Wire vocabulary ----
// Sender -> receiver travels as tagged messages (so large metadata can use rendezvous).
// Tag: bit 63 = control, bits 56..62 kind, bits 32..55 low bits of the version (data: of the
// stream number), bits 20..31 the sender rank (a receiver of several sender ranks has one worker for
// all), bits 0..19 the bucket (meta: the stream number).
//
// One version may be streamed to one receiver twice: whole, then again as the pieces it pulls once
// its pulls arrive. So every stream to a receiver has a number of its own, which its data tags,
// commit, abort and the receiver's ack carry: buckets of a superseded stream never land in the new
// one, and its ack never confirms the new one.
enum class Kind : uint64_t {
  kData = 1, kMeta = 2, kCommit = 3, kAbort = 4, kWelcome = 5, kReject = 6, kBye = 7,
  kOffer = 8,  // a sender rank's shard boxes, asked for by a receiver that plans its pulls
};
inline constexpr uint64_t kControlBit = 1ull << 63;
inline constexpr uint32_t kMaxSenderRanks = 1024;   // capabilities.max_sender_ranks (fits the 12 rank bits)
inline constexpr uint32_t kMaxBuckets = 1u << 20;   // per version and sender rank (the 20 bucket bits)
inline ucp_tag_t make_tag(Kind kind, uint64_t version, uint32_t rank, uint32_t index) {
  uint64_t control = kind == Kind::kData ? 0 : kControlBit;
  return control | (static_cast<uint64_t>(kind) << 56) | ((version & 0xFFFFFF) << 32) |
         (static_cast<uint64_t>(rank & 0xFFF) << 20) | (index & (kMaxBuckets - 1));
}
inline constexpr uint32_t kStreamMask = kMaxBuckets - 1;  // stream numbers fit the meta tag's bucket bits
inline Kind tag_kind(ucp_tag_t tag) { return static_cast<Kind>((tag >> 56) & 0x7F); }
inline uint32_t tag_index(ucp_tag_t tag) { return static_cast<uint32_t>(tag & (kMaxBuckets - 1)); }
inline uint32_t tag_rank(ucp_tag_t tag) { return static_cast<uint32_t>((tag >> 20) & 0xFFF); }
inline constexpr ucp_tag_t kFullMask = ~0ull;

// Receiver -> sender travels as active messages with these ids; payloads start with the peer id the
// sender assigned in its welcome. kAmAsk asks for the sender rank's shard boxes (answered by kOffer);
// kAmPull says which boxes of which tensors to send this receiver from now on; kAmWhole (one sender
// rank) asks for every version as the rank sends it. A receiver gets nothing before it said which.
// kAmHello carries the receiver's name, machine identity and UCX worker address (put_string each).
// kAmLeaving: the receiver is closing its endpoint on purpose, so the broken connection that
// follows is its leaving, not a fault (it is dropped as a lost one is, without a warning).
enum AmId : unsigned { kAmHello = 1, kAmAck = 2, kAmAsk = 3, kAmPull = 4, kAmWhole = 5, kAmLeaving = 6 };

// A box of a global tensor on the wire: ndim, then offsets and extents.
void put_box(std::vector<uint8_t>& out, const std::vector<int64_t>& offset, const std::vector<int64_t>& extent);
bool get_box(const uint8_t*& p, const uint8_t* end, std::vector<int64_t>& offset, std::vector<int64_t>& extent);
void put_string(std::vector<uint8_t>& out, const std::string& s);
bool get_string(const uint8_t*& p, const uint8_t* end, std::string& s);

// ---- Helpers ----
std::string status_text(ucs_status_t s);
[[noreturn]] void fail(mlpt_error_code code, const std::string& what, ucs_status_t s);
inline void check(ucs_status_t s, const std::string& what) {
  if (s != UCS_OK) fail(MLPT_UNAVAILABLE, what, s);
}

// "host:port" (or "[v6]:port") -> socket address; throws MLPT_INVALID_ARGUMENT naming the text.
sockaddr_storage resolve(const std::string& address, socklen_t* length);
std::string describe(const sockaddr_storage& addr);

// What tells this machine from others: host name and kernel boot id. A receiver sends it in its
// hello; a sender that finds its own there knows shared memory can reach the receiver.
std::string machine_identity();

// A ucp context reading UCX_* from the environment; features TAG and AM.
ucp_context_h make_context(const std::string& who);

// Destroys `worker`. `abandoned`: it holds sends to a receiver that died, pending for good on an
// endpoint without peer error handling (the shared-memory stream endpoint); UCX would warn of each
// as a request "not returned to mpool", which the caller already reported, so UCX's warnings are
// held back while the worker ends (errors still show).
void destroy_worker(ucp_worker_h worker, bool abandoned);

// The sender and receiver each run one Engine (their UCX worker) on a progress thread. Starts
// `engine.run()` and waits until it has set `init_done`; if it failed (`init_error`), joins the
// thread, releases `context` and throws MLPT_UNAVAILABLE with the engine's message.
template <class Engine>
std::thread start_progress_thread(Engine& engine, ucp_context_h context) {
  std::thread thread([&engine] { engine.run(); });
  std::unique_lock lock(engine.mutex);
  engine.cv.wait(lock, [&] { return engine.init_done; });
  if (!engine.init_error.empty()) {
    std::string error = engine.init_error;
    lock.unlock();
    thread.join();
    ucp_cleanup(context);
    throw mlpt::sdk::Error(MLPT_UNAVAILABLE, error);
  }
  return thread;
}

// Stops the engine's loop, joins its thread, destroys the engine, then releases `context`.
template <class Engine>
void stop_progress_thread(std::unique_ptr<Engine>& engine, std::thread& thread, ucp_context_h context) {
  engine->stop.store(true, std::memory_order_release);
  thread.join();
  engine.reset();
  ucp_cleanup(context);
}

// Little-endian POD (de)serialisation for the small control payloads.
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <class T>
bool get(const uint8_t*& p, const uint8_t* end, T& v) {
  if (static_cast<size_t>(end - p) < sizeof(T)) return false;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return true;
}

}  // namespace mlpt::transport::ucx
