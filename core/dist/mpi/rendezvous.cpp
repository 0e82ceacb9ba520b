#include "core/dist/mpi/rendezvous.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <mlpt/sdk/mpi_status.hpp>

#include "core/error.hpp"

namespace mlpt::dist {

// What a request asks of the keeper. CANCEL names the reply tag of an earlier GET or BARRIER.
enum class MpiRendezvous::Op : char { kPut = 'p', kGet = 'g', kBarrier = 'b', kCancel = 'c', kLeave = 'l' };

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRequestTag = 1;
constexpr int kMaxReplyTag = 30000;  // MPI guarantees tags up to 32767
constexpr char kOk = 'o', kExists = 'x', kCancelAck = 'a', kRefused = 'e';

void check_mpi(int rc, const char* call) { sdk::check_mpi<Error>(rc, std::string("rendezvous: ") + call); }

// A request's bytes: op, reply tag, key length, key, value.
std::string encode(char op, int reply_tag, const std::string& key, const std::string& value) {
  std::string m(1 + sizeof(int32_t) + sizeof(uint32_t), '\0');
  m[0] = op;
  const int32_t tag = reply_tag;
  const uint32_t key_size = static_cast<uint32_t>(key.size());
  std::memcpy(&m[1], &tag, sizeof tag);
  std::memcpy(&m[1 + sizeof tag], &key_size, sizeof key_size);
  return m + key + value;
}

// Receives one message matched by (source, tag) on `comm` if there is one.
bool try_receive(MPI_Comm comm, int source, int tag, std::string* bytes, MPI_Status* status) {
  int flag = 0;
  MPI_Message message;
  check_mpi(MPI_Improbe(source, tag, comm, &flag, &message, status), "MPI_Improbe");
  if (!flag) return false;
  int count = 0;
  MPI_Get_count(status, MPI_CHAR, &count);
  bytes->assign(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Mrecv(bytes->data(), count, MPI_CHAR, &message, status), "MPI_Mrecv");
  return true;
}

void send_bytes(MPI_Comm comm, int dest, int tag, const std::string& bytes) {
  check_mpi(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_CHAR, dest, tag, comm), "MPI_Send");
}

// Polls without burning a core: fast at first (a rendezvous is usually answered at once), then
// at most every 2 ms.
class Backoff {
 public:
  void wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    delay_us_ = std::min(delay_us_ * 2, 2000);
  }
  void reset() { delay_us_ = 20; }

 private:
  int delay_us_ = 20;
};

}  // namespace

MpiRendezvous::MpiRendezvous(mlpt_process_role role) {
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &requests_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &replies_), "MPI_Comm_dup");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Nodes: the processes that share memory with this one; a node is named by its first rank.
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int local_rank = 0, local_size = 1, leader = rank;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  check_mpi(MPI_Bcast(&leader, 1, MPI_INT, 0, local), "MPI_Bcast");
  MPI_Comm_free(&local);
  std::vector<int> leaders(static_cast<size_t>(size));
  check_mpi(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::set<int> nodes(leaders.begin(), leaders.end());
  const int node_index = static_cast<int>(std::distance(nodes.begin(), nodes.find(leader)));
  process_ = mlpt_process_info{MLPT_PROCESS_INFO_STRUCT_SIZE, rank, size, local_rank, local_size,
                               node_index, static_cast<int32_t>(nodes.size()), role};
  if (rank == 0) keeper_ = std::thread([this] { keep_store(); });
}

MpiRendezvous::~MpiRendezvous() {
  if (process_.rank != 0) {
    try {
      send_request(Op::kLeave, 0, "", "");
    } catch (const Error&) {
    }
  }
  leaving_ = true;
  if (keeper_.joinable()) keeper_.join();
}

int MpiRendezvous::send_request(Op op, int reply_tag, const std::string& key, const std::string& value) {
  send_bytes(requests_, 0, kRequestTag, encode(static_cast<char>(op), reply_tag, key, value));
  return reply_tag;
}

MpiRendezvous::Reply MpiRendezvous::call(Op op, const std::string& key, const std::string& value, int64_t timeout_ms,
                                         const std::atomic<bool>* cancelled, const std::string& what) {
  const int tag = 1 + next_tag_.fetch_add(1) % kMaxReplyTag;
  send_request(op, tag, key, value);
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  std::string bytes;
  MPI_Status status;
  Backoff backoff;
  for (;;) {
    if (try_receive(replies_, 0, tag, &bytes, &status)) return Reply{bytes.at(0), bytes.substr(1)};
    const bool was_cancelled = cancelled && cancelled->load();
    if (was_cancelled || (timeout_ms >= 0 && Clock::now() >= deadline)) {
      // Withdraw the request; the keeper acknowledges on the same tag, after the answer if it had
      // already sent one (MPI keeps the order of messages between two ranks on one tag).
      send_request(Op::kCancel, tag, "", "");
      std::optional<Reply> answer;
      backoff.reset();
      for (;;) {
        if (!try_receive(replies_, 0, tag, &bytes, &status)) {
          backoff.wait();
          continue;
        }
        if (bytes.at(0) == kCancelAck) break;
        answer = Reply{bytes.at(0), bytes.substr(1)};
      }
      if (answer) return *answer;
      if (was_cancelled) throw Error(MLPT_CANCELLED, what + ": cancelled");
      throw Error(MLPT_DEADLINE_EXCEEDED, what + " within " + std::to_string(timeout_ms) + " ms");
    }
    backoff.wait();
  }
}

