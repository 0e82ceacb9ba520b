// The UCX transport between real processes on loopback (127.0.0.1): this test process is one end,
// transport_ucx_peer (built with the tests) the other. UCX picks its transports itself (shared memory
// and CMA between processes here, TCP for the connection manager); UCX_TLS in the environment, if
// set, is honoured by both ends.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <tuple>

#include "refit_receiver.hpp"
#include "refit_sender.hpp"
#include "sparse_delta.hpp"
#include "sharded_tensors.hpp"
#include "transport_support.hpp"

using namespace transport_test;
using Clock = std::chrono::steady_clock;

namespace {

std::string address(int port) { return "127.0.0.1:" + std::to_string(port); }

std::string dump_prefix(const std::string& test) {
  auto dir = std::filesystem::temp_directory_path() / ("mlpt_transport_ucx_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / test).string();
}

Child receiver(const std::string& config, int count, const std::string& prefix, int timeout_ms = 20000) {
  return Child({TRANSPORT_PEER_EXE, "receive", config, std::to_string(count), std::to_string(timeout_ms), prefix});
}

// A sender's config: a receiver on this machine streamed over an endpoint of its own (shared memory
// where UCX has it, the default) or over the peer-checked connection, as one on another machine is.
std::string tx_config(int port, bool shared_memory, const std::string& extra = "") {
  return R"({"address": ")" + address(port) + R"(", "shared_memory": )" + (shared_memory ? "true" : "false") + extra + "}";
}

std::string rx_config(int port, const std::string& name, const std::string& extra = "") {
  return R"({"address": ")" + address(port) + R"(", "name": ")" + name + R"(", "timeout_ms": 20000)" + extra + "}";
}

struct Failure {
  mlpt_error_code code = MLPT_OK;
  std::string message;
  double seconds = 0;
};

template <class F>
Failure failure_of(F f) {
  auto start = Clock::now();
  Failure out;
  try {
    f();
  } catch (const mlpt::Error& e) {
    out.code = e.code();
    out.message = e.what();
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace

TEST_CASE("ucx: round trip across processes is bitwise equal for mixed dtypes and odd sizes") {
  Loaded ucx("ucx");
  CHECK(ucx.caps()->cross_process == 1);
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  // 64 KiB buckets: the large tensors span many buckets, the last one partial; small ones are packed.
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "bucket_bytes": 65536)"));
  auto prefix = dump_prefix("roundtrip");
  Child rx = receiver(rx_config(port, "engine-0"), 2, prefix);
  auto v1 = mixed_tensors(1), v2 = mixed_tensors(2);
  // send() returns once the receiver holds the version; its receive() takes the newest it holds,
  // so the next version is sent only after it took this one (or it may rightly skip it).
  tx.send(1, v1.views, 20000);
  CHECK(rx.line(20000) == "received 1");
  tx.send(2, v2.views, 20000);
  CHECK(rx.line(20000) == "received 2");
  CHECK(rx.wait(20000) == 0);
  CHECK(compare_dump(prefix + ".1.bin", v1) == "");
  CHECK(compare_dump(prefix + ".2.bin", v2) == "");
  // A non-increasing version is refused before anything is sent.
  auto f = failure_of([&] { tx.send(2, v2.views, 1000); });
  CHECK(f.code == MLPT_INVALID_ARGUMENT);
  CHECK_THAT(f.message, Catch::Contains("versions must strictly increase"));
}

TEST_CASE("ucx: two receivers both get every byte") {
  Loaded ucx("ucx");
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "receivers": 2, "bucket_bytes": 1048576)"));
  auto p0 = dump_prefix("two0"), p1 = dump_prefix("two1");
  Child rx0 = receiver(rx_config(port, "engine-0"), 1, p0);
  Child rx1 = receiver(rx_config(port, "engine-1"), 1, p1);
  auto v = mixed_tensors(5, 4);
  tx.send(5, v.views, 20000);
  CHECK(rx0.wait(20000) == 0);
  CHECK(rx1.wait(20000) == 0);
  CHECK(compare_dump(p0 + ".5.bin", v) == "");
  CHECK(compare_dump(p1 + ".5.bin", v) == "");
}

// An engine rank asks for its shards on its first receive; the sender first streams the version
// whole (it has no pulls yet), then again as the pieces pulled once they arrive. Both streams are
// of one version: the second's buckets, commit and ack must not be taken for the first's. Buckets
// of 64 KiB (rendezvous between processes) keep the whole stream in flight while the pulls arrive;
// before streams had numbers of their own, 4 of 5 runs of this test failed.
TEST_CASE("ucx: receivers that pull their shards while the version streams to them whole get every version, bit for bit") {
  Loaded ucx("ucx");
  const int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "receivers": 2, "bucket_bytes": 65536)"));
  constexpr uint64_t kLast = 6;
  std::vector<std::string> prefixes;
  std::vector<std::unique_ptr<Child>> rx;
  for (int j = 0; j < 2; ++j) {
    prefixes.push_back(dump_prefix("pull-while-whole" + std::to_string(j)));
    rx.push_back(std::make_unique<Child>(std::vector<std::string>{TRANSPORT_PEER_EXE, "receive-columns", rx_config(port, "engine-rank-" + std::to_string(j)),
                                             std::to_string(kLast), "20000", prefixes.back(), std::to_string(j), "2"}));
  }
  std::vector<TensorSet> sent;
  for (uint64_t v = 1; v <= kLast; ++v) {
    sent.push_back(whole_tensors(v));
    INFO("version " << v);
    tx.send(v, sent.back().views, 20000);  // both receivers confirmed it
  }
  for (int j = 0; j < 2; ++j) {
    INFO("receiver " << j);
    std::vector<std::string> got;
    for (auto line = rx[j]->line(20000); line && *line != "done"; line = rx[j]->line(20000)) got.push_back(*line);
    CHECK(rx[j]->wait(20000) == 0);
    REQUIRE_FALSE(got.empty());
    CHECK(got.back() == "received " + std::to_string(kLast));
    for (const std::string& line : got) {
      INFO(line);
      REQUIRE(line.rfind("received ", 0) == 0);
      const uint64_t v = std::stoull(line.substr(9));
      CHECK(compare_dump(prefixes[j] + "." + std::to_string(v) + ".bin", expected_parts(sent[v - 1], column_boxes(sent[v - 1], j, 2))) == "");
    }
  }
}

TEST_CASE("ucx: a receiver that never arrives times out the send, a late one gets the newest version once it asks") {
  Loaded ucx("ucx");
  int port = free_port();
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"address": ")" + address(port) + R"("})");
  auto v1 = mixed_tensors(1), v2 = mixed_tensors(2);
  auto f = failure_of([&] { tx.send(1, v1.views, 300); });
  CHECK(f.code == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(f.message, Catch::Contains("0 of 1 receivers confirmed") && Catch::Contains("never connected"));
  CHECK(f.seconds < 0.3 + 1.5);
  f = failure_of([&] { tx.send(2, v2.views, 300); });
  CHECK(f.code == MLPT_DEADLINE_EXCEEDED);
  // Nobody sends again: the late receiver is served version 2, the newest, on its first receive.
  auto prefix = dump_prefix("late");
  Child late = receiver(rx_config(port, "late-engine"), 1, prefix);
  CHECK(late.line(20000) == "received 2");
  CHECK(late.wait(20000) == 0);
  CHECK(compare_dump(prefix + ".2.bin", v2) == "");
}

