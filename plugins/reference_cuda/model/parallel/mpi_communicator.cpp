#include "model/parallel/mpi_communicator.hpp"

#include <mpi.h>

#include <climits>
#include <algorithm>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/mpi_status.hpp"
#include "model/parallel/group_failure.hpp"

namespace mlpt::ref {

namespace {

MPI_Comm as_comm(void* c) { return static_cast<MPI_Comm>(c); }

void check_mpi(int rc, const char* what) { sdk::check_mpi<sdk::Error>(rc, std::string("model parallel: ") + what); }

// MPI counts and displacements are int: a larger exchange is refused rather than truncated.
std::vector<int> as_ints(const size_t* counts, int n, const char* what) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (counts[i] > static_cast<size_t>(INT_MAX))
      throw sdk::Error(MLPT_OUT_OF_RANGE, std::string("model parallel: ") + what + " of " + std::to_string(counts[i]) +
                                              " floats exceeds MPI's int count");
    out[static_cast<size_t>(i)] = static_cast<int>(counts[i]);
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts, const char* what) {
  std::vector<int> out(counts.size());
  long long at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (at > INT_MAX) throw sdk::Error(MLPT_OUT_OF_RANGE, std::string("model parallel: ") + what + " exceeds MPI's int displacement");
    out[i] = static_cast<int>(at);
    at += counts[i];
  }
  return out;
}

// Without `failure` the blocking call; with it the nonblocking one (`start` gives its request),
// waited for through `failure`.
template <class Blocking, class Start>
void collective(GroupFailure* failure, const char* what, Blocking&& blocking, Start&& start) {
  if (!failure) return check_mpi(blocking(), what);
  failure->check();  // a broken group starts nothing more
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(start(&request), what);
  failure->wait(&request, what);
}

}  // namespace

MpiCommunicator::MpiCommunicator(void* comm, GroupFailure* failure) : comm_(comm), failure_(failure) {
  MPI_Comm_set_errhandler(as_comm(comm_), MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_rank(as_comm(comm_), &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(as_comm(comm_), &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  MPI_Comm comm = as_comm(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm);
}

template <class T>
void sum_on_every_rank(void* comm, T* values, size_t count, GroupFailure* failure) {
  constexpr size_t kPiece = size_t{1} << 30;  // MPI counts are int
  const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
  int rank = 0;
  check_mpi(MPI_Comm_rank(as_comm(comm), &rank), "MPI_Comm_rank");
  for (size_t done = 0; done < count; done += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, count - done));
    T* piece = values + done;
    const void* send = rank == 0 ? MPI_IN_PLACE : piece;
    collective(
        failure, "MPI_Reduce", [&] { return MPI_Reduce(send, piece, n, type, MPI_SUM, 0, as_comm(comm)); },
        [&](MPI_Request* r) { return MPI_Ireduce(send, piece, n, type, MPI_SUM, 0, as_comm(comm), r); });
    collective(
        failure, "MPI_Bcast", [&] { return MPI_Bcast(piece, n, type, 0, as_comm(comm)); },
        [&](MPI_Request* r) { return MPI_Ibcast(piece, n, type, 0, as_comm(comm), r); });
  }
}

template void sum_on_every_rank<float>(void*, float*, size_t, GroupFailure*);
template void sum_on_every_rank<double>(void*, double*, size_t, GroupFailure*);

// The ranks of a tensor-parallel group route tokens from these sums and must agree to the bit.
void MpiCommunicator::all_reduce_sum(float* values, size_t count) { sum_on_every_rank(comm_, values, count, failure_); }

void MpiCommunicator::all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) {
  std::vector<int> sc = as_ints(send_counts, size_, "all-to-all send"), rc = as_ints(recv_counts, size_, "all-to-all receive");
  std::vector<int> sd = displacements(sc, "all-to-all send"), rd = displacements(rc, "all-to-all receive");
  collective(
      failure_, "MPI_Alltoallv",
      [&] { return MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, as_comm(comm_)); },
      [&](MPI_Request* r) {
        return MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, as_comm(comm_), r);
      });
}

