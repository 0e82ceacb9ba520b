#include "ucx_sender.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/reshard.hpp"
#include "mlpt/sdk/types.hpp"
#include "transport_wire/weight_layout.hpp"
#include "mlpt/sdk/xxhash64.hpp"
#include "receive_buffers.hpp"
#include "shard_pulls.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;
using mlpt::sdk::xxhash64;

// Where a version's packed buckets and cut pieces are written: one scratch buffer, laid out once
// with the stream. A packed bucket is packed at its place; a piece cut from a shard (not one run of
// its memory) is cut at its place in its packed bucket, or at a place of its own when it fills
// direct buckets. So each byte that is not sent from the tensor itself is written once.
struct Scratch {
  std::vector<int64_t> bucket;  // per bucket: its packed bytes' offset (-1: direct)
  std::vector<int64_t> piece;   // per tensor: its cut bytes' offset (-1: not cut)
  uint64_t bytes = 0;
};

// How one receiver's pulls are cut from this rank's tensors. Planned once per pull request and own
// layout (a rank keeps its layout), then reused by every version: only the data moves.
struct CutPlan {
  Layout layout;                      // of the pieces (version and request set per version)
  Scratch scratch;
  std::vector<size_t> source;         // the rank's tensor each piece comes from
  std::vector<sdk::Box> boxes;        // each piece's global box
  std::vector<int64_t> source_bytes;  // a piece that is one run of its shard: where it starts (-1: cut)
  std::string own_signature;          // the rank's layout it was planned against
  uint64_t request = 0;
};

// One version as the sender serves it: the plan, the encoded metadata, and per bucket where its
// bytes are (the tensor itself, or the scratch buffer) and its checksum, filled in bucket by bucket
// by prepare() so that packing, cutting and hashing bucket i+1 overlap the transfer of bucket i.
// Either the rank's own tensors (shared by every receiver served them whole) or the pieces one
// receiver pulls, cut from them.
struct UcxSender::Version {
  Layout layout;
  std::vector<uint8_t> meta;
  std::vector<mlpt_named_tensor> tensors;  // shallow copies: only data/byte_offset are used
  std::vector<const uint8_t*> source;
  std::vector<uint64_t> checksums;
  size_t prepared = 0;
  Scratch scratch;
  std::shared_ptr<ReceiveBufferPool> pool;  // the scratch buffer comes from it and goes back to it
  ReceiveBuffer buffer;
  // The rank's own version: which box of its global tensor each tensor is, that as an offer, and
  // the layout's signature (what a cut plan was made against).
  std::vector<OfferedTensor> boxes;
  std::vector<uint8_t> offer;
  std::string signature;
  // A receiver's pieces: cut from the rank's version `own` by `plan`; cut[k] once piece k is.
  std::shared_ptr<const Version> own;
  std::shared_ptr<const CutPlan> plan;
  std::vector<bool> cut;

  ~Version() {
    if (pool) pool->give_back(buffer);
  }
  uint8_t* scratch_at(int64_t offset) { return buffer.data + offset; }
};

