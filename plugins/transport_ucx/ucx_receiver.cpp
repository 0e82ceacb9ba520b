#include "ucx_receiver.hpp"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/types.hpp"
#include "bucket_hasher.hpp"
#include "landing_plan.hpp"
#include "receive_buffers.hpp"
#include "transport_wire/weight_layout.hpp"
#include "shard_pulls.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;

// Where a part's buckets land: pieces pulled in a layout go to the version's buffer in that layout
// where they are contiguous there (landing_plan.hpp), the rest to the part's own buffer.
struct PartPlacement {
  std::shared_ptr<LayoutBuffer> into;  // NULL: the part is not pulled in a layout
  std::vector<PiecePlace> places;      // per piece: its place in `into` (at -1: copied over once landed)
  std::vector<int64_t> bucket_at;      // per bucket: its byte in `into` (-1: in the part's buffer)
  std::string refused;                 // not the pieces pulled: why
};

// One sender rank's complete part of a version in a buffer of ours, which holds the part's stream
// less the buckets received straight into the layout (`into`). The buffer goes back to the pool when
// the last reference (held, newest, or being filled) lets go.
struct UcxReceiver::Landed {
  std::shared_ptr<ReceiveBufferPool> pool;
  ReceiveBuffer buffer;
  Layout layout;
  std::vector<mlpt_named_tensor> tensors;
  // Pieces pulled in a layout: the version's buffer in that layout, and each piece's place there.
  std::shared_ptr<LayoutBuffer> into;
  std::vector<PiecePlace> places;
  // The stream's ranges left out of `buffer` (buckets landed in `into`), ascending, and before each
  // how many bytes were left out.
  std::vector<uint64_t> skip_start, skipped_before;

  Landed(std::shared_ptr<ReceiveBufferPool> p, Layout l, const PartPlacement& placement)
      : pool(std::move(p)), layout(std::move(l)), into(placement.into), places(placement.places) {
    uint64_t skipped = 0;
    for (size_t i = 0; i < placement.bucket_at.size(); ++i) {
      if (placement.bucket_at[i] < 0) continue;
      skip_start.push_back(layout.buckets[i].offset);
      skipped_before.push_back(skipped);
      skipped += layout.buckets[i].size;
    }
    skipped_before.push_back(skipped);
    buffer = pool->take(layout.total_bytes - skipped);
    tensors.resize(layout.tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& m = layout.tensors[i];
      auto& t = tensors[i];
      t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      t.name = mlpt::sdk::borrow(m.name);
      const bool in_place = i < places.size() && places[i].at >= 0;  // its bytes are in `into`, not here
      t.tensor.data = in_place ? nullptr : at(m.offset);
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
  // Where byte `offset` of the stream is in `buffer` (one not left out).
  uint8_t* at(uint64_t offset) {
    const size_t k = static_cast<size_t>(std::upper_bound(skip_start.begin(), skip_start.end(), offset) - skip_start.begin());
    return buffer.data + (offset - skipped_before[k]);
  }
};

// One version from every sender rank, as receive() hands it out: the ranks' tensors in rank order
// and, when they are boxes of global tensors, which (the SDK then cuts the wanted layout).
struct UcxReceiver::Assembled {
  uint64_t version = 0;
  uint64_t request = 0;  // the pulls the parts answer (0: each rank's tensors as they are)
  std::vector<std::shared_ptr<Landed>> parts;
  std::vector<mlpt_named_tensor> tensors;
  std::vector<mlpt_tensor_shard> shards;  // empty: whole tensors

  std::shared_ptr<LayoutBuffer> into;  // the pulled layout the parts landed in (NULL: the parts as they are)
  uint64_t bytes_in_place = 0, bytes_copied_in = 0;  // how they landed there

  // The parts landed in a layout: its tensors and shard descriptors as they are.
  explicit Assembled(std::shared_ptr<LayoutBuffer> buffer) : into(std::move(buffer)) {
    version = into->version;
    request = into->plan->request();
    tensors = into->tensors;
    shards = into->shards;
    bytes_in_place = into->bytes_in_place;
    bytes_copied_in = into->bytes_copied_in;
  }

  explicit Assembled(std::vector<std::shared_ptr<Landed>> p) : parts(std::move(p)) {
    version = parts.front()->version();
    bool boxed = parts.size() > 1;
    for (const auto& part : parts) {
      request = std::max(request, part->layout.request);
      for (const auto& m : part->layout.tensors) boxed = boxed || !m.global_shape.empty();
    }
    for (const auto& part : parts) {
      for (size_t i = 0; i < part->tensors.size(); ++i) {
        tensors.push_back(part->tensors[i]);
        const TensorMeta& m = part->layout.tensors[i];
        if (!boxed) continue;
        shards.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, m.global_shape.empty() ? m.shape.data() : m.global_shape.data(),
                                           m.global_shape.empty() ? nullptr : m.box_offset.data()});
      }
    }
  }
};