void MpiCommunicator::all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) {
  std::vector<int> rc = as_ints(recv_counts, size_, "all-gather"), rd = displacements(rc, "all-gather");
  if (send_count != static_cast<size_t>(rc[static_cast<size_t>(rank_)]))
    throw sdk::Error(MLPT_INTERNAL, "model parallel: all-gather: rank " + std::to_string(rank_) + " sends " +
                                        std::to_string(send_count) + " floats, the counts say " + std::to_string(rc[static_cast<size_t>(rank_)]));
  const int mine = rc[static_cast<size_t>(rank_)];
  collective(
      failure_, "MPI_Allgatherv",
      [&] { return MPI_Allgatherv(send, mine, MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, as_comm(comm_)); },
      [&](MPI_Request* r) { return MPI_Iallgatherv(send, mine, MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, as_comm(comm_), r); });
}

// MPI_Reduce_scatter when the whole buffer fits MPI's int counts; a larger one (a fused expert
// tensor at 397B) as one MPI_Reduce per receiving rank, in pieces MPI can count.
void MpiCommunicator::reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) {
  size_t total = 0;
  for (int p = 0; p < size_; ++p) total += recv_counts[p];
  if (total <= static_cast<size_t>(INT_MAX)) {
    const std::vector<int> rc = as_ints(recv_counts, size_, "reduce-scatter");
    collective(
        failure_, "MPI_Reduce_scatter",
        [&] { return MPI_Reduce_scatter(send, recv, rc.data(), MPI_FLOAT, MPI_SUM, as_comm(comm_)); },
        [&](MPI_Request* r) {
          return MPI_Ireduce_scatter(send, recv, rc.data(), MPI_FLOAT, MPI_SUM, as_comm(comm_), r);
        });
    return;
  }
  constexpr size_t kPiece = size_t{1} << 30;
  size_t first = 0;
  for (int root = 0; root < size_; first += recv_counts[root], ++root)
    for (size_t done = 0; done < recv_counts[root]; done += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, recv_counts[root] - done));
      float* into = root == rank_ ? recv + done : nullptr;
      collective(
          failure_, "MPI_Reduce",
          [&] { return MPI_Reduce(send + first + done, into, n, MPI_FLOAT, MPI_SUM, root, as_comm(comm_)); },
          [&](MPI_Request* r) {
            return MPI_Ireduce(send + first + done, into, n, MPI_FLOAT, MPI_SUM, root, as_comm(comm_), r);
          });
    }
}

void MpiCommunicator::exchange_counts(const size_t* send_counts, size_t* recv_counts) {
  std::vector<unsigned long long> s(send_counts, send_counts + size_), r(static_cast<size_t>(size_));
  collective(
      failure_, "MPI_Alltoall",
      [&] { return MPI_Alltoall(s.data(), 1, MPI_UNSIGNED_LONG_LONG, r.data(), 1, MPI_UNSIGNED_LONG_LONG, as_comm(comm_)); },
      [&](MPI_Request* q) { return MPI_Ialltoall(s.data(), 1, MPI_UNSIGNED_LONG_LONG, r.data(), 1, MPI_UNSIGNED_LONG_LONG, as_comm(comm_), q); });
  for (int i = 0; i < size_; ++i) recv_counts[i] = static_cast<size_t>(r[static_cast<size_t>(i)]);
}

// Point-to-point messages may exceed MPI's int count: sent in pieces, which arrive in order.
constexpr size_t kMessagePiece = size_t{1} << 30;

void MpiCommunicator::send(const float* values, size_t count, int peer) {
  size_t done = 0;
  do {  // a message of no floats is still one message
    const int n = static_cast<int>(std::min(kMessagePiece, count - done));
    collective(
        failure_, "MPI_Send", [&] { return MPI_Send(values + done, n, MPI_FLOAT, peer, 0, as_comm(comm_)); },
        [&](MPI_Request* r) { return MPI_Isend(values + done, n, MPI_FLOAT, peer, 0, as_comm(comm_), r); });
    done += static_cast<size_t>(n);
  } while (done < count);
}

void MpiCommunicator::recv(float* values, size_t count, int peer) {
  size_t done = 0;
  do {
    const int n = static_cast<int>(std::min(kMessagePiece, count - done));
    collective(
        failure_, "MPI_Recv", [&] { return MPI_Recv(values + done, n, MPI_FLOAT, peer, 0, as_comm(comm_), MPI_STATUS_IGNORE); },
        [&](MPI_Request* r) { return MPI_Irecv(values + done, n, MPI_FLOAT, peer, 0, as_comm(comm_), r); });
    done += static_cast<size_t>(n);
  } while (done < count);
}

