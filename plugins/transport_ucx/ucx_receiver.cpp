#include "ucx_receiver.hpp"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <optional>

#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/types.hpp"
#include "receive_buffers.hpp"
#include "mlpt/sdk/wire/weight_layout.hpp"
#include "mlpt/sdk/xxhash64.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;
using mlpt::sdk::xxhash64;

// One complete version in a buffer of ours; what receive() hands out. The buffer goes back to the
// pool when the last reference (held, newest, or being filled) lets go.
struct UcxReceiver::Landed {
  std::shared_ptr<ReceiveBufferPool> pool;
  ReceiveBuffer buffer;
  Layout layout;
  std::vector<mlpt_named_tensor> tensors;

  Landed(std::shared_ptr<ReceiveBufferPool> p, Layout l) : pool(std::move(p)), layout(std::move(l)) {
    buffer = pool->take(layout.total_bytes);
    tensors.resize(layout.tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& m = layout.tensors[i];
      auto& t = tensors[i];
      t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      t.name = mlpt::sdk::borrow(m.name);
      t.tensor.data = buffer.data + m.offset;
      t.tensor.device = DLDevice{kDLCPU, 0};
      t.tensor.ndim = static_cast<int32_t>(m.shape.size());
      t.tensor.dtype = m.dtype;
      t.tensor.shape = const_cast<int64_t*>(m.shape.data());
      t.tensor.strides = nullptr;
      t.tensor.byte_offset = 0;
    }
  }
  ~Landed() { pool->give_back(buffer); }
  uint64_t version() const { return layout.version; }
};

namespace {

// A version being landed: one tag receive per bucket straight into its place in the buffer.
struct Incoming {
  std::shared_ptr<UcxReceiver::Landed> landed;
  std::vector<void*> requests;  // NULL once complete
  size_t outstanding = 0;
  size_t done = 0;
  std::vector<uint64_t> hashes;
  bool committed = false;
  bool sender_checksums = false;
  std::vector<uint64_t> checksums;
};

struct Loss {
  uint64_t version;
  std::string message;
};

}  // namespace

class UcxReceiver::Engine {
 public:
  Engine(const Config& config, ucp_context_h context) : config_(config), context_(context) {}

  // ---- shared with the API thread (under mutex) ----
  std::mutex mutex;
  std::condition_variable cv;
  bool init_done = false;
  std::string init_error;
  std::shared_ptr<Landed> newest, held;
  std::optional<Loss> loss;
  std::string gone;            // non-empty: the sender went away (or refused us) and why
  bool connected = false;      // the sender welcomed us
  std::atomic<bool> stop{false};

