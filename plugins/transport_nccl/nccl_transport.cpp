// The NCCL weight transport: ncclBroadcast of CUDA tensors from the sender (rank 0, the trainer) to
// every receiver rank (the engines), bucketed like the UCX transport (transport_wire/weight_layout.hpp): large
// tensors are broadcast straight from their own memory in place, small ones are packed into one of
// two staging buckets on a packing stream while the previous bucket is broadcast on the
// communication stream (double buffering, ordered by events).
//
// Bootstrap: the sender listens on a TCP socket at "address" (absent: on a port the system picks,
// published through the host's key-value store under transport.nccl/<group>/address, where the
// receivers read it; ABI 1.2); each receiver connects and says hello; once all "receivers" have, the sender sends each the ncclUniqueId, the rank count and its
// rank, and all ranks create the communicator (non-blocking, so the timeout holds). The same socket
// then carries each version's metadata (sender -> receivers) and acks (receivers -> sender).
//
// Rules: versions strictly increase; every receiver must connect before the first send (an NCCL
// communicator has a fixed size: there are no late joiners); a receiver that fails or misses the
// timeout aborts the communicator and is named, and further sends fail until the endpoints are
// recreated. The sender's tensors are read only during send(). Received tensors live in device
// memory owned by the transport until release.
#include <mlpt/sdk.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <mlpt/sdk/settings.hpp>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "tcp_channel.hpp"
#include "transport_wire/weight_layout.hpp"

namespace {

using mlpt::sdk::Error;
using namespace mlpt::transport;
using nccl::Clock;
using nccl::Frame;
using nccl::TcpChannel;

struct Config {
  std::string address;
  size_t receivers = 1;
  uint64_t bucket_bytes = 64ull << 20;
  int64_t timeout_ms = 60000;
  int device = 0;
  std::string name;
};

Config parse_config(std::string_view text, bool sender) {
  Config c;
  mlpt::sdk::Settings s(text, "transport nccl");
  c.address = s.string_or("address", c.address);  // empty: publish through the key-value store
  c.receivers = static_cast<size_t>(s.integer_or("receivers", static_cast<int64_t>(c.receivers), 1));
  c.bucket_bytes = static_cast<uint64_t>(s.integer_or("bucket_bytes", static_cast<int64_t>(c.bucket_bytes), 4096));
  c.timeout_ms = s.integer_or("timeout_ms", c.timeout_ms, 0);
  c.device = static_cast<int>(s.integer_or("device", c.device, 0, 1023));
  c.name = s.string_or("name", c.name);
  s.reject_unknown();
  if (!sender && c.name.empty()) c.name = "pid " + std::to_string(getpid());
  return c;
}

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(MLPT_INTERNAL, "nccl transport: " + what + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error(MLPT_UNAVAILABLE, "nccl transport: " + what + ": " + ncclGetErrorString(r));
}

// Waits for a non-blocking communicator operation; aborts it and throws at the deadline.
void wait_comm(ncclComm_t comm, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm, &state), what);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw Error(MLPT_UNAVAILABLE, "nccl transport: " + what + ": " + ncclGetErrorString(state));
    if (Clock::now() >= deadline) throw Error(MLPT_DEADLINE_EXCEEDED, "nccl transport: " + what + " timed out");
    std::this_thread::yield();
  }
}

// Waits for `stream` to drain; false at the deadline.
bool wait_stream(cudaStream_t stream, ncclComm_t comm, Clock::time_point deadline, std::string& error) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return error = cudaGetErrorString(e), false;
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      return error = ncclGetErrorString(state), false;
    if (Clock::now() >= deadline) return error = "timed out", false;
    std::this_thread::yield();
  }
}

Clock::time_point deadline_after(int64_t ms) {
  return ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(ms);
}

ncclComm_t init_comm(const ncclUniqueId& id, int nranks, int rank, Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank cannot hang us past the timeout
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), "creating the communicator");
  try {
    wait_comm(comm, deadline, "creating the communicator");
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
  return comm;
}