namespace {

// A version being landed: one tag receive per bucket straight into its place in the buffer.
struct Incoming {
  std::shared_ptr<UcxReceiver::Landed> landed;
  uint32_t stream = 0;  // the sender's number for this stream (ucx_common.hpp, Wire vocabulary)
  std::vector<uint8_t*> targets;  // where each bucket is received
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

// One sender rank as this receiver sees it: its connection and the part of a version it lands.
struct Link {
  uint32_t rank = 0;
  std::string address;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  ucp_ep_h ep = nullptr;
  uint64_t generation = 0;
  ucs_status_t ep_error = UCS_OK;
  uint64_t peer_id = 0;
  bool welcomed = false;
  bool closed = false;  // it left: no reconnecting
  Clock::time_point retry_at;
  std::unique_ptr<Incoming> incoming;
  std::shared_ptr<UcxReceiver::Landed> complete;  // its newest part that landed whole
  std::deque<uint32_t> superseded;                // its newest streams left before they landed

  std::string label() const { return "sender rank " + std::to_string(rank) + " at " + address; }
};

// A message for a sender rank, queued by the API thread; sent once the rank welcomed us.
struct Outgoing {
  size_t link;
  unsigned id;
  std::vector<uint8_t> body;
};

class UcxReceiver::Engine {
 public:
  Engine(const Config& config, ucp_context_h context, const std::vector<std::string>& addresses)
      : config_(config),
        context_(context),
        links_(addresses.size()),
        // Per version in flight: a part buffer per rank and the layout it is landed in.
        pool_(std::make_shared<ReceiveBufferPool>(2 * (addresses.size() + 1))) {
    for (size_t r = 0; r < addresses.size(); ++r) links_[r].rank = static_cast<uint32_t>(r), links_[r].address = addresses[r];
    offers.resize(addresses.size());
  }

  // ---- shared with the API thread (under mutex) ----
  std::mutex mutex;
  std::condition_variable cv;
  bool init_done = false;
  std::string init_error;
  std::shared_ptr<Assembled> newest, held;
  std::optional<Loss> loss;
  std::string gone;            // non-empty: a sender rank went away (or refused us) and why
  // Versions up to this one may still complete from the parts the ranks still send (a rank that
  // left after its part of v landed does not stop v); hopeless: none will.
  uint64_t gone_after = UINT64_MAX;
  bool hopeless = false;
  size_t connected = 0;        // sender ranks that welcomed us
  std::vector<std::optional<std::vector<OfferedTensor>>> offers;  // each rank's shard boxes, once asked
  std::vector<Outgoing> outbox;
  uint64_t accepted_request = 0;  // parts answering other pulls (but 0) are not assembled
  std::shared_ptr<const LandingPlan> landing;  // where parts answering accepted_request land
  std::atomic<bool> stop{false};

  void run() {
    try {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;
      check(ucp_worker_create(context_, &wp, &worker_), "ucx receiver: creating the worker");
      // Sent in the hello: a sender on this machine reaches the worker through it (shared memory).
      ucp_address_t* address = nullptr;
      size_t address_length = 0;
      check(ucp_worker_get_address(worker_, &address, &address_length),
            "ucx receiver: querying the worker address");
      const auto* bytes = reinterpret_cast<const char*>(address);
      worker_address_.assign(bytes, bytes + address_length);
      ucp_worker_release_address(worker_, address);
      for (auto& l : links_) l.addr = resolve(l.address, &l.addr_len);
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
    for (auto& l : links_) connect(l);
    unsigned idle = 0;
    while (!stop.load(std::memory_order_acquire)) {
      unsigned progressed = ucp_worker_progress(worker_);
      handle_ep_errors();
      while (poll_control()) {
      }
      discard_superseded();
      handle_landed();
      handle_hashed();
      for (auto& l : links_) try_complete(l);
      send_outbox();
      reap();
      bool landing = false;
      for (auto& l : links_) {
        if (!l.ep && !l.closed && !finished_ && Clock::now() >= l.retry_at) connect(l);
        landing = landing || l.incoming;
      }
      idle = progressed ? 0 : idle + 1;
      if (landing || !draining_.empty()) {
        // Waiting on the sender: give the core up between polls, so that the hasher (and, on
        // this machine, the sender) run meanwhile.
        if (idle > 64) std::this_thread::yield();
      } else if (idle > 256) {
        usleep(100);  // between steps: poll gently
      }
    }
    shutdown();
  }

 private:
  // ---- connection ----
  struct ErrArg {
    Engine* engine;
    size_t link;
    uint64_t generation;
  };

  void connect(Link& l) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&l.addr);
    ep.sockaddr.addrlen = l.addr_len;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    err_args_.push_back(std::make_unique<ErrArg>(ErrArg{this, l.rank, ++l.generation}));
    ep.err_handler.cb = &Engine::on_ep_error;
    ep.err_handler.arg = err_args_.back().get();
    ucs_status_t s = ucp_ep_create(worker_, &ep, &l.ep);
    if (s != UCS_OK) {
      l.ep = nullptr;
      connect_failed(l, s);
    }
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<ErrArg*>(arg);
    Link& l = a->engine->links_[a->link];
    if (a->generation == l.generation) l.ep_error = status;
  }