namespace {

Scratch plan_scratch(const Layout& layout, const std::vector<bool>& cut) {
  Scratch s;
  s.bucket.assign(layout.buckets.size(), -1);
  s.piece.assign(layout.tensors.size(), -1);
  for (size_t i = 0; i < layout.buckets.size(); ++i) {
    const Bucket& b = layout.buckets[i];
    if (b.direct_tensor >= 0) continue;
    s.bucket[i] = static_cast<int64_t>(s.bytes);
    for (uint32_t m = b.first_member; m < b.end_member; ++m)
      if (m < cut.size() && cut[m]) s.piece[m] = s.bucket[i] + static_cast<int64_t>(layout.tensors[m].offset - b.offset);
    s.bytes += align_up(b.size);
  }
  for (size_t k = 0; k < cut.size(); ++k) {
    if (!cut[k] || s.piece[k] >= 0 || layout.tensors[k].nbytes == 0) continue;
    s.piece[k] = static_cast<int64_t>(s.bytes);
    s.bytes += align_up(layout.tensors[k].nbytes);
  }
  return s;
}

// Readies `v` for streaming once its layout is planned: per-bucket slots, the metadata and the
// scratch buffer (from `pool`, when anything is packed or cut).
void finish_version(UcxSender::Version& v, const std::shared_ptr<ReceiveBufferPool>& pool, const std::string& who) {
  size_t n = v.layout.buckets.size();
  if (n >= kMaxBuckets)
    throw Error(MLPT_INVALID_ARGUMENT, who + ": version " + std::to_string(v.layout.version) + " needs " + std::to_string(n) +
                                           " buckets, more than the " + std::to_string(kMaxBuckets) +
                                           " a version may have; raise bucket_bytes");
  v.meta = encode_metadata(v.layout);
  v.source.resize(n);
  v.checksums.resize(n);
  if (v.scratch.bytes > 0) {
    v.pool = pool;
    v.buffer = pool->take(v.scratch.bytes);
  }
}

// The plan of the pieces one receiver pulls from this rank's version `own`: a piece contiguous in
// its shard is streamed from the shard's memory, any other is cut into the scratch buffer.
std::shared_ptr<const CutPlan> plan_cut(const UcxSender::Version& own, const std::vector<Pull>& pulls, uint64_t request,
                                        const Config& config, const std::string& who) {
  auto plan = std::make_shared<CutPlan>();
  plan->own_signature = own.signature;
  plan->request = request;
  // A rank may hold several boxes of one tensor (under tensor parallelism, its rows of each part
  // of a fused tensor): a pull is cut from the box that holds it.
  std::multimap<std::string, size_t> index;
  for (size_t i = 0; i < own.boxes.size(); ++i) index.emplace(own.boxes[i].name, i);
  const size_t n = pulls.size();
  plan->source.resize(n);
  plan->boxes.resize(n);
  plan->source_bytes.assign(n, -1);
  std::vector<std::string> names(n);  // unique while planning: one tensor may come in several pieces
  std::vector<mlpt_named_tensor> pieces(n);
  std::vector<bool> cut(n, false);
  for (size_t k = 0; k < n; ++k) {
    const Pull& pull = pulls[k];
    const auto [first, last] = index.equal_range(pull.name);
    if (first == last) throw Error(MLPT_FAILED_PRECONDITION, who + " pulls '" + pull.name + "', which this rank does not hold");
    auto it = std::find_if(first, last, [&](const auto& entry) {
      const sdk::Box& box = own.boxes[entry.second].box;
      return pull.box.offset.size() == box.offset.size() && sdk::detail::intersect(pull.box, box) == pull.box;
    });
    if (it == last)
      throw Error(MLPT_FAILED_PRECONDITION, who + " pulls box offset " + sdk::detail::shape_text(pull.box.offset) + " shape " +
                                                sdk::detail::shape_text(pull.box.extent) + " of '" + pull.name +
                                                "', which is not inside one of this rank's shards");
    plan->source[k] = it->second;
    plan->boxes[k] = pull.box;
    const sdk::Box& shard = own.boxes[it->second].box;
    const DLTensor& src = own.tensors[it->second].tensor;
    names[k] = pull.name + "#" + std::to_string(k);
    mlpt_named_tensor& t = pieces[k];
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.name = sdk::borrow(names[k]);
    t.tensor = src;  // data only has to be there for planning
    t.tensor.shape = plan->boxes[k].extent.data();
    t.tensor.strides = nullptr;
    t.tensor.byte_offset = 0;
    if (contiguous_in(shard, pull.box)) {
      plan->source_bytes[k] = first_element_in(shard, pull.box) * static_cast<int64_t>(sdk::element_bytes(src.dtype));
    } else {
      cut[k] = true;
    }
  }
  plan->layout = plan_layout(pieces.data(), n, 0, config.bucket_bytes, config.verify_checksum, who);
  for (size_t k = 0; k < n; ++k) {
    TensorMeta& m = plan->layout.tensors[k];
    m.name = pulls[k].name;
    m.global_shape = own.boxes[plan->source[k]].global_shape;
    m.box_offset = pulls[k].box.offset;
  }
  plan->scratch = plan_scratch(plan->layout, cut);
  return plan;
}

// The pieces of `plan` as a version of their own, over the rank's version `rank_version`.
std::shared_ptr<UcxSender::Version> cut_version(const std::shared_ptr<UcxSender::Version>& rank_version,
                                                const std::shared_ptr<const CutPlan>& plan,
                                                const std::shared_ptr<ReceiveBufferPool>& pool, const std::string& who) {
  const UcxSender::Version& own = *rank_version;
  auto v = std::make_shared<UcxSender::Version>();
  v->own = rank_version;
  v->plan = plan;
  v->layout = plan->layout;
  v->layout.version = own.layout.version;
  v->layout.request = plan->request;
  v->scratch = plan->scratch;
  finish_version(*v, pool, who);
  const size_t n = plan->source.size();
  v->tensors.resize(n);
  v->cut.assign(n, true);
  for (size_t k = 0; k < n; ++k) {
    const DLTensor& src = own.tensors[plan->source[k]].tensor;
    DLTensor& t = v->tensors[k].tensor;
    t = src;
    t.shape = const_cast<int64_t*>(plan->boxes[k].extent.data());
    t.strides = nullptr;
    t.byte_offset = 0;
    if (plan->source_bytes[k] >= 0) {
      t.data = static_cast<uint8_t*>(src.data) + src.byte_offset + plan->source_bytes[k];
    } else if (v->scratch.piece[k] >= 0) {
      t.data = v->scratch_at(v->scratch.piece[k]);
      v->cut[k] = false;
    }
  }
  return v;
}

// The own layout of a rank of several, which may hold one tensor as several boxes: planned under
// names unique per tensor entry, then given back their names (receivers tell the entries apart by
// box; send() refuses two boxes of one name that overlap).
Layout plan_shard_layout(const std::vector<mlpt_named_tensor>& tensors, uint64_t version, const Config& config, const std::string& who) {
  std::vector<mlpt_named_tensor> entries(tensors);
  std::vector<std::string> names(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    names[i] = sdk::to_string(tensors[i].name);
    if (names[i].empty()) throw Error(MLPT_INVALID_ARGUMENT, who + ": tensor " + std::to_string(i) + " has an empty name");
    names[i] += "#" + std::to_string(i);
    entries[i].name = sdk::borrow(names[i]);
  }
  Layout layout = plan_layout(entries.data(), entries.size(), version, config.bucket_bytes, config.verify_checksum, who);
  for (size_t i = 0; i < tensors.size(); ++i) layout.tensors[i].name = sdk::to_string(tensors[i].name);
  return layout;
}

// Two boxes of one tensor sent by one rank must not overlap: a receiver would get those elements
// twice, and from whichever it pulled.
void check_disjoint_boxes(const std::vector<OfferedTensor>& boxes, const std::string& who) {
  std::multimap<std::string, size_t> by_name;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const auto [first, last] = by_name.equal_range(boxes[i].name);
    for (auto it = first; it != last; ++it)
      if (!sdk::detail::intersect(boxes[it->second].box, boxes[i].box).empty())
        throw Error(MLPT_INVALID_ARGUMENT, who + ": tensor '" + boxes[i].name + "' is sent as entries " + std::to_string(it->second) +
                                               " and " + std::to_string(i) + " whose shard boxes overlap");
    by_name.emplace(boxes[i].name, i);
  }
}

// Cuts piece `k` of a receiver's version from the rank's shard into its place, once.
void ensure_cut(UcxSender::Version& v, size_t k) {
  if (!v.plan || v.cut[k]) return;
  const size_t source = v.plan->source[k];
  sdk::copy_box(v.own->tensors[source].tensor, v.own->boxes[source].box, v.tensors[k].tensor, v.plan->boxes[k], v.plan->boxes[k]);
  v.cut[k] = true;
}