// Nothing is streamed to a receiver before its first receive says what it wants (whole, or the
// pieces it pulls): one that pulls is never sent the version whole first.
TEST_CASE("ucx: a connected receiver that has not asked is sent nothing, and the newest version once it asks") {
  Loaded ucx("ucx");
  const int port = free_port();
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"address": ")" + address(port) + R"("})");
  Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, rx_config(port, "quiet-engine"));
  auto v1 = mixed_tensors(1);
  auto f = failure_of([&] { tx.send(1, v1.views, 1000); });
  CHECK(f.code == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(f.message, Catch::Contains("'quiet-engine'") && Catch::Contains("never said which pieces it wants"));
  Received r = rx.receive(1, 20000);
  CHECK(r.version == 1);
  const std::string dump = dump_prefix("quiet") + ".1.bin";
  write_dump(dump, r.tensors, r.count);
  CHECK(compare_dump(dump, v1) == "");
  rx.release(r.version);
}

TEST_CASE("ucx: a receiver killed midway fails the send within its timeout, naming the receiver") {
  Loaded ucx("ucx");
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "bucket_bytes": 4096)"));
  auto prefix = dump_prefix("killed");
  // The peer _exit()s after 5 buckets have landed: a process dying in the middle of a transfer.
  Child rx = receiver(rx_config(port, "doomed-engine", R"(, "test_only_exit_after_buckets": 5)"), 1, prefix);
  auto v = mixed_tensors(1);
  auto f = failure_of([&] { tx.send(1, v.views, 4000); });
  CHECK((f.code == MLPT_UNAVAILABLE || f.code == MLPT_DEADLINE_EXCEEDED));
  CHECK_THAT(f.message, Catch::Contains("receiver 'doomed-engine'"));
  CHECK(f.seconds < 4.0 + 1.5);  // never blocked beyond its timeout
  CHECK(rx.wait(5000) == 77);

  // A receiver that hangs (stopped, its connection still open) is named after the timeout.
  auto p2 = dump_prefix("stopped");
  Child hung = receiver(rx_config(port, "frozen-engine"), 2, p2);
  tx.send(2, v.views, 20000);
  CHECK(hung.line(20000) == "received 2");
  REQUIRE(hung.stop(5000));
  f = failure_of([&] { tx.send(3, v.views, 500); });
  CHECK(f.code == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(f.message, Catch::Contains("receiver 'frozen-engine'") && Catch::Contains("did not confirm"));
  CHECK(f.seconds < 0.5 + 1.5);
  hung.signal(SIGKILL);
}