  void handle_ep_errors() {
    for (auto& l : links_) {
      if (l.ep_error == UCS_OK) continue;
      ucs_status_t s = l.ep_error;
      l.ep_error = UCS_OK;
      close_ep(l);
      if (l.welcomed) {
        link_closed(l, "the connection to " + l.label() + " was lost (" + status_text(s) + ")");
      } else {
        connect_failed(l, s);
      }
    }
  }

  void connect_failed(Link& l, ucs_status_t s) {
    if (Clock::now() < connect_deadline_) {
      l.retry_at = Clock::now() + std::chrono::milliseconds(100);  // the sender may not listen yet
      return;
    }
    declare_gone((links_.size() > 1 ? "no sender rank " + std::to_string(l.rank) + " reachable at " : "no sender reachable at ") +
                 l.address + " within " + std::to_string(config_.timeout_ms) + " ms (" + status_text(s) + ")");
  }

  // No version completes any more: the sender is gone.
  void declare_gone(const std::string& why) {
    finished_ = true;
    for (auto& l : links_) {
      drain(l);
      close_ep(l);
    }
    std::lock_guard lock(mutex);
    if (gone.empty()) gone = why;
    hopeless = true;
    cv.notify_all();
  }

  // A rank left (said goodbye, or its connection broke). Without it no newer version completes, but
  // the version whose part from it landed may still complete from the other ranks' parts.
  void link_closed(Link& l, const std::string& why) {
    l.closed = true;
    drain(l);
    close_ep(l);
    const bool all = std::all_of(links_.begin(), links_.end(), [](const Link& k) { return k.closed; });
    if (all) {
      declare_gone(why);
      return;
    }
    std::lock_guard lock(mutex);
    if (gone.empty()) gone = why;
    gone_after = std::min<uint64_t>(gone_after, l.complete ? l.complete->version() : 0);
    cv.notify_all();
  }