// ---------------------------------------------------------------------------------------------
class NcclSender {
 public:
  // Where receivers connect (the bound port when the config asked for port 0).
  std::string reachable_address() const { return listener_.reachable_address(); }

  explicit NcclSender(Config c) : config_(std::move(c)), listener_(config_.address) {
    cuda_check(cudaSetDevice(config_.device), "selecting device " + std::to_string(config_.device));
    cuda_check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "creating a stream");
    cuda_check(cudaStreamCreateWithFlags(&pack_stream_, cudaStreamNonBlocking), "creating a stream");
    for (int k = 0; k < 2; ++k) {
      cuda_check(cudaEventCreateWithFlags(&packed_[k], cudaEventDisableTiming), "creating an event");
      cuda_check(cudaEventCreateWithFlags(&freed_[k], cudaEventDisableTiming), "creating an event");
      cuda_check(cudaMalloc(&staging_[k], config_.bucket_bytes), "allocating a staging bucket");
    }
  }
  ~NcclSender() {
    std::string ignored;
    for (auto& p : peers_) p.channel.write(nccl::kBye, nullptr, 0, Clock::now() + std::chrono::milliseconds(200), ignored);
    if (comm_) broken_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    for (int k = 0; k < 2; ++k) {
      cudaFree(staging_[k]);
      cudaEventDestroy(packed_[k]);
      cudaEventDestroy(freed_[k]);
    }
    cudaStreamDestroy(comm_stream_);
    cudaStreamDestroy(pack_stream_);
  }

  void send(const mlpt_transport_send_args& args) {
    if (args.version <= last_version_)
      throw Error(MLPT_INVALID_ARGUMENT, "nccl: version " + std::to_string(args.version) + " is not greater than the previous send's " +
                                             std::to_string(last_version_) + " (versions must strictly increase)");
    if (broken_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: the communicator was aborted after " + broken_why_ + "; recreate the endpoints");
    for (size_t i = 0; i < args.num_tensors; ++i) {
      const auto& d = args.tensors[i].tensor.device;
      if (d.device_type != kDLCUDA || d.device_id != config_.device)
        throw Error(MLPT_INVALID_ARGUMENT, "nccl: tensor '" + mlpt::sdk::to_string(args.tensors[i].name) +
                                               "' is not in the memory of CUDA device " + std::to_string(config_.device));
    }
    cuda_check(cudaSetDevice(config_.device), "selecting the device");
    auto deadline = deadline_after(args.timeout_ms);
    Layout layout = plan_layout(args.tensors, args.num_tensors, args.version, config_.bucket_bytes, false, "nccl send");
    last_version_ = args.version;
    if (!comm_) bootstrap(deadline);
    auto meta = encode_metadata(layout);
    for (auto& p : peers_) {
      std::string error;
      if (!p.channel.write(nccl::kMeta, meta.data(), meta.size(), deadline, error)) abort_with(p, error);
    }
    broadcast(layout, args.tensors);
    std::string error;
    if (!wait_stream(comm_stream_, comm_, deadline, error)) abort_with_all("the broadcast of version " + std::to_string(args.version) + ": " + error);
    for (auto& p : peers_) {
      Frame f;
      uint64_t acked = 0;
      if (!p.channel.read(f, deadline, error)) abort_with(p, "no ack for version " + std::to_string(args.version) + ": " + error);
      if (f.type != nccl::kAck || f.payload.size() < 8) abort_with(p, "sent a malformed ack");
      std::memcpy(&acked, f.payload.data(), 8);
      if (acked != args.version) abort_with(p, "acked version " + std::to_string(acked));
    }
  }

 private:
  struct Peer {
    TcpChannel channel;
    std::string name;
  };

  void bootstrap(Clock::time_point deadline) {
    while (peers_.size() < config_.receivers) {
      TcpChannel c = listener_.accept(deadline);
      if (!c.valid())
        throw Error(MLPT_DEADLINE_EXCEEDED, "nccl: only " + std::to_string(peers_.size()) + " of " + std::to_string(config_.receivers) +
                                                " receivers connected to " + config_.address + " before the timeout");
      Frame hello;
      std::string error;
      if (!c.read(hello, deadline, error) || hello.type != nccl::kHello) continue;  // not one of ours
      peers_.push_back({std::move(c), std::string(hello.payload.begin(), hello.payload.end())});
    }
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "creating the unique id");
    int nranks = static_cast<int>(peers_.size()) + 1;
    for (size_t i = 0; i < peers_.size(); ++i) {
      std::vector<uint8_t> setup(sizeof(id) + 8);
      int rank = static_cast<int>(i) + 1;
      std::memcpy(setup.data(), &id, sizeof(id));
      std::memcpy(setup.data() + sizeof(id), &nranks, 4);
      std::memcpy(setup.data() + sizeof(id) + 4, &rank, 4);
      std::string error;
      if (!peers_[i].channel.write(nccl::kSetup, setup.data(), setup.size(), deadline, error))
        throw Error(MLPT_UNAVAILABLE, "nccl: receiver '" + peers_[i].name + "': " + error);
    }
    comm_ = init_comm(id, nranks, 0, deadline);
  }

  // Direct buckets go in place from the tensor; packed ones through staging[k], k alternating:
  // pack_stream fills k while comm_stream broadcasts the other, events keep the two in order.
  void broadcast(const Layout& layout, const mlpt_named_tensor* tensors) {
    int k = 0;
    for (const Bucket& b : layout.buckets) {
      if (b.direct_tensor >= 0) {
        auto* src = const_cast<uint8_t*>(direct_source(layout, b, tensors));
        nccl_check(ncclBroadcast(src, src, b.size, ncclUint8, 0, comm_, comm_stream_), "broadcast");
        continue;
      }
      uint8_t* stage = static_cast<uint8_t*>(staging_[k]);
      cuda_check(cudaStreamWaitEvent(pack_stream_, freed_[k], 0), "ordering the staging buffer");
      cuda_check(cudaMemsetAsync(stage, 0, b.size, pack_stream_), "clearing padding");
      for (uint32_t m = b.first_member; m < b.end_member; ++m) {
        const auto& t = tensors[m].tensor;
        cuda_check(cudaMemcpyAsync(stage + (layout.tensors[m].offset - b.offset), static_cast<const uint8_t*>(t.data) + t.byte_offset,
                                   layout.tensors[m].nbytes, cudaMemcpyDeviceToDevice, pack_stream_),
                   "packing a bucket");
      }
      cuda_check(cudaEventRecord(packed_[k], pack_stream_), "recording an event");
      cuda_check(cudaStreamWaitEvent(comm_stream_, packed_[k], 0), "ordering the broadcast");
      nccl_check(ncclBroadcast(stage, stage, b.size, ncclUint8, 0, comm_, comm_stream_), "broadcast");
      cuda_check(cudaEventRecord(freed_[k], comm_stream_), "recording an event");
      k ^= 1;
    }
  }

  [[noreturn]] void abort_with(const Peer& p, const std::string& why) {
    broken_ = true;
    broken_why_ = "receiver '" + p.name + "' failed";
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw Error(MLPT_UNAVAILABLE, "nccl: receiver '" + p.name + "': " + why);
  }
  [[noreturn]] void abort_with_all(const std::string& why) {
    broken_ = true;
    broken_why_ = why;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    std::string names;
    for (auto& p : peers_) names += (names.empty() ? "'" : ", '") + p.name + "'";
    throw Error(MLPT_DEADLINE_EXCEEDED, "nccl: " + why + " (receivers " + names + ")");
  }

  Config config_;
  nccl::TcpListener listener_;
  std::vector<Peer> peers_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr, pack_stream_ = nullptr;
  cudaEvent_t packed_[2] = {}, freed_[2] = {};
  void* staging_[2] = {};
  uint64_t last_version_ = 0;
  bool broken_ = false;
  std::string broken_why_;
};