TEST_CASE("ucx: a receiver that dies is dropped, and later sends go to the others without waiting for it") {
  Loaded ucx("ucx");
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "receivers": 2, "bucket_bytes": 65536)"));
  auto p0 = dump_prefix("drop0"), p1 = dump_prefix("drop1");
  Child survivor = receiver(rx_config(port, "engine-0"), 3, p0);
  Child doomed = receiver(rx_config(port, "engine-1"), 3, p1);
  auto v1 = mixed_tensors(1), v2 = mixed_tensors(2), v3 = mixed_tensors(3);
  // Each version is sent once the survivor took the one before: receive() returns the newest
  // version held, so a version sent while the survivor still wrote out the last would rightly be
  // skipped (with shared memory two sends fit in that time: 1 run in 10 saw "received 3" after 1).
  tx.send(1, v1.views, 20000);
  CHECK(doomed.line(20000) == "received 1");
  CHECK(survivor.line(20000) == "received 1");
  doomed.signal(SIGKILL);  // an engine's process killed between two refits
  CHECK(doomed.wait(5000) != 0);
  auto f = failure_of([&] { tx.send(2, v2.views, 20000); });
  INFO(f.message);
  CHECK(f.code == MLPT_OK);
  CHECK(f.seconds < 15.0);  // noticed the death, did not run out the clock
  CHECK(survivor.line(20000) == "received 2");
  f = failure_of([&] { tx.send(3, v3.views, 20000); });
  CHECK(f.code == MLPT_OK);
  CHECK(survivor.line(20000) == "received 3");
  CHECK(survivor.wait(20000) == 0);
  CHECK(compare_dump(p0 + ".3.bin", v3) == "");
  // With the last receiver gone a send waits for a new one, then fails naming who is gone.
  f = failure_of([&] { tx.send(4, v3.views, 500); });
  CHECK(f.code == MLPT_UNAVAILABLE);
  CHECK(f.seconds < 0.5 + 1.5);
  CHECK_THAT(f.message, Catch::Contains("every receiver is gone") && Catch::Contains("engine-1") &&
                            Catch::Contains("engine-0"));
}

TEST_CASE("ucx: a corrupted bucket is caught by the checksum on both ends") {
  Loaded ucx("ucx");
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, tx_config(port, shared_memory, R"(, "bucket_bytes": 65536)"));
  auto prefix = dump_prefix("corrupt");
  // test_only_corrupt_bucket: the receiver flips a byte of bucket 3 after it lands, before checking.
  Child rx = receiver(rx_config(port, "engine-c", R"(, "test_only_corrupt_bucket": 3)"), 1, prefix);
  auto v = mixed_tensors(1);
  auto f = failure_of([&] { tx.send(1, v.views, 20000); });
  CHECK(f.code == MLPT_DATA_LOSS);
  CHECK_THAT(f.message, Catch::Contains("receiver 'engine-c'") && Catch::Contains("checksum mismatch in bucket 3"));
  auto line = rx.line(20000);
  REQUIRE(line);
  CHECK_THAT(*line, Catch::StartsWith("error 15 ") && Catch::Contains("checksum mismatch in bucket 3 of version 1") &&
                        Catch::Contains("model.layers.0.mlp.up_proj.weight"));
  CHECK(rx.wait(5000) == 2);
}