  void flush_ep(Link& l, std::chrono::milliseconds bound) {
    if (!l.ep) return;
    ucp_request_param_t rp{};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(l.ep, &rp);
    if (!r || UCS_PTR_IS_ERR(r)) return;
    auto until = Clock::now() + bound;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until) ucp_worker_progress(worker_);
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until + bound) ucp_worker_progress(worker_);
    ucp_request_free(r);
  }

  void close_ep(Link& l) {
    if (!l.ep) return;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(l.ep, &rp);
    if (r && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
    l.ep = nullptr;
    ++l.generation;  // errors of the closed endpoint no longer count
  }

  void shutdown() {
    for (auto& l : links_) drain(l);
    // Each sender is told we leave, so that it takes the closed connection for that, not a fault.
    for (auto& l : links_)
      if (l.welcomed) send_am(l, kAmLeaving, {});
    // The last acks (and that word) must reach the senders before we cut the lines.
    for (auto& l : links_) flush_ep(l, std::chrono::milliseconds(1000));
    for (auto& l : links_) close_ep(l);
    auto until = Clock::now() + std::chrono::milliseconds(2000);
    while ((!draining_.empty() || !closing_.empty()) && Clock::now() < until) {
      ucp_worker_progress(worker_);
      landed_.clear();
      reap();
    }
    if (!draining_.empty())
      mlpt::sdk::log(MLPT_LOG_WARNING, "transport.ucx", "receiver: receives still pending at shutdown; leaking their buffers");
    for (auto& d : draining_) (void)d.release();  // a late write must not land in freed memory
    // The sender's goodbye (or another small control message) may come while we close: take it,
    // or UCX warns at teardown of a message nobody received.
    for (ucp_tag_recv_info_t info{}; ucp_tag_probe_nb(worker_, kControlBit, kControlBit, 0, &info) && info.length <= 4096;) {
      std::vector<uint8_t> ignored(info.length);
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, kControlBit, kControlBit, 1, &info);
      if (!msg || take(msg, ignored) == UCS_ERR_TIMED_OUT) break;
    }
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }

  // ---- sender messages ----
  bool poll_control() {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, kControlBit, kControlBit, 1, &info);
    if (!msg) return false;
    std::vector<uint8_t> payload(info.length);
    const ucs_status_t status = take(msg, payload);
    if (status == UCS_ERR_TIMED_OUT) {
      declare_gone("a control message from the sender never completed");
      return false;
    }
    if (status != UCS_OK) return true;  // the sender died mid-message: its endpoint error follows
    const uint32_t rank = tag_rank(info.sender_tag);
    if (rank >= links_.size()) return true;  // not a rank of ours: nothing we can place
    on_control(links_[rank], info.sender_tag, payload);
    return true;
  }

  // Receives a probed message into `into` (sized to it). UCS_ERR_TIMED_OUT when it does not
  // complete within 30 s: the request then stays UCX's, and so do the memory it writes to (`into`
  // is left empty) and its completion flag.
  ucs_status_t take(ucp_tag_message_h msg, std::vector<uint8_t>& into) {
    struct Wait {
      bool done = false;
      ucs_status_t status = UCS_OK;
    };
    auto wait = std::make_unique<Wait>();
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    rp.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
      auto* w = static_cast<Wait*>(user_data);
      w->done = true;
      w->status = status;
      ucp_request_free(request);
    };
    rp.user_data = wait.get();
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, into.data(), into.size(), msg, &rp);
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    if (r == nullptr) return UCS_OK;
    auto until = Clock::now() + std::chrono::seconds(30);
    while (!wait->done && Clock::now() < until) ucp_worker_progress(worker_);
    if (!wait->done) {
      (void)wait.release();
      (void)new std::vector<uint8_t>(std::move(into));
      into.clear();
      return UCS_ERR_TIMED_OUT;
    }
    return wait->status;
  }

  // Buckets of a stream this receiver stopped landing (the sender aborted it, or a newer stream
  // superseded it) may still come: they are taken off the wire, so that the sender's sends of
  // them complete and UCX keeps no stale data.
  void discard_superseded() {
    constexpr ucp_tag_t stream_mask = ~static_cast<ucp_tag_t>(kMaxBuckets - 1);  // any bucket
    for (auto& l : links_) {
      for (uint32_t stream : l.superseded) {
        ucp_tag_recv_info_t info{};
        for (ucp_tag_message_h msg; (msg = ucp_tag_probe_nb(worker_, make_tag(Kind::kData, stream, l.rank, 0), stream_mask, 1, &info));) {
          discard_.resize(info.length);
          (void)take(msg, discard_);
        }
      }
    }
  }

  void on_control(Link& link, ucp_tag_t tag, const std::vector<uint8_t>& payload) {
    const uint8_t* at = payload.data();
    const uint8_t* end = at + payload.size();
    switch (tag_kind(tag)) {
      case Kind::kWelcome: {
        if (!get(at, end, link.peer_id)) return;
        uint32_t rank = 0, ranks = 1;
        if (get(at, end, rank) && get(at, end, ranks) && (rank != link.rank || ranks != links_.size())) {
          declare_gone("the sender at " + link.address + " is rank " + std::to_string(rank) + " of a group of " +
                       std::to_string(ranks) + ", but this receiver expected rank " + std::to_string(link.rank) + " of " +
                       std::to_string(links_.size()) + " there (a sender group of another size?)");
          return;
        }
        link.welcomed = true;
        {
          std::lock_guard lock(mutex);
          ++connected;
          cv.notify_all();
        }
        std::vector<uint8_t> hello;
        put_string(hello, config_.name);
        put_string(hello, machine_identity());
        put_string(hello, worker_address_);
        send_am(link, kAmHello, std::move(hello));
        return;
      }
      case Kind::kReject:
        declare_gone("the " + link.label() + " refused this receiver: " + std::string(payload.begin(), payload.end()));
        return;
      case Kind::kBye:
        link_closed(link, "the " + link.label() + " closed");
        return;
      case Kind::kMeta:
        begin(link, tag_index(tag), payload);
        return;
      case Kind::kOffer: {
        uint64_t version = 0;
        std::vector<OfferedTensor> offer;
        try {
          offer = decode_offer(payload.data(), payload.size(), &version);
        } catch (const std::exception& e) {
          record_loss(0, link.label() + ": " + e.what());
          return;
        }
        std::lock_guard lock(mutex);
        offers[link.rank] = std::move(offer);
        cv.notify_all();
        return;
      }
      case Kind::kAbort: {
        uint64_t v = 0;
        uint32_t stream = 0;
        if (get(at, end, v) && get(at, end, stream) && link.incoming && link.incoming->stream == stream) drain(link);
        return;
      }
      case Kind::kCommit: {
        uint64_t v = 0;
        uint32_t stream = 0, n = 0;
        uint8_t has = 0;
        if (!get(at, end, v) || !get(at, end, stream) || !get(at, end, n) || !get(at, end, has)) return;
        Incoming* in = link.incoming.get();
        if (!in || in->stream != stream || in->landed->version() != v || n != in->landed->layout.buckets.size()) return;
        in->sender_checksums = has != 0;
        if (has) {
          in->checksums.resize(n);
          for (auto& c : in->checksums)
            if (!get(at, end, c)) return;
        }
        in->committed = true;
        return;
      }
      default:
        return;
    }
  }

  void begin(Link& link, uint32_t stream, const std::vector<uint8_t>& meta) {
    Layout layout;
    try {
      layout = decode_metadata(meta.data(), meta.size());
    } catch (const std::exception& e) {
      record_loss(0, "malformed weight metadata from " + link.label() + ": " + e.what());
      return;
    }
    drain(link);  // an older version still landing is superseded
    const PartPlacement placement = place_in_layout(link, layout);
    auto in = std::make_unique<Incoming>();
    in->landed = std::make_shared<Landed>(pool_, std::move(layout), placement);
    in->stream = stream;
    const Layout& l = in->landed->layout;
    size_t n = l.buckets.size();
    in->requests.assign(n, nullptr);
    in->hashes.assign(n, 0);
    in->targets.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t at = placement.bucket_at[i];
      in->targets[i] = at >= 0 ? placement.into->buffer.data + at : in->landed->at(l.buckets[i].offset);
    }
    link.incoming = std::move(in);
    Incoming* incoming = link.incoming.get();
    for (size_t i = 0; i < n; ++i) {
      auto* op = new RecvOp{this, incoming, static_cast<uint32_t>(i)};
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
      rp.datatype = ucp_dt_make_contig(1);
      rp.cb.recv = &Engine::on_recv;
      rp.user_data = op;
      ++incoming->outstanding;
      ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, incoming->targets[i], l.buckets[i].size,
                                            make_tag(Kind::kData, stream, link.rank, static_cast<uint32_t>(i)), kFullMask, &rp);
      if (r == nullptr) {
        recv_done(op, UCS_OK, l.buckets[i].size);
      } else if (UCS_PTR_IS_ERR(r)) {
        recv_done(op, UCS_PTR_STATUS(r), 0);
      } else {
        incoming->requests[i] = r;
      }
    }
    if (!placement.refused.empty()) fail_version(link, placement.refused);
  }

  // A part answering the pulls in place lands in the version's buffer in the wanted layout: each
  // bucket that lies in a piece contiguous there (in order, covering it) is received into its place.
  PartPlacement place_in_layout(const Link& link, const Layout& l) {
    PartPlacement out;
    out.bucket_at.assign(l.buckets.size(), -1);
    std::shared_ptr<const LandingPlan> plan;
    {
      std::lock_guard lock(mutex);
      plan = landing;
    }
    if (!plan || l.request == 0 || l.request != plan->request()) return out;
    try {
      out.places = plan->places(link.rank, l);
    } catch (const Error& e) {
      out.refused = e.what();
      return out;
    }
    auto& into = filling_[{l.version, l.request}];
    if (!into || into->handed_out) into = std::make_shared<LayoutBuffer>(plan, pool_, l.version);
    out.into = into;
    while (filling_.size() > 4) filling_.erase(filling_.begin());  // versions that never completed
    // Buckets ascend through the stream; each piece's own buckets must cover it in order.
    std::vector<uint64_t> covered(l.tensors.size(), 0);
    std::vector<size_t> piece_of(l.buckets.size(), SIZE_MAX);
    size_t k = 0;
    for (size_t i = 0; i < l.buckets.size(); ++i) {
      const Bucket& b = l.buckets[i];
      while (k + 1 < l.tensors.size() && l.tensors[k + 1].offset <= b.offset) ++k;
      if (k >= l.tensors.size()) break;
      const TensorMeta& m = l.tensors[k];
      if (out.places[k].at < 0 || b.offset != m.offset + covered[k] || b.size > m.nbytes - covered[k]) continue;
      covered[k] += b.size;
      piece_of[i] = k;
    }
    for (size_t i = 0; i < l.buckets.size(); ++i) {
      const size_t p = piece_of[i];
      if (p != SIZE_MAX && covered[p] == l.tensors[p].nbytes)
        out.bucket_at[i] = out.places[p].at + static_cast<int64_t>(l.buckets[i].offset - l.tensors[p].offset);
    }
    for (size_t p = 0; p < l.tensors.size(); ++p)
      if (covered[p] != l.tensors[p].nbytes) out.places[p].at = -1;  // copied over once landed
    return out;
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

  Link* owner(const Incoming* in) {
    for (auto& l : links_)
      if (l.incoming.get() == in) return &l;
    return nullptr;
  }

  void handle_landed() {
    auto batch = std::move(landed_);
    landed_.clear();
    for (auto& b : batch) {
      Link* link = owner(b.incoming);
      if (!link) continue;  // superseded or drained
      Incoming& in = *link->incoming;
      const Layout& l = in.landed->layout;
      const Bucket& bucket = l.buckets[b.bucket];
      if (b.status != UCS_OK || b.length != bucket.size) {
        std::string why = b.status != UCS_OK ? status_text(b.status)
                                             : "got " + std::to_string(b.length) + " of " + std::to_string(bucket.size) + " bytes";
        fail_version(*link, "bucket " + std::to_string(b.bucket) + " of version " + std::to_string(l.version) + " (" +
                                bucket_contents(l, b.bucket) + ") did not arrive: " + why);
        continue;
      }
      uint8_t* data = in.targets[b.bucket];
      if (config_.test_only_corrupt_bucket == static_cast<int64_t>(b.bucket)) data[bucket.size / 2] ^= 0x5A;
      if (l.checksums && config_.verify_checksum) {
        hasher_.submit({in.landed, in.landed.get(), b.bucket, data, bucket.size});  // done once hashed
      } else {
        ++in.done;
      }
      if (config_.test_only_exit_after_buckets >= 0 && ++total_landed_ >= config_.test_only_exit_after_buckets) {
        std::fprintf(stderr, "ucx receiver '%s': test_only_exit_after_buckets reached, exiting\n", config_.name.c_str());
        _exit(77);
      }
    }
  }

  // The hashes of landed buckets: a bucket of a part still being landed is done with its hash.
  void handle_hashed() {
    hasher_.take(hashed_);  // empty before: cleared after every use
    for (const auto& h : hashed_) {
      for (auto& l : links_) {
        if (!l.incoming || l.incoming->landed.get() != h.owner) continue;  // else superseded or drained
        l.incoming->hashes[h.bucket] = h.hash;
        ++l.incoming->done;
        break;  // a part is one link's
      }
    }
    hashed_.clear();  // lets go of the parts' buffers
  }

  void try_complete(Link& link) {
    if (!link.incoming || !link.incoming->committed || link.incoming->done != link.incoming->landed->layout.buckets.size()) return;
    Incoming& in = *link.incoming;
    const Layout& l = in.landed->layout;
    if (l.checksums && in.sender_checksums && config_.verify_checksum) {
      for (size_t i = 0; i < l.buckets.size(); ++i) {
        if (in.hashes[i] == in.checksums[i]) continue;
        char detail[128];
        std::snprintf(detail, sizeof(detail), "received xxhash64 %016" PRIx64 ", sender's %016" PRIx64, in.hashes[i], in.checksums[i]);
        fail_version(link, "checksum mismatch in bucket " + std::to_string(i) + " of version " + std::to_string(l.version) +
                               (links_.size() > 1 ? " from " + link.label() : std::string()) + " (bytes " +
                               std::to_string(l.buckets[i].offset) + ".." + std::to_string(l.buckets[i].offset + l.buckets[i].size) +
                               ", " + bucket_contents(l, i) + "): " + detail);
        return;
      }
    }
    const uint32_t stream = in.stream;
    if (const auto& into = in.landed->into) {
      into->bytes_in_place += in.landed->skipped_before.back();
      for (size_t k = 0; k < l.tensors.size(); ++k)
        if (in.landed->places[k].at < 0 && l.tensors[k].nbytes > 0)
          into->copy_in(l.tensors[k], in.landed->places[k], in.landed->at(l.tensors[k].offset));
    }
    link.complete = std::move(link.incoming->landed);
    link.incoming.reset();
    ack(link, link.complete->version(), stream, MLPT_OK, "");
    assemble();
  }

  // A version is complete once every rank's part of it landed, answering the pulls in place.
  void assemble() {
    std::lock_guard lock(mutex);
    const auto& first = links_.front().complete;
    if (!first) return;
    const uint64_t v = first->version();
    std::vector<std::shared_ptr<Landed>> parts;
    for (auto& l : links_) {
      if (!l.complete || l.complete->version() != v || l.complete->into != first->into) return;
      const uint64_t r = l.complete->layout.request;
      if (r != 0 && r != accepted_request) return;
      parts.push_back(l.complete);
    }
    auto whole = first->into ? std::make_shared<Assembled>(first->into) : std::make_shared<Assembled>(std::move(parts));
    if (newest && (newest->version > v || (newest->version == v && newest->request == whole->request))) return;
    newest = std::move(whole);
    if (first->into) {
      first->into->handed_out = true;
      filling_.erase(filling_.begin(), filling_.lower_bound({v + 1, 0}));
    }
    if (loss && loss->version <= v) loss.reset();
    cv.notify_all();
  }

  void fail_version(Link& link, const std::string& why) {
    uint64_t v = link.incoming->landed->version();
    record_loss(v, why);
    ack(link, v, link.incoming->stream, MLPT_DATA_LOSS, why);
    drain(link);
  }

  void record_loss(uint64_t v, const std::string& why) {
    mlpt::sdk::log(MLPT_LOG_ERROR, "transport.ucx", "receiver '" + config_.name + "': " + why);
    std::lock_guard lock(mutex);
    loss = Loss{v, why};
    cv.notify_all();
  }

  void ack(Link& link, uint64_t version, uint32_t stream, mlpt_error_code code, const std::string& text) {
    std::vector<uint8_t> payload;
    put<uint64_t>(payload, version);
    put<uint32_t>(payload, stream);
    put<uint32_t>(payload, static_cast<uint32_t>(code));
    payload.insert(payload.end(), text.begin(), text.end());
    send_am(link, kAmAck, std::move(payload));
  }

  // What the API thread queued, to the ranks that welcomed us (the others get it once they do).
  void send_outbox() {
    std::vector<Outgoing> out;
    {
      std::lock_guard lock(mutex);
      if (outbox.empty()) return;
      out.swap(outbox);
    }
    std::vector<Outgoing> later;
    for (auto& m : out) {
      if (links_[m.link].welcomed)
        send_am(links_[m.link], m.id, std::move(m.body));
      else
        later.push_back(std::move(m));
    }
    if (later.empty()) return;
    std::lock_guard lock(mutex);
    outbox.insert(outbox.begin(), std::make_move_iterator(later.begin()), std::make_move_iterator(later.end()));
  }

  // Every message to a sender starts with its kind and the peer id the sender gave us.
  void send_am(Link& link, unsigned id, std::vector<uint8_t> body) {
    if (!link.ep) return;
    std::vector<uint8_t> payload;
    put<uint32_t>(payload, id);
    put<uint64_t>(payload, link.peer_id);
    payload.insert(payload.end(), body.begin(), body.end());
    auto* owned = new std::vector<uint8_t>(std::move(payload));
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
    rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
      delete static_cast<std::vector<uint8_t>*>(user_data);
      ucp_request_free(request);
    };
    rp.user_data = owned;
    ucs_status_ptr_t r = ucp_am_send_nbx(link.ep, id, nullptr, 0, owned->data(), owned->size(), &rp);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) delete owned;
  }

  // Cancels the part being landed; its buffer returns once UCX is done with every receive.
  void drain(Link& link) {
    if (!link.incoming) return;
    if (link.incoming->done < link.incoming->landed->layout.buckets.size()) {
      link.superseded.push_back(link.incoming->stream);
      if (link.superseded.size() > 8) link.superseded.pop_front();
    }
    for (void* r : link.incoming->requests)
      if (r) ucp_request_cancel(worker_, r);
    draining_.push_back(std::move(link.incoming));
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
  std::string worker_address_;  // ucp_worker_get_address's bytes
  std::vector<Link> links_;  // one per sender rank, in rank order
  std::vector<std::unique_ptr<ErrArg>> err_args_;
  bool finished_ = false;  // gone for good: no more connection attempts
  Clock::time_point connect_deadline_;
  std::shared_ptr<ReceiveBufferPool> pool_;
  // The versions being landed in a pulled layout, by version and request: every rank's part of one
  // lands in the same buffer.
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<LayoutBuffer>> filling_;
  std::vector<std::unique_ptr<Incoming>> draining_;
  std::vector<LandedBucket> landed_;
  std::vector<uint8_t> discard_;  // where superseded buckets land
  std::vector<void*> closing_;
  int64_t total_landed_ = 0;
  std::vector<BucketHasher::Result> hashed_;
  // Last: its thread stops first, before the buffers its jobs read are given back.
  BucketHasher hasher_;
};