  void run() {
    try {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;
      check(ucp_worker_create(context_, &wp, &worker_), "ucx receiver: creating the worker");
      addr_ = resolve(config_.address, &addr_len_);
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex);
      init_error = e.what();
      init_done = true;
      cv.notify_all();
      if (worker_) ucp_worker_destroy(worker_);
      return;
    }
    {
      std::lock_guard lock(mutex);
      init_done = true;
      cv.notify_all();
    }
    connect_deadline_ = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
    connect();
    unsigned idle = 0;
    while (!stop.load(std::memory_order_acquire)) {
      unsigned progressed = ucp_worker_progress(worker_);
      handle_ep_errors();
      while (poll_control()) {
      }
      handle_landed();
      try_complete();
      reap();
      if (!ep_ && !finished_ && Clock::now() >= retry_at_) connect();
      if (progressed || incoming_ || !draining_.empty()) {
        idle = 0;
      } else if (++idle > 256) {
        usleep(100);  // between steps: poll gently
      }
    }
    shutdown();
  }

 private:
  // ---- connection ----
  struct ErrArg {
    Engine* engine;
    uint64_t generation;
  };

  void connect() {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr_);
    ep.sockaddr.addrlen = addr_len_;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    err_args_.push_back(std::make_unique<ErrArg>(ErrArg{this, ++generation_}));
    ep.err_handler.cb = &Engine::on_ep_error;
    ep.err_handler.arg = err_args_.back().get();
    ucs_status_t s = ucp_ep_create(worker_, &ep, &ep_);
    if (s != UCS_OK) {
      ep_ = nullptr;
      connect_failed(s);
    }
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<ErrArg*>(arg);
    if (a->generation == a->engine->generation_) a->engine->ep_error_ = status;
  }

  void handle_ep_errors() {
    if (ep_error_ == UCS_OK) return;
    ucs_status_t s = ep_error_;
    ep_error_ = UCS_OK;
    close_ep();
    bool was_connected;
    {
      std::lock_guard lock(mutex);
      was_connected = connected;
    }
    if (was_connected) {
      declare_gone("the connection to the sender at " + config_.address + " was lost (" + status_text(s) + ")");
    } else {
      connect_failed(s);
    }
  }

  void connect_failed(ucs_status_t s) {
    if (Clock::now() < connect_deadline_) {
      retry_at_ = Clock::now() + std::chrono::milliseconds(100);  // the sender may not listen yet
      return;
    }
    declare_gone("no sender reachable at " + config_.address + " within " + std::to_string(config_.timeout_ms) +
                 " ms (" + status_text(s) + ")");
  }

  void declare_gone(const std::string& why) {
    finished_ = true;
    drain();
    close_ep();
    std::lock_guard lock(mutex);
    if (gone.empty()) gone = why;
    cv.notify_all();
  }

  void flush_ep(std::chrono::milliseconds bound) {
    if (!ep_) return;
    ucp_request_param_t rp{};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(ep_, &rp);
    if (!r || UCS_PTR_IS_ERR(r)) return;
    auto until = Clock::now() + bound;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until) ucp_worker_progress(worker_);
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until + bound) ucp_worker_progress(worker_);
    ucp_request_free(r);
  }

  void close_ep() {
    if (!ep_) return;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &rp);
    if (r && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
    ep_ = nullptr;
    ++generation_;  // errors of the closed endpoint no longer count
  }

  void shutdown() {
    drain();
    flush_ep(std::chrono::milliseconds(1000));  // the last ack must reach the sender before we cut the line
    close_ep();
    auto until = Clock::now() + std::chrono::milliseconds(2000);
    while ((!draining_.empty() || !closing_.empty()) && Clock::now() < until) {
      ucp_worker_progress(worker_);
      landed_.clear();
      reap();
    }
    if (!draining_.empty())
      mlpt::sdk::log(MLPT_LOG_WARNING, "transport.ucx", "receiver: receives still pending at shutdown; leaking their buffers");
    for (auto& d : draining_) (void)d.release();  // a late write must not land in freed memory
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }

  // ---- sender messages ----
  bool poll_control() {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, kControlBit, kControlBit, 1, &info);
    if (!msg) return false;
    std::vector<uint8_t> payload(info.length);
    struct Wait {
      bool done = false;
      ucs_status_t status = UCS_OK;
    } wait;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    rp.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
      auto* w = static_cast<Wait*>(user_data);
      w->done = true;
      w->status = status;
      ucp_request_free(request);
    };
    rp.user_data = &wait;
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, payload.data(), payload.size(), msg, &rp);
    if (UCS_PTR_IS_ERR(r)) {
      wait.done = true;
      wait.status = UCS_PTR_STATUS(r);
    } else if (r == nullptr) {
      wait.done = true;
    }
    auto until = Clock::now() + std::chrono::seconds(30);
    while (!wait.done && Clock::now() < until) ucp_worker_progress(worker_);
    if (!wait.done) {
      declare_gone("a control message from the sender never completed");  // the request stays owned by UCX
      return false;
    }
    if (wait.status != UCS_OK) return true;  // the sender died mid-message: its endpoint error follows
    on_control(tag_kind(info.sender_tag), payload);
    return true;
  }

  void on_control(Kind kind, const std::vector<uint8_t>& payload) {
    const uint8_t* at = payload.data();
    const uint8_t* end = at + payload.size();
    switch (kind) {
      case Kind::kWelcome: {
        if (!get(at, end, peer_id_)) return;
        {
          std::lock_guard lock(mutex);
          connected = true;
          cv.notify_all();
        }
        std::vector<uint8_t> hello;
        put<uint32_t>(hello, kAmHello);
        put<uint64_t>(hello, peer_id_);
        hello.insert(hello.end(), config_.name.begin(), config_.name.end());
        send_am(kAmHello, std::move(hello));
        return;
      }
      case Kind::kReject:
        declare_gone("the sender at " + config_.address + " refused this receiver: " + std::string(payload.begin(), payload.end()));
        return;
      case Kind::kBye:
        declare_gone("the sender at " + config_.address + " closed");
        return;
      case Kind::kMeta:
        begin(payload);
        return;
      case Kind::kAbort: {
        uint64_t v = 0;
        if (get(at, end, v) && incoming_ && incoming_->landed->version() == v) drain();
        return;
      }
      case Kind::kCommit: {
        uint64_t v = 0;
        uint32_t n = 0;
        uint8_t has = 0;
        if (!get(at, end, v) || !get(at, end, n) || !get(at, end, has)) return;
        if (!incoming_ || incoming_->landed->version() != v || n != incoming_->landed->layout.buckets.size()) return;
        incoming_->sender_checksums = has != 0;
        if (has) {
          incoming_->checksums.resize(n);
          for (auto& c : incoming_->checksums)
            if (!get(at, end, c)) return;
        }
        incoming_->committed = true;
        return;
      }
      default:
        return;
    }
  }

  void begin(const std::vector<uint8_t>& meta) {
    Layout layout;
    try {
      layout = decode_metadata(meta.data(), meta.size());
    } catch (const std::exception& e) {
      record_loss(0, std::string("malformed weight metadata from the sender: ") + e.what());
      return;
    }
    drain();  // an older version still landing is superseded
    auto in = std::make_unique<Incoming>();
    in->landed = std::make_shared<Landed>(pool_, std::move(layout));
    const Layout& l = in->landed->layout;
    size_t n = l.buckets.size();
    in->requests.assign(n, nullptr);
    in->hashes.assign(n, 0);
    incoming_ = std::move(in);
    for (size_t i = 0; i < n; ++i) {
      auto* op = new RecvOp{this, incoming_.get(), static_cast<uint32_t>(i)};
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
      rp.datatype = ucp_dt_make_contig(1);
      rp.cb.recv = &Engine::on_recv;
      rp.user_data = op;
      ++incoming_->outstanding;
      ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, incoming_->landed->buffer.data + l.buckets[i].offset, l.buckets[i].size,
                                            make_tag(Kind::kData, l.version, static_cast<uint32_t>(i)), kFullMask, &rp);
      if (r == nullptr) {
        recv_done(op, UCS_OK, l.buckets[i].size);
      } else if (UCS_PTR_IS_ERR(r)) {
        recv_done(op, UCS_PTR_STATUS(r), 0);
      } else {
        incoming_->requests[i] = r;
      }
    }
  }

  struct RecvOp {
    Engine* engine;
    Incoming* incoming;
    uint32_t bucket;
  };
  struct LandedBucket {
    Incoming* incoming;
    uint32_t bucket;
    ucs_status_t status;
    size_t length;
  };

  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    auto* op = static_cast<RecvOp*>(user_data);
    op->incoming->requests[op->bucket] = nullptr;
    op->engine->recv_done(op, status, info ? info->length : 0);
    ucp_request_free(request);
  }

  void recv_done(RecvOp* op, ucs_status_t status, size_t length) {
    --op->incoming->outstanding;
    landed_.push_back({op->incoming, op->bucket, status, length});
    delete op;
  }

  void handle_landed() {
    auto batch = std::move(landed_);
    landed_.clear();
    for (auto& b : batch) {
      if (!incoming_ || b.incoming != incoming_.get()) continue;  // superseded or drained
      Incoming& in = *incoming_;
      const Layout& l = in.landed->layout;
      const Bucket& bucket = l.buckets[b.bucket];
      if (b.status != UCS_OK || b.length != bucket.size) {
        std::string why = b.status != UCS_OK ? status_text(b.status)
                                             : "got " + std::to_string(b.length) + " of " + std::to_string(bucket.size) + " bytes";
        fail_version("bucket " + std::to_string(b.bucket) + " of version " + std::to_string(l.version) + " (" +
                     bucket_contents(l, b.bucket) + ") did not arrive: " + why);
        continue;
      }
      uint8_t* data = in.landed->buffer.data + bucket.offset;
      if (config_.test_only_corrupt_bucket == static_cast<int64_t>(b.bucket)) data[bucket.size / 2] ^= 0x5A;
      if (l.checksums && config_.verify_checksum) in.hashes[b.bucket] = xxhash64(data, bucket.size);
      ++in.done;
      if (config_.test_only_exit_after_buckets >= 0 && ++total_landed_ >= config_.test_only_exit_after_buckets) {
        std::fprintf(stderr, "ucx receiver '%s': test_only_exit_after_buckets reached, exiting\n", config_.name.c_str());
        _exit(77);
      }
    }
  }

  void try_complete() {
    if (!incoming_ || !incoming_->committed || incoming_->done != incoming_->landed->layout.buckets.size()) return;
    Incoming& in = *incoming_;
    const Layout& l = in.landed->layout;
    if (l.checksums && in.sender_checksums && config_.verify_checksum) {
      for (size_t i = 0; i < l.buckets.size(); ++i) {
        if (in.hashes[i] == in.checksums[i]) continue;
        char detail[128];
        std::snprintf(detail, sizeof(detail), "received xxhash64 %016" PRIx64 ", sender's %016" PRIx64, in.hashes[i], in.checksums[i]);
        fail_version("checksum mismatch in bucket " + std::to_string(i) + " of version " + std::to_string(l.version) + " (bytes " +
                     std::to_string(l.buckets[i].offset) + ".." + std::to_string(l.buckets[i].offset + l.buckets[i].size) + ", " +
                     bucket_contents(l, i) + "): " + detail);
        return;
      }
    }
    auto done = std::move(incoming_->landed);
    incoming_.reset();
    uint64_t v = done->version();
    {
      std::lock_guard lock(mutex);
      newest = std::move(done);
      if (loss && loss->version <= v) loss.reset();
      cv.notify_all();
    }
    ack(v, MLPT_OK, "");
  }

  void fail_version(const std::string& why) {
    uint64_t v = incoming_->landed->version();
    record_loss(v, why);
    ack(v, MLPT_DATA_LOSS, why);
    drain();
  }

  void record_loss(uint64_t v, const std::string& why) {
    mlpt::sdk::log(MLPT_LOG_ERROR, "transport.ucx", "receiver '" + config_.name + "': " + why);
    std::lock_guard lock(mutex);
    loss = Loss{v, why};
    cv.notify_all();
  }

  void ack(uint64_t version, mlpt_error_code code, const std::string& text) {
    std::vector<uint8_t> payload;
    put<uint32_t>(payload, kAmAck);
    put<uint64_t>(payload, peer_id_);
    put<uint64_t>(payload, version);
    put<uint32_t>(payload, static_cast<uint32_t>(code));
    payload.insert(payload.end(), text.begin(), text.end());
    send_am(kAmAck, std::move(payload));
  }

  void send_am(unsigned id, std::vector<uint8_t> payload) {
    if (!ep_) return;
    auto* owned = new std::vector<uint8_t>(std::move(payload));
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
      delete static_cast<std::vector<uint8_t>*>(user_data);
      ucp_request_free(request);
    };
    rp.user_data = owned;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep_, id, nullptr, 0, owned->data(), owned->size(), &rp);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) delete owned;
  }

  // Cancels the version being landed; its buffer returns once UCX is done with every receive.
  void drain() {
    if (!incoming_) return;
    for (void* r : incoming_->requests)
      if (r) ucp_request_cancel(worker_, r);
    draining_.push_back(std::move(incoming_));
  }

  void reap() {
    for (auto it = draining_.begin(); it != draining_.end();)
      it = (*it)->outstanding == 0 ? draining_.erase(it) : std::next(it);
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = closing_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const Config& config_;
  ucp_context_h context_;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<ErrArg>> err_args_;
  ucs_status_t ep_error_ = UCS_OK;
  bool finished_ = false;  // gone for good: no more connection attempts
  Clock::time_point connect_deadline_, retry_at_;
  uint64_t peer_id_ = 0;
  std::shared_ptr<ReceiveBufferPool> pool_ = std::make_shared<ReceiveBufferPool>();
  std::unique_ptr<Incoming> incoming_;
  std::vector<std::unique_ptr<Incoming>> draining_;
  std::vector<LandedBucket> landed_;
  std::vector<void*> closing_;
  int64_t total_landed_ = 0;
};