TEST_CASE("ucx: when the sender process dies the receiver gets MLPT_UNAVAILABLE") {
  Loaded ucx("ucx");
  int port = free_port();
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  Child sender({TRANSPORT_PEER_EXE, "send", tx_config(port, shared_memory), "20000", "-1", "1"});
  Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, rx_config(port, "survivor"));
  Received r = rx.receive(1, 20000);
  REQUIRE(r.version == 1);
  auto expected = mixed_tensors(1);
  REQUIRE(r.count == expected.names.size());
  for (size_t i = 0; i < r.count; ++i)
    CHECK(std::memcmp(r.tensors[i].tensor.data, expected.bytes[i].data(), expected.bytes[i].size()) == 0);
  rx.release(1);
  CHECK(sender.line(20000) == "sent 1");
  sender.signal(SIGKILL);
  auto f = failure_of([&] { rx.receive(2, 15000); });
  CHECK(f.code == MLPT_UNAVAILABLE);
  CHECK_THAT(f.message, Catch::Contains(address(port)));
  CHECK(f.seconds < 15.0);  // noticed the death, did not just run out the clock
}

TEST_CASE("ucx: no sender at the address, bad configs and device memory are refused plainly") {
  Loaded ucx("ucx");
  int port = free_port();
  Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, R"({"address": ")" + address(port) + R"(", "timeout_ms": 300})");
  auto f = failure_of([&] { rx.receive(1, 10000); });
  CHECK(f.code == MLPT_UNAVAILABLE);
  CHECK_THAT(f.message, Catch::Contains("no sender reachable at " + address(port)));
  f = failure_of([&] { Endpoint e(ucx, MLPT_TRANSPORT_SENDER, R"({"adress": "127.0.0.1:1"})"); });
  CHECK(f.code == MLPT_INVALID_ARGUMENT);
  CHECK_THAT(f.message, Catch::Contains("unknown key 'adress'"));
  f = failure_of([&] { Endpoint e(ucx, MLPT_TRANSPORT_SENDER, R"({"address": "127.0.0.1"})"); });
  CHECK_THAT(f.message, Catch::Contains("is not \"host:port\""));
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"address": ")" + address(free_port()) + R"("})");
  auto v = mixed_tensors(1);
  v.views[0].tensor.device = {kDLCUDA, 0};
  f = failure_of([&] { tx.send(1, v.views, 100); });
  CHECK(f.code == MLPT_UNIMPLEMENTED);
  CHECK_THAT(f.message, Catch::Contains("use the nccl transport"));
}

TEST_CASE("ucx: a sparse refit (only the changed BF16 elements) rebuilds the new weights bit for bit") {
  // Three tensors whose updates take the three forms: 0.5% changed (indices), 30% (bitmap), all (dense).
  struct Update {
    std::string name;
    std::vector<uint16_t> prev, next;
  };
  std::vector<Update> updates;
  uint64_t x = 12345;
  auto rnd = [&] { x ^= x << 13, x ^= x >> 7, x ^= x << 17; return x; };
  const std::vector<std::tuple<std::string, int64_t, int>> shapes = {
      {"layers.0.mlp.experts.gate_up_proj", 300001, 200}, {"layers.0.linear_attn.in_proj_qkv.weight", 40000, 3},
      {"layers.0.input_layernorm.weight", 1000, 1}};
  for (const auto& [name, n, every] : shapes) {
    Update u{name, std::vector<uint16_t>(static_cast<size_t>(n)), {}};
    for (auto& v : u.prev) v = static_cast<uint16_t>(rnd());
    u.next = u.prev;
    for (int64_t i = 0; i < n; ++i)
      if (rnd() % static_cast<uint64_t>(every) == 0) u.next[i] ^= static_cast<uint16_t>(1 + rnd() % 0xffff);
    u.next[0] = u.prev[0] ^ 0x8000;  // +0 / -0 style sign flips count as changes
    updates.push_back(std::move(u));
  }
  TensorSet wire;
  std::vector<mlpt::sparse_refit::DeltaStats> stats;
  for (auto& u : updates) {
    std::vector<std::byte> blob;
    stats.push_back(mlpt::sparse_refit::encode_bf16_delta(u.prev.data(), u.next.data(), static_cast<int64_t>(u.prev.size()), blob));
    wire.add(u.name, {kDLUInt, 8, 1}, {static_cast<int64_t>(blob.size())});
    wire.bytes.emplace_back(reinterpret_cast<const uint8_t*>(blob.data()), reinterpret_cast<const uint8_t*>(blob.data()) + blob.size());
  }
  std::vector<std::vector<uint8_t>> blobs = wire.bytes;
  wire.fill(0);  // builds the views (and overwrites the bytes with noise) ...
  wire.bytes = blobs;  // ... so put the encodings back and point the views at them
  for (size_t i = 0; i < blobs.size(); ++i) wire.views[i].tensor.data = wire.bytes[i].data();
  CHECK(stats[0].form == mlpt::sparse_refit::DeltaForm::indices);
  CHECK(stats[1].form == mlpt::sparse_refit::DeltaForm::bitmap);
  CHECK(stats[2].form == mlpt::sparse_refit::DeltaForm::dense);
  CHECK(stats[0].bytes < updates[0].prev.size() * 2 / 20);  // 0.5% changed: well under a tenth of dense

  Loaded ucx("ucx");
  int port = free_port();
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"address": ")" + address(port) + R"(", "bucket_bytes": 65536})");
  auto prefix = dump_prefix("sparse");
  Child rx = receiver(rx_config(port, "engine-0"), 1, prefix);
  tx.send(1, wire.views, 20000);
  CHECK(rx.wait(20000) == 0);
  std::string why;
  std::vector<DumpedTensor> got = read_dump(prefix + ".1.bin", why);
  REQUIRE(why == "");
  REQUIRE(got.size() == updates.size());
  for (size_t i = 0; i < updates.size(); ++i) {
    INFO(updates[i].name);
    std::vector<uint16_t> engine = updates[i].prev;  // what the engine held before the refit
    mlpt::sparse_refit::apply_bf16_delta(reinterpret_cast<const std::byte*>(got[i].bytes.data()), got[i].bytes.size(), engine.data(),
                                  static_cast<int64_t>(engine.size()), got[i].name);
    CHECK(engine == updates[i].next);
  }
}