UcxReceiver::UcxReceiver(Config config, std::vector<std::string> addresses)
    : config_(std::move(config)), ranks_(addresses.size()) {
  context_ = make_context("ucx receiver");
  engine_ = std::make_unique<Engine>(config_, context_, addresses);
  thread_ = start_progress_thread(*engine_, context_);
}

UcxReceiver::~UcxReceiver() { stop_progress_thread(engine_, thread_, context_); }

namespace {

// The wanted layout as bytes, to tell whether the pulls in place are for it.
std::vector<uint8_t> layout_key(const mlpt_transport_receive_args& a) {
  const bool has_want = sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)) && a.num_want > 0 && a.want_tensors;
  std::vector<Pull> wanted;
  std::vector<uint8_t> key;
  for (size_t i = 0; has_want && i < a.num_want; ++i) {
    const auto& t = a.want_tensors[i];
    const mlpt_tensor_shard* shard = a.want_shards ? &a.want_shards[i] : nullptr;
    wanted.push_back(Pull{sdk::to_string(t.name), sdk::shard_box(t.tensor, shard)});
    put<uint8_t>(key, t.tensor.dtype.code), put<uint8_t>(key, t.tensor.dtype.bits), put<uint16_t>(key, t.tensor.dtype.lanes);
    for (int64_t g : sdk::global_shape_of(t.tensor, shard)) put<int64_t>(key, g);
  }
  auto pulls = encode_pulls(0, wanted);
  key.insert(key.end(), pulls.begin(), pulls.end());
  return key;
}

}  // namespace