UcxReceiver::UcxReceiver(Config config) : config_(std::move(config)) {
  context_ = make_context("ucx receiver");
  engine_ = std::make_unique<Engine>(config_, context_);
  thread_ = start_progress_thread(*engine_, context_);
}

UcxReceiver::~UcxReceiver() { stop_progress_thread(engine_, thread_, context_); }

void UcxReceiver::receive(mlpt_transport_receive_args& args) {
  Engine& e = *engine_;
  std::unique_lock lock(e.mutex);
  if (e.held)
    throw Error(MLPT_FAILED_PRECONDITION, "ucx: receiver '" + config_.name + "' still holds version " +
                                              std::to_string(e.held->version()) + "; release it before receiving again");
  auto have = [&] { return e.newest && e.newest->version() >= args.min_version; };
  auto lost = [&] { return e.loss && e.loss->version >= args.min_version && (!e.newest || e.loss->version > e.newest->version()); };
  auto ready = [&] { return have() || lost() || !e.gone.empty(); };
  bool ok = true;
  if (args.timeout_ms < 0) {
    e.cv.wait(lock, ready);
  } else {
    ok = e.cv.wait_until(lock, Clock::now() + std::chrono::milliseconds(args.timeout_ms), ready);
  }
  if (lost()) {
    std::string why = e.loss->message;
    e.loss.reset();
    throw Error(MLPT_DATA_LOSS, "ucx: receiver '" + config_.name + "': " + why);
  }
  if (have()) {
    e.held = e.newest;
    args.out_version = e.held->version();
    args.out_tensors = e.held->tensors.data();
    args.out_num_tensors = e.held->tensors.size();
    return;
  }
  if (!e.gone.empty())
    throw Error(MLPT_UNAVAILABLE, "ucx: receiver '" + config_.name + "': " + e.gone + "; no version >= " +
                                      std::to_string(args.min_version) + " (newest here: " +
                                      (e.newest ? std::to_string(e.newest->version()) : std::string("none")) + ")");
  (void)ok;
  throw Error(MLPT_DEADLINE_EXCEEDED, "ucx: receiver '" + config_.name + "': no version >= " + std::to_string(args.min_version) +
                                          " from " + config_.address + " within " + std::to_string(args.timeout_ms) +
                                          " ms (newest here: " + (e.newest ? std::to_string(e.newest->version()) : std::string("none")) +
                                          (e.connected ? "" : "; not connected yet") + ")");
}

void UcxReceiver::release(uint64_t version) {
  std::lock_guard lock(engine_->mutex);
  if (!engine_->held)
    throw Error(MLPT_FAILED_PRECONDITION, "ucx: release of version " + std::to_string(version) + " but receiver '" +
                                              config_.name + "' holds nothing");
  if (engine_->held->version() != version)
    throw Error(MLPT_INVALID_ARGUMENT, "ucx: release of version " + std::to_string(version) + " but receiver '" + config_.name +
                                           "' holds version " + std::to_string(engine_->held->version()));
  engine_->held.reset();
}

}  // namespace mlpt::transport::ucx