void MpiCommunicator::send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) {
  if (send_count > kMessagePiece || recv_count > kMessagePiece)
    throw sdk::Error(MLPT_OUT_OF_RANGE, "model parallel: send_recv of " + std::to_string(std::max(send_count, recv_count)) +
                                            " floats exceeds MPI's int count");
  const int ns = static_cast<int>(send_count), nr = static_cast<int>(recv_count);
  if (!failure_)
    return check_mpi(MPI_Sendrecv(send, ns, MPI_FLOAT, to, 0, recv, nr, MPI_FLOAT, from, 0, as_comm(comm_), MPI_STATUS_IGNORE),
                     "MPI_Sendrecv");
  failure_->check();
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  check_mpi(MPI_Irecv(recv, nr, MPI_FLOAT, from, 0, as_comm(comm_), &requests[1]), "MPI_Irecv");
  check_mpi(MPI_Isend(send, ns, MPI_FLOAT, to, 0, as_comm(comm_), &requests[0]), "MPI_Isend");
  failure_->wait(&requests[0], "MPI_Sendrecv (send)");
  failure_->wait(&requests[1], "MPI_Sendrecv (receive)");
}

MpiModelLayout::MpiModelLayout(int tp, int ep, int etp, int pp) {
  if (tp < 1 || ep < 1 || pp < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "--tp, --ep and --pp must be at least 1");
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
    finalize_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != tp * ep * pp) {
    if (finalize_) MPI_Finalize();
    finalize_ = false;
    const std::string stages = pp > 1 ? " × --pp " + std::to_string(pp) : "";
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "--tp " + std::to_string(tp) + " × --ep " + std::to_string(ep) + stages + " = " +
                                                std::to_string(tp * ep * pp) + " ranks, but the job has " +
                                                std::to_string(world_size) + " (start tp × ep" + (pp > 1 ? " × pp" : "") +
                                                " ranks: mpirun -np " + std::to_string(tp * ep * pp) + ")");
  }
  if (etp != 1 && etp != tp) {
    if (finalize_) MPI_Finalize();
    finalize_ = false;
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "--etp " + std::to_string(etp) + " is neither 1 (whole experts) nor --tp " +
                                                std::to_string(tp));
  }
  shard_ = ModelShard::of_model_rank(tp, ep, pp, world_rank, etp);
  const int stage = shard_.pp_rank;
  auto split = [&](int color, int key, const char* what) {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &out), what);
    return std::make_unique<MpiCommunicator>(out);
  };
  tensor_ = split(stage * ep + shard_.ep_rank, shard_.tp_rank, "MPI_Comm_split (tensor)");
  expert_ = split(stage * tp + shard_.tp_rank, shard_.ep_rank, "MPI_Comm_split (expert)");
  groups_.tensor = tensor_.get();
  groups_.expert = expert_.get();
  if (shard_.routed_rows_whole_on_tp_ranks()) {  // the routed experts over the whole stage
    routed_ = split(stage, shard_.world_rank(), "MPI_Comm_split (routed experts)");
    groups_.routed = routed_.get();
  }
  if (pp > 1) {
    pipeline_ = split(shard_.world_rank(), stage, "MPI_Comm_split (pipeline)");
    groups_.pipeline = pipeline_.get();
  }
}

MpiModelLayout::~MpiModelLayout() {
  tensor_.reset();
  expert_.reset();
  routed_.reset();
  pipeline_.reset();
  if (finalize_) MPI_Finalize();
}

bool MpiModelLayout::broadcast_line(std::string& line, bool have) const {
  unsigned long long n[2] = {have ? 1ull : 0ull, line.size()};
  check_mpi(MPI_Bcast(n, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (!n[0]) return false;
  line.resize(static_cast<size_t>(n[1]));
  if (n[1] > static_cast<unsigned long long>(INT_MAX)) throw sdk::Error(MLPT_OUT_OF_RANGE, "model parallel: an input line over 2 GiB");
  check_mpi(MPI_Bcast(line.data(), static_cast<int>(n[1]), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return true;
}

void MpiModelLayout::abort(int status) const {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

}  // namespace mlpt::ref