void UcxReceiver::request_layout(const mlpt_transport_receive_args& args, std::unique_lock<std::mutex>& lock) {
  Engine& e = *engine_;
  auto key = layout_key(args);
  if (request_ != 0 && key == requested_) return;
  const std::string who = "ucx receiver '" + config_.name + "'";
  // Each rank's shard boxes (asked for once; a rank keeps its layout).
  bool asked = false;
  for (size_t r = 0; r < ranks_; ++r) {
    if (e.offers[r]) continue;
    e.outbox.push_back(Outgoing{r, kAmAsk, {}});
    asked = true;
  }
  auto all = [&] {
    return e.hopeless || std::all_of(e.offers.begin(), e.offers.end(), [](auto& o) { return o.has_value(); });
  };
  bool ok = true;
  if (!asked) {
  } else if (args.timeout_ms < 0) {
    e.cv.wait(lock, all);
  } else {
    ok = e.cv.wait_until(lock, Clock::now() + std::chrono::milliseconds(args.timeout_ms), all);
  }
  if (e.hopeless)
    throw Error(MLPT_UNAVAILABLE, "ucx: receiver '" + config_.name + "': " + e.gone + "; no version >= " +
                                      std::to_string(args.min_version));
  if (!ok) {
    std::string missing;
    for (size_t r = 0; r < ranks_; ++r)
      if (!e.offers[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw Error(MLPT_DEADLINE_EXCEEDED, "ucx: receiver '" + config_.name + "': sender rank(s) " + missing + " of " +
                                            std::to_string(ranks_) + " did not say which shards they hold within " +
                                            std::to_string(args.timeout_ms) + " ms (connected: " + std::to_string(e.connected) +
                                            "; a rank answers once it sent a version)");
  }
  std::vector<std::vector<OfferedTensor>> offers;
  for (auto& o : e.offers) offers.push_back(*o);
  const bool has_want = sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)) && args.num_want > 0;
  sdk::TensorLayout wanted;
  if (has_want) wanted = sdk::TensorLayout{args.want_tensors, args.want_shards, args.num_want};
  // Receivers start at different ranks (their names differ), so replicas share the sending.
  auto pulls = plan_pulls(offers, wanted, who, std::hash<std::string>{}(config_.name));  // throws naming what no rank covers
  ++request_;
  for (size_t r = 0; r < ranks_; ++r) e.outbox.push_back(Outgoing{r, kAmPull, encode_pulls(request_, pulls[r])});
  e.accepted_request = request_;
  e.landing = std::make_shared<LandingPlan>(request_, list_wanted(offers, wanted), std::move(pulls), has_want);
  requested_ = std::move(key);
}