TEST_CASE("ucx: the run's sparse refit messages (full, then deltas) cross processes and rebuild every version bit for bit") {
  // Mixed dtypes, empty and scalar tensors; each version changes a few bytes of every tensor.
  TensorSet w = mixed_tensors(5);
  std::vector<std::vector<std::vector<uint8_t>>> versions;
  mlpt::sparse_refit::RefitSender sender;
  Loaded ucx("ucx");
  int port = free_port();
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"address": ")" + address(port) + R"(", "bucket_bytes": 65536})");
  auto prefix = dump_prefix("refit");
  const int count = 4;
  Child rx = receiver(rx_config(port, "engine-0"), count, prefix);
  std::vector<uint64_t> bytes;
  for (uint64_t v = 1; v <= count; ++v) {
    for (auto& b : w.bytes)
      for (size_t i = v; v > 1 && i < b.size(); i += 997) b[i] ^= 0x21;
    versions.push_back(w.bytes);
    const auto& msg = sender.prepare(v, w.views.data(), w.views.size());
    bytes.push_back(sender.stats().bytes);
    CHECK(sender.stats().full == (v == 1));
    tx.send(v, msg, 20000);
    CHECK(rx.line(20000) == "received " + std::to_string(v));
  }
  CHECK(rx.wait(20000) == 0);
  CHECK(bytes[1] < bytes[0] / 10);  // about one byte in a thousand changed
  // The engine's side of the run, fed with what crossed the process boundary.
  mlpt::sparse_refit::RefitReceiver engine;
  for (uint64_t v = 1; v <= count; ++v) {
    INFO("version " << v);
    std::string why;
    std::vector<DumpedTensor> got = read_dump(prefix + "." + std::to_string(v) + ".bin", why);
    REQUIRE(why == "");
    TensorSet received;
    for (const auto& t : got) received.add(t.name, t.dtype, t.shape);
    received.fill(0);
    for (size_t i = 0; i < got.size(); ++i) {
      received.bytes[i] = got[i].bytes;
      received.views[i].tensor.data = received.bytes[i].data();
    }
    const auto& rebuilt = engine.apply(v, received.views.data(), received.views.size());
    REQUIRE(rebuilt.size() == w.names.size());
    for (size_t i = 0; i < rebuilt.size(); ++i) {
      INFO(w.names[i]);
      const auto& expect = versions[v - 1][i];
      CHECK(std::memcmp(rebuilt[i].tensor.data, expect.data(), expect.size()) == 0);
    }
  }
}

