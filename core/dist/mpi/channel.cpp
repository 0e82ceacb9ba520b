#include "core/dist/mpi/channel.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <mlpt/sdk/mpi_status.hpp>

#include "core/error.hpp"

namespace mlpt::dist {
namespace {

constexpr int kMessageTag = 2;
constexpr int kNoticeTag = 3;

void check_mpi(int rc, const char* call) { sdk::check_mpi<Error>(rc, std::string("run messages: ") + call); }

}  // namespace

MpiChannel::MpiChannel() {
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

std::vector<uint8_t> MpiChannel::encode(const std::string& kind, const nlohmann::json& body) const {
  std::vector<uint8_t> bytes = nlohmann::json::to_cbor(nlohmann::json{{"kind", kind}, {"body", body}});
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    throw Error(MLPT_RESOURCE_EXHAUSTED, "run message '" + kind + "' of " + std::to_string(bytes.size()) +
                                             " bytes is over MPI's 2 GiB");
  return bytes;
}

void MpiChannel::send(int to, const std::string& kind, const nlohmann::json& body) {
  const std::vector<uint8_t> bytes = encode(kind, body);
  check_mpi(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to, kMessageTag, comm_),
            "MPI_Send");
}

bool MpiChannel::send(int to, const std::string& kind, const nlohmann::json& body,
                      const std::function<bool()>& abandon) {
  return send_tagged(kMessageTag, to, kind, body, abandon);
}

bool MpiChannel::send_notice(int to, const std::string& kind, const std::function<bool()>& abandon) {
  return send_tagged(kNoticeTag, to, kind, nlohmann::json::object(), abandon);
}

bool MpiChannel::send_tagged(int tag, int to, const std::string& kind, const nlohmann::json& body,
                             const std::function<bool()>& abandon) {
  std::vector<uint8_t> bytes = encode(kind, body);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to, tag, comm_, &request), "MPI_Isend");
  int delay_us = 20;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return true;
    if (abandon()) {
      // MPI may still read the bytes (a send cannot be taken back): they stay until the end.
      std::lock_guard l(abandoned_mutex_);
      abandoned_.emplace_back(request, std::move(bytes));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    delay_us = std::min(delay_us * 2, 1000);
  }
}

std::optional<RunMessage> MpiChannel::poll(int from) { return poll_tagged(kMessageTag, from); }

std::optional<RunMessage> MpiChannel::poll_notice(int from) { return poll_tagged(kNoticeTag, from); }

std::optional<RunMessage> MpiChannel::poll_tagged(int tag, int from) {
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  check_mpi(MPI_Improbe(from == kAnyRank ? MPI_ANY_SOURCE : from, tag, comm_, &flag, &message, &status), "MPI_Improbe");
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  check_mpi(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, &status), "MPI_Mrecv");
  auto j = nlohmann::json::from_cbor(bytes, true, false);
  if (j.is_discarded() || !j.contains("kind"))
    throw Error(MLPT_DATA_LOSS, "run message from rank " + std::to_string(status.MPI_SOURCE) + " is not readable");
  return RunMessage{status.MPI_SOURCE, j["kind"].get<std::string>(), std::move(j["body"])};
}

RunMessage MpiChannel::receive(int from, int64_t timeout_ms, const std::atomic<bool>& stop, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  int delay_us = 20;
  for (;;) {
    if (auto m = poll(from)) return std::move(*m);
    if (stop.load()) throw Error(MLPT_CANCELLED, what + ": cancelled");
    if (timeout_ms >= 0 && Clock::now() >= deadline)
      throw Error(MLPT_DEADLINE_EXCEEDED, what + ": no answer within " + std::to_string(timeout_ms / 1000) + " s");
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    delay_us = std::min(delay_us * 2, 2000);
  }
}

}  // namespace mlpt::dist