void MpiRendezvous::put(const std::string& key, const std::string& value) {
  if (key.empty()) throw Error(MLPT_INVALID_ARGUMENT, "kv_put: the key is empty");
  Reply r = call(Op::kPut, key, value, -1, nullptr, "kv_put of '" + key + "'");
  if (r.status == kExists)
    throw Error(MLPT_ALREADY_EXISTS, "kv_put: key '" + key + "' already holds another value (keys are written once)");
}

std::string MpiRendezvous::get(const std::string& key, int64_t timeout_ms, const std::atomic<bool>& cancelled) {
  if (key.empty()) throw Error(MLPT_INVALID_ARGUMENT, "kv_get: the key is empty");
  Reply r = call(Op::kGet, key, "", timeout_ms, &cancelled, "kv_get: key '" + key + "' was not put");
  return r.value;
}

void MpiRendezvous::barrier(const std::string& name, int64_t timeout_ms, const std::atomic<bool>& cancelled) {
  if (name.empty()) throw Error(MLPT_INVALID_ARGUMENT, "barrier: the name is empty");
  Reply r = call(Op::kBarrier, name, "", timeout_ms, &cancelled,
                 "barrier '" + name + "': not all " + std::to_string(process_.world_size) + " processes arrived");
  if (r.status == kRefused) throw Error(MLPT_FAILED_PRECONDITION, "barrier '" + name + "': " + r.value);
}

void MpiRendezvous::keep_store() {
  struct Waiter {
    int rank, tag;
    bool operator==(const Waiter&) const = default;
  };
  std::map<std::string, std::string> values;
  std::multimap<std::string, Waiter> gets;
  std::map<std::string, std::vector<Waiter>> barriers;
  std::set<std::string> passed_barriers;
  int left = 0;
  std::optional<Clock::time_point> leave_deadline;
  auto reply = [&](const Waiter& w, char status, const std::string& value) {
    send_bytes(replies_, w.rank, w.tag, std::string(1, status) + value);
  };
  std::string bytes;
  MPI_Status status;
  Backoff backoff;
  for (;;) {
    if (leaving_.load()) {
      if (left == process_.world_size - 1) return;
      if (!leave_deadline) leave_deadline = Clock::now() + std::chrono::seconds(10);
      if (Clock::now() > *leave_deadline) return;  // a rank that never leaves (dead): stop anyway
    }
    try {
      if (!try_receive(requests_, MPI_ANY_SOURCE, kRequestTag, &bytes, &status)) {
        backoff.wait();
        continue;
      }
      backoff.reset();
      int32_t tag = 0;
      uint32_t key_size = 0;
      std::memcpy(&tag, &bytes[1], sizeof tag);
      std::memcpy(&key_size, &bytes[1 + sizeof tag], sizeof key_size);
      const size_t header = 1 + sizeof tag + sizeof key_size;
      const std::string key = bytes.substr(header, key_size), value = bytes.substr(header + key_size);
      const Waiter from{status.MPI_SOURCE, tag};
      switch (static_cast<Op>(bytes[0])) {
        case Op::kPut: {
          auto [it, inserted] = values.emplace(key, value);
          reply(from, inserted || it->second == value ? kOk : kExists, "");
          if (!inserted) break;
          auto [begin, end] = gets.equal_range(key);
          for (auto g = begin; g != end; ++g) reply(g->second, kOk, value);
          gets.erase(begin, end);
          break;
        }
        case Op::kGet:
          if (auto it = values.find(key); it != values.end()) reply(from, kOk, it->second);
          else gets.emplace(key, from);
          break;
        case Op::kBarrier: {
          if (passed_barriers.count(key)) {
            reply(from, kRefused, "this name was used by an earlier barrier (each name is used once)");
            break;
          }
          auto& arrived = barriers[key];
          arrived.push_back(from);
          if (static_cast<int>(arrived.size()) < process_.world_size) break;
          for (const auto& w : arrived) reply(w, kOk, "");
          barriers.erase(key);
          passed_barriers.insert(key);
          break;
        }
        case Op::kCancel:
          for (auto g = gets.begin(); g != gets.end(); ++g)
            if (g->second == from) {
              gets.erase(g);
              break;
            }
          for (auto& [name, arrived] : barriers) std::erase(arrived, from);
          reply(from, kCancelAck, "");
          break;
        case Op::kLeave:
          ++left;
          break;
      }
    } catch (const Error&) {
      // A reply that cannot be sent goes to a rank that is gone; the others still need the store.
    }
  }
}

}  // namespace mlpt::dist