TEST_CASE("ucx: without an address, sender and receiver meet through the host's key-value store") {
  Loaded ucx("ucx");
  // The sender listens on a port the system picks and publishes where it listens.
  Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"bucket_bytes": 65536})", "kv");
  std::string published = ucx.host->rendezvous().get("transport.ucx/kv/address", 0, std::atomic<bool>{false});
  auto colon = published.rfind(':');
  REQUIRE(colon != std::string::npos);
  CHECK(std::stoi(published.substr(colon + 1)) > 0);
  // The receiver finds it there: no address in its config.
  Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, R"({"timeout_ms": 20000, "name": "kv-engine"})", "kv");
  auto v1 = mixed_tensors(1);
  std::string send_error;
  std::thread sender([&] {
    try {
      tx.send(1, v1.views, 20000);
    } catch (const std::exception& e) {
      send_error = e.what();
    }
  });
  auto got = rx.receive(1, 20000);
  sender.join();
  CHECK(send_error == "");
  CHECK(got.version == 1);
  REQUIRE(got.count == v1.views.size());
  for (size_t i = 0; i < got.count; ++i) {
    INFO(v1.names[i]);
    CHECK(std::string(got.tensors[i].name.data, got.tensors[i].name.size) == v1.names[i]);
    CHECK(std::memcmp(static_cast<const uint8_t*>(got.tensors[i].tensor.data) + got.tensors[i].tensor.byte_offset,
                      v1.bytes[i].data(), v1.bytes[i].size()) == 0);
  }
  rx.release(1);

  // A receiver of a group no sender published to waits its timeout and names the key.
  auto f = failure_of([&] { Endpoint lost(ucx, MLPT_TRANSPORT_RECEIVER, R"({"timeout_ms": 100})", "nobody"); });
  CHECK(f.code == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(f.message, Catch::Contains("transport.ucx/nobody/senders"));
}

TEST_CASE("ucx sender ranks: a receiver that dies is dropped by both ranks, the other gets each version whole from their row shards") {
  Loaded ucx("ucx");
  const int port = free_ports(2);  // rank 0 listens there, rank 1 at port + 1
  const std::string group_name = "trainer";
  const mlpt_component_group g0{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, 0, 2};
  const mlpt_component_group g1{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, 1, 2};
  const bool shared_memory = GENERATE(true, false);
  INFO("shared_memory " << shared_memory);
  const std::string config = tx_config(port, shared_memory, R"(, "receivers": 2, "bucket_bytes": 65536)");
  Endpoint tx0(ucx, MLPT_TRANSPORT_SENDER, config, "g", &g0), tx1(ucx, MLPT_TRANSPORT_SENDER, config, "g", &g1);
  auto p0 = dump_prefix("ranks-survivor"), p1 = dump_prefix("ranks-doomed");
  // No wanted layout: every tensor whole, assembled from both ranks' rows, in the ranks' order.
  Child survivor = receiver(rx_config(port, "engine-0", R"(, "senders": 2)"), 2, p0);
  Child doomed = receiver(rx_config(port, "engine-1", R"(, "senders": 2, "test_only_exit_after_buckets": 3)"), 2, p1);
  // Both ranks send each version at once, each its own rows, as trainer ranks would.
  auto send_both = [&](uint64_t v, const TensorSet& whole) {
    ShardSet rows0 = cut(whole, row_boxes(whole, 0, 2)), rows1 = cut(whole, row_boxes(whole, 1, 2));
    Failure f1;
    std::thread rank1([&] { f1 = failure_of([&] { tx1.send(v, rows1.views, 20000, rows1.shards.data()); }); });
    Failure f0 = failure_of([&] { tx0.send(v, rows0.views, 20000, rows0.shards.data()); });
    rank1.join();
    INFO("rank 0: " << f0.message << "; rank 1: " << f1.message);
    CHECK(f0.code == MLPT_OK);
    CHECK(f1.code == MLPT_OK);
    CHECK(std::max(f0.seconds, f1.seconds) < 15.0);  // noticed the death, did not run out the clock
  };
  const TensorSet v1 = whole_tensors(1), v2 = whole_tensors(2);
  send_both(1, v1);
  CHECK(doomed.wait(20000) == 77);  // died after 3 buckets, midway
  CHECK(survivor.line(20000) == "received 1");  // taken before v2 comes (it would take the newest)
  send_both(2, v2);
  CHECK(survivor.line(20000) == "received 2");
  CHECK(survivor.wait(20000) == 0);
  CHECK(compare_dump(p0 + ".1.bin", v1) == "");
  CHECK(compare_dump(p0 + ".2.bin", v2) == "");
}