// ---------------------------------------------------------------------------------------------
// One received version in device memory.
struct DeviceVersion {
  Layout layout;
  void* data = nullptr;
  size_t capacity = 0;
  std::vector<mlpt_named_tensor> tensors;
  ~DeviceVersion() {
    if (data) cudaFree(data);
  }
};

class NcclReceiver {
 public:
  explicit NcclReceiver(Config c) : config_(std::move(c)) {
    cuda_check(cudaSetDevice(config_.device), "selecting device " + std::to_string(config_.device));
    channel_ = TcpChannel::connect(config_.address, deadline_after(config_.timeout_ms));
    std::string error;
    if (!channel_.write(nccl::kHello, config_.name.data(), config_.name.size(), deadline_after(config_.timeout_ms), error))
      throw Error(MLPT_UNAVAILABLE, "nccl: saying hello to " + config_.address + ": " + error);
    thread_ = std::thread([this] { run(); });
  }
  ~NcclReceiver() {
    stop_ = true;
    thread_.join();
  }

  void receive(mlpt_transport_receive_args& args) {
    std::unique_lock lock(mutex_);
    if (held_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: receiver '" + config_.name + "' still holds version " +
                                                         std::to_string(held_->layout.version) + "; release it first");
    auto ready = [&] { return (newest_ && newest_->layout.version >= args.min_version) || !gone_.empty(); };
    if (args.timeout_ms < 0) cv_.wait(lock, ready);
    else cv_.wait_until(lock, deadline_after(args.timeout_ms), ready);
    if (newest_ && newest_->layout.version >= args.min_version) {
      held_ = newest_;
      args.out_version = held_->layout.version;
      args.out_tensors = held_->tensors.data();
      args.out_num_tensors = held_->tensors.size();
      return;
    }
    if (!gone_.empty()) throw Error(MLPT_UNAVAILABLE, "nccl: receiver '" + config_.name + "': " + gone_);
    throw Error(MLPT_DEADLINE_EXCEEDED, "nccl: receiver '" + config_.name + "': no version >= " + std::to_string(args.min_version) +
                                            " within " + std::to_string(args.timeout_ms) + " ms");
  }