// Packs bucket `i` (several small tensors) at its place in the scratch buffer, padding zeroed; a
// cut member is cut there directly.
const uint8_t* pack(UcxSender::Version& v, size_t i) {
  const Bucket& b = v.layout.buckets[i];
  uint8_t* staging = v.scratch_at(v.scratch.bucket[i]);
  uint64_t at = b.offset;
  for (uint32_t k = b.first_member; k < b.end_member; ++k) {
    const TensorMeta& m = v.layout.tensors[k];
    if (m.offset > at) std::memset(staging + (at - b.offset), 0, m.offset - at);
    if (v.plan && v.plan->source_bytes[k] < 0) {
      ensure_cut(v, k);
    } else if (m.nbytes > 0) {
      const DLTensor& t = v.tensors[k].tensor;
      std::memcpy(staging + (m.offset - b.offset), static_cast<const uint8_t*>(t.data) + t.byte_offset, m.nbytes);
    }
    at = m.offset + m.nbytes;
  }
  return staging;
}

}  // namespace

struct UcxSender::Peer {
  uint64_t id = 0;
  std::string address;  // the receiver's address as the listener saw it
  std::string name;     // from its hello
  ucp_ep_h ep = nullptr;
  // A receiver on this machine: its streams go over this second endpoint, which has no peer error
  // handling so that UCX may use shared memory; `ep` (peer error handling) notices when it dies.
  // NULL: the streams go over `ep`.
  ucp_ep_h stream_ep = nullptr;
  enum State { kAccepted, kReady, kRejected, kFailed } state = kAccepted;
  bool close_requested = false;
  void* close_request = nullptr;
  bool closed = false;
  // Its pulls (shard_pulls.hpp), once it sent them: from then on it is streamed just those pieces.
  bool has_pulls = false;
  uint64_t request = 0;
  std::vector<Pull> pulls;
  std::shared_ptr<const CutPlan> plan;  // how its pulls are cut, made once per request
  bool wants_offer = false;  // it asked for this rank's shard boxes before there was a version
  bool wants_whole = false;  // it asked for every version as this (only) rank sends it
  bool holds_whole = false;  // it confirmed the newest version as the rank's tensors as they are
  bool leaving = false;      // it said it closes its endpoint: the connection's end is no fault
  // The stream of one version to this peer, and its number (ucx_common.hpp, Wire vocabulary).
  std::shared_ptr<Version> stream;
  uint32_t stream_id = 0;
  size_t posted = 0, outstanding = 0;
  bool meta_sent = false, commit_sent = false;
  uint64_t acked = 0;  // newest version it confirmed holding

  std::string label() const {
    return "receiver '" + (name.empty() ? std::string("(no hello yet)") : name) + "' (" + address + ")";
  }
};

// One outstanding send; `keep` holds the buffers it reads.
struct UcxSender::Op {
  Engine* engine;
  uint64_t peer;
  uint32_t stream;  // the peer's stream it belongs to
  bool counted;     // counts towards that stream's outstanding sends
  std::shared_ptr<Version> keep;
  std::vector<uint8_t> payload;
};

struct UcxSender::Job {
  std::shared_ptr<Version> version;
  int64_t timeout_ms = 0;
  Clock::time_point deadline;
  // Set by the progress thread, read by send() under Engine::mutex.
  bool done = false;
  mlpt_error_code code = MLPT_OK;
  std::string message;
  // Filled while the job runs.
  std::vector<std::string> failures;
  mlpt_error_code failure_code = MLPT_OK;
  size_t confirmed = 0;  // receivers that acked this version (they may disconnect right after)
};

class UcxSender::Engine {
 public:
  // Where receivers reach the listener (a wildcard host replaced by this machine's name).
  std::string reachable_address() const {
    const std::string wildcard = "0.0.0.0:";
    if (listening_.rfind(wildcard, 0) != 0) return listening_;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    return std::string(host) + ":" + listening_.substr(wildcard.size());
  }

  Engine(const Config& config, ucp_context_h context, uint32_t rank, uint32_t ranks)
      : config_(config), context_(context), rank_(rank), ranks_(ranks),
        pool_(std::make_shared<ReceiveBufferPool>(2 * (config.receivers + 1))) {}

  // ---- shared with the API thread ----
  std::mutex mutex;
  std::condition_variable cv;
  bool init_done = false;
  std::string init_error;
  std::shared_ptr<Job> incoming;  // handed over by send()
  std::atomic<bool> stop{false};