void UcxReceiver::receive(mlpt_transport_receive_args& args) {
  Engine& e = *engine_;
  std::unique_lock lock(e.mutex);
  if (e.held)
    throw Error(MLPT_FAILED_PRECONDITION, "ucx: receiver '" + config_.name + "' still holds version " +
                                              std::to_string(e.held->version) + "; release it before receiving again");
  const bool has_want = sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)) && args.num_want > 0;
  // A layout, or several ranks, needs pulls; one rank's tensors as they are are asked for once.
  if (has_want || ranks_ > 1) {
    request_layout(args, lock);
  } else if (!asked_whole_) {
    e.outbox.push_back(Outgoing{0, kAmWhole, {}});
    asked_whole_ = true;
  }
  auto fits = [&](const Assembled& a) { return a.request == 0 || a.request == e.accepted_request; };
  auto have = [&] { return e.newest && e.newest->version >= args.min_version && fits(*e.newest); };
  auto lost = [&] { return e.loss && e.loss->version >= args.min_version && (!e.newest || e.loss->version > e.newest->version); };
  auto given_up = [&] { return !e.gone.empty() && (e.hopeless || args.min_version > e.gone_after); };
  auto ready = [&] { return have() || lost() || given_up(); };
  if (args.timeout_ms < 0) {
    e.cv.wait(lock, ready);
  } else {
    e.cv.wait_until(lock, Clock::now() + std::chrono::milliseconds(args.timeout_ms), ready);
  }
  if (lost()) {
    std::string why = e.loss->message;
    e.loss.reset();
    throw Error(MLPT_DATA_LOSS, "ucx: receiver '" + config_.name + "': " + why);
  }
  const std::string newest_here = e.newest ? std::to_string(e.newest->version) : std::string("none");
  if (have()) {
    e.held = e.newest;
    args.out_version = e.held->version;
    args.out_tensors = e.held->tensors.data();
    args.out_num_tensors = e.held->tensors.size();
    if (!e.held->shards.empty() && sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)))
      args.out_shards = e.held->shards.data();
    if (e.held->into) {  // how the pulled layout was landed: received in place, or copied in
      sdk::metric("transport/receive_bytes_landed_in_place", static_cast<double>(e.held->bytes_in_place));
      sdk::metric("transport/receive_bytes_copied_in", static_cast<double>(e.held->bytes_copied_in));
    }
    return;
  }
  if (given_up())
    throw Error(MLPT_UNAVAILABLE, "ucx: receiver '" + config_.name + "': " + e.gone + "; no version >= " +
                                      std::to_string(args.min_version) + " (newest here: " + newest_here + ")");
  throw Error(MLPT_DEADLINE_EXCEEDED, "ucx: receiver '" + config_.name + "': no version >= " + std::to_string(args.min_version) +
                                          " from " + std::to_string(ranks_) + " sender rank(s) within " +
                                          std::to_string(args.timeout_ms) + " ms (newest here: " + newest_here +
                                          (e.connected < ranks_ ? "; connected to " + std::to_string(e.connected) + " of them" : "") +
                                          ")");
}

void UcxReceiver::release(uint64_t version) {
  std::lock_guard lock(engine_->mutex);
  if (!engine_->held)
    throw Error(MLPT_FAILED_PRECONDITION, "ucx: release of version " + std::to_string(version) + " but receiver '" +
                                              config_.name + "' holds nothing");
  if (engine_->held->version != version)
    throw Error(MLPT_INVALID_ARGUMENT, "ucx: release of version " + std::to_string(version) + " but receiver '" + config_.name +
                                           "' holds version " + std::to_string(engine_->held->version));
  engine_->held.reset();
}

}  // namespace mlpt::transport::ucx