  void release(uint64_t version) {
    std::lock_guard lock(mutex_);
    if (!held_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: release of version " + std::to_string(version) + " but nothing is held");
    if (held_->layout.version != version)
      throw Error(MLPT_INVALID_ARGUMENT, "nccl: release of version " + std::to_string(version) + " but version " +
                                             std::to_string(held_->layout.version) + " is held");
    held_.reset();
  }

 private:
  void run() {
    std::string why;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    try {
      cuda_check(cudaSetDevice(config_.device), "selecting the device");
      cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
      Frame f;
      while (!stop_ && why.empty()) {
        std::string error;
        if (!channel_.read(f, Clock::now() + std::chrono::milliseconds(100), error)) {
          if (error != "timed out") why = "the connection to the sender at " + config_.address + " was lost (" + error + ")";
          continue;
        }
        if (f.type == nccl::kBye) {
          why = "the sender at " + config_.address + " closed";
        } else if (f.type == nccl::kSetup && f.payload.size() == sizeof(ncclUniqueId) + 8) {
          ncclUniqueId id;
          int nranks = 0, rank = 0;
          std::memcpy(&id, f.payload.data(), sizeof(id));
          std::memcpy(&nranks, f.payload.data() + sizeof(id), 4);
          std::memcpy(&rank, f.payload.data() + sizeof(id) + 4, 4);
          comm = init_comm(id, nranks, rank, deadline_after(config_.timeout_ms));
        } else if (f.type == nccl::kMeta && comm) {
          land(decode_metadata(f.payload.data(), f.payload.size()), comm, stream);
        }
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (comm) why.empty() ? ncclCommDestroy(comm) : ncclCommAbort(comm);
    if (stream) cudaStreamDestroy(stream);
    std::lock_guard lock(mutex_);
    gone_ = why.empty() ? "the receiver was closed" : why;
    cv_.notify_all();
  }

  void land(Layout layout, ncclComm_t comm, cudaStream_t stream) {
    std::shared_ptr<DeviceVersion> v;
    {
      std::lock_guard lock(mutex_);
      if (spare_ && spare_->capacity >= layout.total_bytes) v = std::move(spare_);
      spare_.reset();
    }
    if (!v) {
      v = std::make_shared<DeviceVersion>();
      v->capacity = std::max<uint64_t>(layout.total_bytes, 1);
      cuda_check(cudaMalloc(&v->data, v->capacity), "allocating " + std::to_string(v->capacity) + " bytes for the weights");
    }
    v->layout = std::move(layout);
    auto* base = static_cast<uint8_t*>(v->data);
    for (const Bucket& b : v->layout.buckets)
      nccl_check(ncclBroadcast(base + b.offset, base + b.offset, b.size, ncclUint8, 0, comm, stream), "broadcast");
    std::string error;
    if (!wait_stream(stream, comm, deadline_after(config_.timeout_ms), error))
      throw Error(MLPT_UNAVAILABLE, "receiving version " + std::to_string(v->layout.version) + ": " + error);
    v->tensors.resize(v->layout.tensors.size());
    for (size_t i = 0; i < v->tensors.size(); ++i) {
      const auto& m = v->layout.tensors[i];
      auto& t = v->tensors[i];
      t = mlpt_named_tensor{};
      t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      t.name = mlpt::sdk::borrow(m.name);
      t.tensor.data = base + m.offset;
      t.tensor.device = {kDLCUDA, config_.device};
      t.tensor.ndim = static_cast<int32_t>(m.shape.size());
      t.tensor.dtype = m.dtype;
      t.tensor.shape = const_cast<int64_t*>(m.shape.data());
    }
    uint64_t version = v->layout.version;
    {
      std::lock_guard lock(mutex_);
      if (newest_ && newest_ != held_) spare_ = std::move(newest_);  // recycled for the next version
      newest_ = std::move(v);
      cv_.notify_all();
    }
    if (!channel_.write(nccl::kAck, &version, sizeof(version), deadline_after(config_.timeout_ms), error))
      throw Error(MLPT_UNAVAILABLE, "acknowledging version " + std::to_string(version) + ": " + error);
  }

  Config config_;
  TcpChannel channel_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<DeviceVersion> newest_, held_, spare_;
  std::string gone_;
};

class NcclTransport final : public mlpt::sdk::Transport {
 public:
  NcclTransport(std::string_view config_json, mlpt_transport_role role, std::string_view group) {
    Config c = parse_config(config_json, role == MLPT_TRANSPORT_SENDER);
    // Without an address the ranks meet through the host's key-value store (ABI 1.2).
    const bool rendezvous = c.address.empty();
    const std::string key = "transport.nccl/" + std::string(group) + "/address";
    if (rendezvous) mlpt::sdk::require_kv_store("nccl transport without \"address\"");
    if (role == MLPT_TRANSPORT_SENDER) {
      if (rendezvous) c.address = "0.0.0.0:0";
      sender_ = std::make_unique<NcclSender>(std::move(c));
      if (rendezvous) mlpt::sdk::kv_put("nccl", key, sender_->reachable_address());
    } else {
      if (rendezvous) c.address = mlpt::sdk::kv_get("nccl", key, c.timeout_ms);
      receiver_ = std::make_unique<NcclReceiver>(std::move(c));
    }
  }
  void send(const mlpt_transport_send_args& a) override {
    if (!sender_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: send on a receiver endpoint");
    sender_->send(a);
  }
  void receive(mlpt_transport_receive_args& a) override {
    if (!receiver_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: receive on a sender endpoint");
    receiver_->receive(a);
  }
  void release(uint64_t v) override {
    if (!receiver_) throw Error(MLPT_FAILED_PRECONDITION, "nccl: release on a sender endpoint");
    receiver_->release(v);
  }

 private:
  std::unique_ptr<NcclSender> sender_;
  std::unique_ptr<NcclReceiver> receiver_;
};

const mlpt_transport_capabilities kCapabilities = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE, /*zero_copy=*/0,
                                                   /*cross_process=*/1, /*cross_node=*/1, /*supports_cuda=*/1,
                                                   /*checksum=*/0};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-transport-nccl", "0.1.0",
                mlpt::sdk::transport_component<NcclTransport>(
                    "nccl", "ncclBroadcast of CUDA weights from the trainer rank to the engine ranks", &kCapabilities))