  void run() {
    try {
      init();
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex);
      init_error = e.what();
      init_done = true;
      cv.notify_all();
      teardown();
      return;
    }
    {
      std::lock_guard lock(mutex);
      init_done = true;
      cv.notify_all();
    }
    unsigned idle = 0;
    while (!stop.load(std::memory_order_acquire)) {
      unsigned progressed = ucp_worker_progress(worker_);
      accept_pending();
      handle_messages();
      take_job();
      pump();
      check_job();
      reap();
      bool busy = job_ || !conn_requests_.empty() || streaming();
      idle = progressed ? 0 : idle + 1;
      if (busy) {
        // Waiting on receivers: give the core up between polls, so that a receiver on this
        // machine copies and checks meanwhile.
        if (idle > 64) std::this_thread::yield();
      } else if (idle > 256) {
        usleep(100);  // nothing in flight: do not burn a core between steps
      }
    }
    shutdown();
  }

 private:
  // ---- setup and teardown ----
  void init() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context_, &wp, &worker_), "ucx sender: creating the worker");

    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.cb = &Engine::on_am;
    am.arg = this;
    for (unsigned id : {kAmHello, kAmAck, kAmAsk, kAmPull, kAmWhole, kAmLeaving}) {
      am.id = id;
      check(ucp_worker_set_am_recv_handler(worker_, &am), "ucx sender: registering message handlers");
    }

    socklen_t len = 0;
    sockaddr_storage addr = resolve(config_.address, &len);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    lp.sockaddr.addrlen = len;
    lp.conn_handler.cb = &Engine::on_conn_request;
    lp.conn_handler.arg = this;
    ucs_status_t s = ucp_listener_create(worker_, &lp, &listener_);
    if (s != UCS_OK) fail(MLPT_UNAVAILABLE, "ucx sender: cannot listen at " + config_.address, s);
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucp_listener_query(listener_, &attr) == UCS_OK) listening_ = describe(attr.sockaddr);
    mlpt::sdk::log(MLPT_LOG_INFO, "transport.ucx", "sender listening at " + listening_);
  }

  void shutdown() {
    // Say goodbye so receivers learn at once that no newer version will come, then close.
    for (auto& [id, p] : peers_)
      if (p->state == Peer::kReady) post_control(*p, Kind::kBye, 0, {});
    drive_for(500, [&] { return ops_in_flight_ == 0; });
    for (auto& [id, p] : peers_) request_close(*p);
    drive_for(std::max<int64_t>(1000, std::min<int64_t>(config_.timeout_ms, 5000)), [&] {
      reap();
      return peers_.empty() && stream_closes_.empty();
    });
    teardown();
  }

  void teardown() {
    // A receiver that died with sends in flight on its stream endpoint left them pending for good.
    const size_t abandoned = abandoned_streams_ > 0 ? ops_in_flight_ : 0;
    for (auto* closes : {&stream_closes_, &abandoned_closes_}) {
      for (void* r : *closes) ucp_request_free(r);  // UCX releases it when the worker ends it
      closes->clear();
    }
    if (listener_) ucp_listener_destroy(listener_);
    listener_ = nullptr;
    if (abandoned > 0)
      mlpt::sdk::log(MLPT_LOG_INFO, "transport.ucx",
                     "sender: ending " + std::to_string(abandoned) + " sends left pending to receivers that failed");
    if (worker_) destroy_worker(worker_, abandoned > 0);
    worker_ = nullptr;
  }

  template <class Done>
  void drive_for(int64_t ms, Done done) {
    auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (!done() && Clock::now() < until) ucp_worker_progress(worker_);
  }

  // ---- connections ----
  static void on_conn_request(ucp_conn_request_h request, void* arg) {
    static_cast<Engine*>(arg)->conn_requests_.push_back(request);
  }

  void accept_pending() {
    auto requests = std::move(conn_requests_);
    conn_requests_.clear();
    for (auto* request : requests) {
      auto peer = std::make_unique<Peer>();
      peer->id = next_peer_id_++;
      ucp_conn_request_attr_t attr{};
      attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
      peer->address = ucp_conn_request_query(request, &attr) == UCS_OK ? describe(attr.client_address) : "unknown address";
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.conn_request = request;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &Engine::on_ep_error;
      err_args_.push_back(std::make_unique<ErrArg>(ErrArg{this, peer->id}));
      ep.err_handler.arg = err_args_.back().get();
      ucs_status_t s = ucp_ep_create(worker_, &ep, &peer->ep);
      if (s != UCS_OK) {
        // UCX releases (and rejects) the request itself when ucp_ep_create fails: rejecting it
        // again would touch freed memory (a receiver that connected and closed at once did).
        mlpt::sdk::log(MLPT_LOG_WARNING, "transport.ucx", "sender: cannot accept " + peer->address + ": " + status_text(s));
        continue;
      }
      if (std::getenv("MLPT_UCX_PRINT_EP")) ucp_ep_print_info(peer->ep, stderr);
      std::vector<uint8_t> payload;
      put<uint64_t>(payload, peer->id);
      put<uint32_t>(payload, rank_);  // so that the receiver can check it reached the rank it meant
      put<uint32_t>(payload, ranks_);
      Peer& p = *peer;
      peers_[p.id] = std::move(peer);
      post_control(p, Kind::kWelcome, 0, std::move(payload));
    }
  }

  // UCX offers no shared-memory transport to an endpoint with peer error handling (UCX 1.13), and
  // the connection endpoint needs it to notice a receiver that dies. So a receiver on this machine
  // is streamed over a second endpoint to its worker's address without it: the connection endpoint
  // still notices the receiver's death (its socket closes with the process) and then both close;
  // sends pending on the stream endpoint are abandoned with it.
  void open_stream_endpoint(Peer& p, const std::string& worker) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(worker.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &Engine::on_ep_error;  // a transport error is still reported, and fails the peer
    err_args_.push_back(std::make_unique<ErrArg>(ErrArg{this, p.id}));
    ep.err_handler.arg = err_args_.back().get();
    if (ucs_status_t s = ucp_ep_create(worker_, &ep, &p.stream_ep); s != UCS_OK) {
      p.stream_ep = nullptr;
      mlpt::sdk::log(MLPT_LOG_INFO, "transport.ucx",
                     "sender: " + p.label() + ": no endpoint to its worker (" + status_text(s) +
                         "); streaming over the connection");
      return;
    }
    if (std::getenv("MLPT_UCX_PRINT_EP")) ucp_ep_print_info(p.stream_ep, stderr);
  }

  // The error handler names the peer by id (the peer may be gone by the time UCX calls back).
  struct ErrArg {
    Engine* engine;
    uint64_t peer;
  };
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<ErrArg*>(arg);
    a->engine->ep_errors_.emplace_back(a->peer, status);
  }

  // ---- receiver messages ----
  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Engine*>(arg);
    (void)header;
    (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK;  // never sent that way; ignored
    const auto* p = static_cast<const uint8_t*>(data);
    self->messages_.push_back(std::vector<uint8_t>(p, p + length));
    return UCS_OK;
  }

  void handle_messages() {
    auto messages = std::move(messages_);
    messages_.clear();
    for (auto& m : messages) {
      const uint8_t* at = m.data();
      const uint8_t* end = at + m.size();
      uint32_t kind = 0;
      uint64_t id = 0;
      if (!get(at, end, kind) || !get(at, end, id)) continue;
      Peer* p = find(id);
      if (!p || p->state == Peer::kFailed) continue;
      if (kind == kAmHello) {
        std::string machine, worker;
        if (!get_string(at, end, p->name) || !get_string(at, end, machine) || !get_string(at, end, worker)) {
          fail_peer(*p, MLPT_DATA_LOSS, "its hello is malformed");
          continue;
        }
        on_hello(*p, machine, worker);
      } else if (kind == kAmAsk) {
        p->wants_offer = true;
        if (newest_) send_offer(*p);
      } else if (kind == kAmPull) {
        on_pulls(*p, at, static_cast<size_t>(end - at));
      } else if (kind == kAmWhole) {
        p->wants_whole = true;
        if (newest_ && p->acked != newest_->layout.version && !p->stream) serve(*p);
      } else if (kind == kAmAck) {
        uint64_t version = 0;
        uint32_t stream = 0, code = 0;
        if (!get(at, end, version) || !get(at, end, stream) || !get(at, end, code)) continue;
        std::string text(reinterpret_cast<const char*>(at), static_cast<size_t>(end - at));
        on_ack(*p, version, stream, static_cast<mlpt_error_code>(code), text);
      } else if (kind == kAmLeaving) {
        p->leaving = true;
      }
    }
    // After the messages: a receiver's word that it leaves comes before its connection's end.
    for (auto& [id, status] : ep_errors_)
      if (auto* p = find(id)) fail_peer(*p, MLPT_UNAVAILABLE, "connection lost (" + status_text(status) + ")");
    ep_errors_.clear();
  }

  void on_hello(Peer& p, const std::string& machine, const std::string& worker) {
    size_t ready = ready_peers();
    if (ready >= config_.receivers) {
      std::string why = "the sender at " + listening_ + " already serves its " + std::to_string(config_.receivers) + " receivers";
      mlpt::sdk::log(MLPT_LOG_WARNING, "transport.ucx", "sender: refusing " + p.label() + ": " + why);
      post_control(p, Kind::kReject, 0, std::vector<uint8_t>(why.begin(), why.end()));
      p.state = Peer::kRejected;
      return;
    }
    p.state = Peer::kReady;
    if (ready + 1 > expected()) --lost_;  // it takes the place of one that is gone
    if (config_.shared_memory && machine == machine_) open_stream_endpoint(p, worker);
    mlpt::sdk::log(
        MLPT_LOG_INFO, "transport.ucx",
        "sender: " + p.label() + " connected" +
            (p.stream_ep ? " (on this machine: streamed over shared memory where UCX has it)" : ""));
    if (newest_) serve(p);  // a late receiver gets the newest version at once
  }

  // The newest version to `p`: the pieces it pulls, or (one rank, when it asked) everything. A
  // receiver that has not said which yet gets nothing: one that pulls its pieces is never streamed
  // the version whole first.
  void serve(Peer& p) {
    if (p.state != Peer::kReady || !newest_) return;
    if (!p.has_pulls) {
      if (ranks_ == 1 && p.wants_whole) start_stream(p, newest_);
      return;
    }
    std::shared_ptr<Version> cut;
    const std::string who = "ucx sender rank " + std::to_string(rank_) + ": " + p.label();
    try {
      if (!p.plan || p.plan->request != p.request || p.plan->own_signature != newest_->signature)
        p.plan = plan_cut(*newest_, p.pulls, p.request, config_, who);
      cut = cut_version(newest_, p.plan, pool_, who);
    } catch (const std::exception& e) {
      fail_peer(p, MLPT_FAILED_PRECONDITION, e.what());
      return;
    }
    start_stream(p, cut);
  }

  void send_offer(Peer& p) {
    p.wants_offer = false;
    post_control(p, Kind::kOffer, newest_->layout.version, newest_->offer);
  }

  void on_pulls(Peer& p, const uint8_t* data, size_t size) {
    try {
      p.pulls = decode_pulls(data, size, &p.request);
    } catch (const std::exception& e) {
      fail_peer(p, MLPT_DATA_LOSS, e.what());
      return;
    }
    p.has_pulls = true;
    // One that holds the newest version whole already has every piece of it.
    if (newest_ && !(p.holds_whole && p.acked == newest_->layout.version && !p.stream)) serve(p);
  }

  void on_ack(Peer& p, uint64_t version, uint32_t stream, mlpt_error_code code, const std::string& text) {
    if (!p.stream || p.stream_id != stream || p.stream->layout.version != version) return;  // a superseded stream
    if (code == MLPT_OK) {
      p.acked = version;
      p.holds_whole = p.stream->layout.request == 0;
      if (job_ && job_->version->layout.version == version) ++job_->confirmed;
    } else if (job_ && job_->version->layout.version == version) {
      job_->failures.push_back(p.label() + ": " + text);
      if (job_->failure_code == MLPT_OK) job_->failure_code = code;
    }
    p.stream.reset();
  }

  // ---- streams ----
  Peer* find(uint64_t id) {
    auto it = peers_.find(id);
    return it == peers_.end() ? nullptr : it->second.get();
  }

  bool streaming() const {
    for (auto& [id, p] : peers_)
      if (p->stream || p->outstanding || p->close_requested) return true;
    return false;
  }

  void start_stream(Peer& p, const std::shared_ptr<Version>& v) {
    if (p.stream && p.stream != v && p.meta_sent) {
      // Rule: a stream of an older version never commits once a newer send began.
      std::vector<uint8_t> payload;
      put<uint64_t>(payload, p.stream->layout.version);
      put<uint32_t>(payload, p.stream_id);
      post_control(p, Kind::kAbort, p.stream->layout.version, std::move(payload));
    }
    p.stream = v;
    p.stream_id = (p.stream_id + 1) & kStreamMask;
    p.posted = 0;
    p.outstanding = 0;
    p.commit_sent = false;
    p.meta_sent = true;
    post(p, v->meta.data(), v->meta.size(), make_tag(Kind::kMeta, v->layout.version, rank_, p.stream_id), v, {}, true);
  }

  void prepare(Version& v) {
    size_t i = v.prepared;
    const Bucket& b = v.layout.buckets[i];
    if (b.direct_tensor >= 0) {
      ensure_cut(v, static_cast<size_t>(b.direct_tensor));
      v.source[i] = direct_source(v.layout, b, v.tensors.data());
    } else {
      v.source[i] = pack(v, i);
    }
    if (v.layout.checksums) v.checksums[i] = xxhash64(v.source[i], b.size);
    v.prepared = i + 1;
  }

  void pump() {
    // One bucket of each version being streamed per turn, so sends already posted progress meanwhile.
    std::vector<Version*> prepared;
    for (auto& [id, p] : peers_) {
      Version* v = p->stream.get();
      if (v && v->prepared < v->layout.buckets.size() && std::find(prepared.begin(), prepared.end(), v) == prepared.end()) {
        prepare(*v);
        prepared.push_back(v);
      }
    }
    for (auto& [id, pp] : peers_) {
      Peer& p = *pp;
      if (p.state != Peer::kReady || !p.stream) continue;
      Version& v = *p.stream;
      while (p.posted < v.prepared) {
        size_t i = p.posted++;
        post(p, v.source[i], v.layout.buckets[i].size, make_tag(Kind::kData, p.stream_id, rank_, static_cast<uint32_t>(i)),
             p.stream, {}, true);
      }
      if (p.posted == v.layout.buckets.size() && p.outstanding == 0 && !p.commit_sent) {
        // Every bucket send completed locally: the receiver has read them all, so commit.
        std::vector<uint8_t> payload;
        put<uint64_t>(payload, v.layout.version);
        put<uint32_t>(payload, p.stream_id);
        put<uint32_t>(payload, static_cast<uint32_t>(v.layout.buckets.size()));
        put<uint8_t>(payload, v.layout.checksums ? 1 : 0);
        if (v.layout.checksums)
          for (uint64_t c : v.checksums) put<uint64_t>(payload, c);
        p.commit_sent = true;
        post_control(p, Kind::kCommit, v.layout.version, std::move(payload));
      }
    }
  }

  void post_control(Peer& p, Kind kind, uint64_t version, std::vector<uint8_t> payload) {
    auto* op = new Op{this, p.id, p.stream_id, false, nullptr, std::move(payload)};
    send_op(p, op, op->payload.data(), op->payload.size(), make_tag(kind, version, rank_, 0));
  }

  void post(Peer& p, const void* data, size_t size, ucp_tag_t tag, std::shared_ptr<Version> keep,
            std::vector<uint8_t> payload, bool counted) {
    auto* op = new Op{this, p.id, p.stream_id, counted, std::move(keep), std::move(payload)};
    if (counted) ++p.outstanding;
    send_op(p, op, data, size, tag);
  }

  void send_op(Peer& p, Op* op, const void* data, size_t size, ucp_tag_t tag) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = &Engine::on_sent;
    rp.user_data = op;
    ++ops_in_flight_;
    ucs_status_ptr_t r = ucp_tag_send_nbx(p.stream_ep ? p.stream_ep : p.ep, data, size, tag, &rp);
    if (r == nullptr) {
      sent(op, UCS_OK);
    } else if (UCS_PTR_IS_ERR(r)) {
      sent(op, UCS_PTR_STATUS(r));
    }
  }

  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<Op*>(user_data);
    op->engine->sent(op, status);
    ucp_request_free(request);
  }

  void sent(Op* op, ucs_status_t status) {
    std::unique_ptr<Op> owned(op);
    --ops_in_flight_;
    Peer* p = find(op->peer);
    if (!p) return;
    if (op->counted && p->stream && p->stream_id == op->stream && p->outstanding > 0) --p->outstanding;
    if (op->counted && status == UCS_OK && config_.test_only_sender_exit_after_buckets >= 0 &&
        ++buckets_sent_ >= config_.test_only_sender_exit_after_buckets) {
      std::fprintf(stderr, "ucx sender: test_only_sender_exit_after_buckets reached, exiting\n");
      _exit(77);  // a trainer lost in the middle of a refit, its receivers part way through
    }
    if (status != UCS_OK && status != UCS_ERR_CANCELED && p->state != Peer::kFailed)
      fail_peer(*p, MLPT_UNAVAILABLE, "sending to it failed (" + status_text(status) + ")");
  }

  // Receivers still expected: `receivers` less those whose connection broke (their process is gone).
  size_t expected() const { return config_.receivers - lost_; }
  size_t ready_peers() const {
    return static_cast<size_t>(std::count_if(peers_.begin(), peers_.end(),
                                             [](auto& kv) { return kv.second->state == Peer::kReady; }));
  }

  void fail_peer(Peer& p, mlpt_error_code code, const std::string& why) {
    if (p.state == Peer::kFailed) return;
    bool was_ready = p.state == Peer::kReady;
    p.state = Peer::kFailed;
    // A receiver that said it leaves and then closed is no fault: noted, not warned about.
    const bool left = p.leaving && code == MLPT_UNAVAILABLE;
    const auto level = left ? MLPT_LOG_INFO : MLPT_LOG_WARNING;
    mlpt::sdk::log(level, "transport.ucx", "sender: " + p.label() + ": " + (left ? std::string("left") : why));
    // A receiver whose connection broke is gone (its process died): it is dropped, and this send
    // and later ones wait only for the others, so one lost engine does not stop the refit of the
    // rest. It fails the send only when it was the last. One that did not confirm in time may
    // still be alive, and stays expected. A new receiver takes the place of one that is gone.
    bool dropped = false;
    if (was_ready && code == MLPT_UNAVAILABLE) {
      ++lost_;
      lost_labels_.push_back(p.label());
      dropped = expected() > 0;
      mlpt::sdk::log(level, "transport.ucx",
                     "sender: " + p.label() + " is gone and dropped: sends now wait for " +
                         std::to_string(expected()) + " of the " + std::to_string(config_.receivers) +
                         " receivers");
    }
    if (was_ready && !dropped && job_ && p.acked != job_->version->layout.version) {
      size_t done = p.stream && p.stream->layout.version == job_->version->layout.version ? p.posted : 0;
      job_->failures.push_back(p.label() + ": " + why + " after " + std::to_string(done) + " of " +
                               std::to_string(job_->version->layout.buckets.size()) + " buckets of version " +
                               std::to_string(job_->version->layout.version));
      if (job_->failure_code == MLPT_OK) job_->failure_code = code;
    }
    p.stream.reset();
    request_close(p);
  }

  void request_close(Peer& p) {
    if (p.close_requested) return;
    p.close_requested = true;
    if (p.stream_ep) {
      // Without peer error handling UCX closes only by flushing (it refuses a forced close). A dead
      // receiver's pending sends never complete: a failed receiver's close is not waited for, and
      // the worker's teardown ends what is left of it.
      ucp_request_param_t flush{};
      ucs_status_ptr_t r = ucp_ep_close_nbx(p.stream_ep, &flush);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) (p.state == Peer::kFailed ? abandoned_closes_ : stream_closes_).push_back(r);
      if (p.state == Peer::kFailed) ++abandoned_streams_;
      p.stream_ep = nullptr;
    }
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A rejected peer gets its refusal flushed first; everyone else is cut off at once.
    rp.flags = p.state == Peer::kRejected ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &rp);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      p.closed = true;
    } else {
      p.close_request = r;
    }
  }

  void reap() {
    for (auto* closes : {&stream_closes_, &abandoned_closes_})
      std::erase_if(*closes, [](void* r) {
        if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
        ucp_request_free(r);
        return true;
      });
    for (auto it = peers_.begin(); it != peers_.end();) {
      Peer& p = *it->second;
      if (p.state == Peer::kRejected && !p.close_requested && p.outstanding == 0) request_close(p);
      if (p.close_request && ucp_request_check_status(p.close_request) != UCS_INPROGRESS) {
        ucp_request_free(p.close_request);
        p.close_request = nullptr;
        p.closed = true;
      }
      it = p.closed ? peers_.erase(it) : std::next(it);
    }
  }

  // ---- jobs ----
  void take_job() {
    if (job_) return;
    std::shared_ptr<Job> j;
    {
      std::lock_guard lock(mutex);
      j = std::move(incoming);
      incoming.reset();
    }
    if (!j) return;
    job_ = std::move(j);
    newest_ = job_->version;
    for (auto& [id, p] : peers_) {
      if (p->state != Peer::kReady) continue;
      if (p->wants_offer) send_offer(*p);
      serve(*p);
    }
  }

  void check_job() {
    if (!job_) return;
    uint64_t v = job_->version->layout.version;
    size_t ok = job_->confirmed;
    std::vector<Peer*> pending, unasked;
    size_t ready = 0;
    for (auto& [id, p] : peers_) {
      if (p->state != Peer::kReady) continue;
      ++ready;
      if (p->acked != v && p->stream && p->stream->layout.version == v) pending.push_back(p.get());
      if (p->acked != v && !p->stream) unasked.push_back(p.get());
    }
    ready = std::max(ready, ok);
    // With every receiver gone a send waits for a new one to take a place, until its timeout.
    const size_t wanted = std::max<size_t>(expected(), 1);
    bool failed = !job_->failures.empty();
    if (pending.empty() && (ok >= wanted || failed)) {
      finish(failed ? job_->failure_code : MLPT_OK, failed ? join(job_->failures) : "");
      return;
    }
    if (job_->timeout_ms >= 0 && Clock::now() >= job_->deadline) {
      std::string why = "send of version " + std::to_string(v) + " timed out after " +
                        std::to_string(job_->timeout_ms) + " ms: " + std::to_string(ok) + " of " +
                        std::to_string(wanted) + " receivers confirmed it";
      if (expected() == 0) why += "; every receiver is gone: " + join(lost_labels_);
      std::vector<std::string> parts = job_->failures;
      for (Peer* p : pending)
        parts.push_back(p->label() + " had " + std::to_string(p->posted) + " of " +
                        std::to_string(p->stream->layout.buckets.size()) + " buckets posted and did not confirm");
      for (Peer* p : unasked)
        parts.push_back(p->label() + " connected but never said which pieces it wants (it did not call receive)");
      if (ready < wanted)
        parts.push_back(std::to_string(wanted - ready) + " receiver(s) never connected to " + listening_);
      // Those that did not make it are cut off, so nothing keeps reading the trainer's memory.
      for (Peer* p : pending)
        fail_peer(*p, MLPT_DEADLINE_EXCEEDED, "did not confirm version " + std::to_string(v) + " in time");
      finish(expected() == 0 ? MLPT_UNAVAILABLE : MLPT_DEADLINE_EXCEEDED,
             why + (parts.empty() ? "" : "; " + join(parts)));
    }
  }

  static std::string join(const std::vector<std::string>& parts) {
    std::string out;
    for (auto& s : parts) out += (out.empty() ? "" : "; ") + s;
    return out;
  }

  void finish(mlpt_error_code code, std::string message) {
    std::lock_guard lock(mutex);
    job_->code = code;
    job_->message = std::move(message);
    job_->done = true;
    cv.notify_all();
    job_.reset();
  }

  const Config& config_;
  ucp_context_h context_;
  const uint32_t rank_, ranks_;  // this endpoint is sender rank rank_ of ranks_
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  std::string listening_;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  uint64_t next_peer_id_ = 1;
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<std::vector<uint8_t>> messages_;
  std::vector<std::pair<uint64_t, ucs_status_t>> ep_errors_;
  std::vector<std::unique_ptr<ErrArg>> err_args_;
  std::vector<void*> stream_closes_;     // closes of live receivers' stream endpoints in progress
  std::vector<void*> abandoned_closes_;  // of failed receivers' (a dead one's never completes)
  size_t abandoned_streams_ = 0;         // failed receivers whose stream endpoint was closed
  const std::string machine_ = machine_identity();
  size_t ops_in_flight_ = 0;
  int64_t buckets_sent_ = 0;  // bucket sends completed, to every receiver (test_only_sender_exit_after_buckets)
  size_t lost_ = 0;                       // receivers dropped because their connection broke
  std::vector<std::string> lost_labels_;  // and who they were
  std::shared_ptr<Job> job_;
  std::shared_ptr<Version> newest_;

 public:
  // Scratch buffers of the versions being streamed: the rank's own and one per receiver, each
  // possibly with the one before it still in flight.
  std::shared_ptr<ReceiveBufferPool> pool_;
};

UcxSender::UcxSender(Config config, uint32_t rank, uint32_t ranks) : config_(std::move(config)), rank_(rank), ranks_(ranks) {
  context_ = make_context("ucx sender");
  engine_ = std::make_unique<Engine>(config_, context_, rank_, ranks_);
  thread_ = start_progress_thread(*engine_, context_);
}

UcxSender::~UcxSender() { stop_progress_thread(engine_, thread_, context_); }

std::string UcxSender::reachable_address() const { return engine_->reachable_address(); }

void UcxSender::send(const mlpt_transport_send_args& args) {
  if (args.version <= last_version_)
    throw Error(MLPT_INVALID_ARGUMENT, "ucx: version " + std::to_string(args.version) + " is not greater than the previous send's " +
                                           std::to_string(last_version_) + " (versions must strictly increase)");
  for (size_t i = 0; i < args.num_tensors && args.tensors; ++i) {
    auto type = args.tensors[i].tensor.device.device_type;
    if (type != kDLCPU && type != kDLCUDAHost)
      throw Error(MLPT_UNIMPLEMENTED, "ucx: tensor '" + mlpt::sdk::to_string(args.tensors[i].name) +
                                          "' is in device memory (DLPack device type " + std::to_string(type) +
                                          "); this transport sends host memory, use the nccl transport for CUDA tensors");
  }
  const std::string who = ranks_ > 1 ? "ucx send (sender rank " + std::to_string(rank_) + " of " + std::to_string(ranks_) + ")"
                                     : std::string("ucx send");
  auto v = std::make_shared<Version>();
  v->tensors.assign(args.tensors, args.tensors + args.num_tensors);
  // A rank of several may send one tensor as several boxes (shard_named_tensors); receivers pull
  // pieces by name and box, so the rank's own layout only needs to tell them apart.
  v->layout = ranks_ > 1 ? plan_shard_layout(v->tensors, args.version, config_, who)
                         : plan_layout(args.tensors, args.num_tensors, args.version, config_.bucket_bytes, config_.verify_checksum, who);
  // Which box of its global tensor each tensor is; on the wire whenever they are not all whole, or
  // several ranks send (a receiver then assembles or cuts its layout from the pieces).
  const mlpt_tensor_shard* shards = sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_send_args, shards)) ? args.shards : nullptr;
  bool boxed = ranks_ > 1;
  for (size_t i = 0; i < args.num_tensors; ++i) {
    const DLTensor& t = args.tensors[i].tensor;
    const mlpt_tensor_shard* shard = shards ? &shards[i] : nullptr;
    OfferedTensor o{v->layout.tensors[i].name, t.dtype, sdk::global_shape_of(t, shard), sdk::shard_box(t, shard)};
    sdk::detail::check_inside(o.name, o.global_shape, sdk::Shard{static_cast<int32_t>(rank_), o.box}, "sent");
    boxed = boxed || !sdk::is_whole(t, shard);
    v->boxes.push_back(std::move(o));
  }
  check_disjoint_boxes(v->boxes, who);
  if (boxed)
    for (size_t i = 0; i < v->boxes.size(); ++i)
      v->layout.tensors[i].global_shape = v->boxes[i].global_shape, v->layout.tensors[i].box_offset = v->boxes[i].box.offset;
  // Receivers plan their pulls from a rank's boxes once: a rank of several keeps its layout (one
  // rank of whole tensors may change them: what it holds is what a receiver gets).
  const auto boxes = encode_offer(0, v->boxes);
  std::string signature(boxes.begin(), boxes.end());
  if (boxed && !last_boxes_.empty() && signature != last_boxes_)
    throw Error(MLPT_FAILED_PRECONDITION, who + ": version " + std::to_string(args.version) +
                                              " has other tensors or shard boxes than the previous send's; receivers planned "
                                              "their pulls from those, so a sender rank keeps one layout (create a new endpoint)");
  last_boxes_ = std::move(signature);
  v->offer = encode_offer(args.version, v->boxes);
  v->signature = last_boxes_;
  v->scratch = plan_scratch(v->layout, {});
  finish_version(*v, engine_->pool_, who);
  last_version_ = args.version;  // even if this send fails: some receivers may hold it

  auto job = std::make_shared<Job>();
  job->version = std::move(v);
  job->timeout_ms = args.timeout_ms;
  job->deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(args.timeout_ms, 0));
  std::unique_lock lock(engine_->mutex);
  engine_->incoming = job;
  auto finished = [&] { return job->done; };
  if (args.timeout_ms < 0) {
    engine_->cv.wait(lock, finished);
  } else if (!engine_->cv.wait_until(lock, job->deadline + std::chrono::seconds(1), finished)) {
    if (engine_->incoming == job) engine_->incoming.reset();
    throw Error(MLPT_DEADLINE_EXCEEDED, "ucx: send of version " + std::to_string(args.version) + " timed out after " +
                                            std::to_string(args.timeout_ms) + " ms (the UCX progress thread did not answer)");
  }
  if (job->code != MLPT_OK) throw Error(job->code, "ucx: " + job->message);
}

}  // namespace mlpt::transport::ucx
