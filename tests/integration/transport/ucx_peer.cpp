// The other process of the UCX transport tests (and nothing else): a receiver that dumps what it
// got, or a sender of the standard mixed tensor set. It loads the plugin through the core loader,
// as `mlpt` does, and reports on stdout one line per event:
//   transport_ucx_peer receive <config> <count> <timeout_ms> <dump_prefix>
//       receives <count> versions (each newer than the last), dumps each to <prefix>.<v>.bin and
//       prints "received <v>"; then "done". An error prints "error <code> <message>", exit 2.
//   transport_ucx_peer receive-columns <config> <last_version> <timeout_ms> <dump_prefix> <index> <count>
//       receives column shard <index> of <count> of whole_tensors (sharded_tensors.hpp) until it
//       holds <last_version>, dumping and printing each version it gets as "receive" does
//   transport_ucx_peer send <config> <timeout_ms> <linger_ms> <v>...
//       sends mixed_tensors(v) for each v, printing "sent <v>", then lingers (-1: until killed).
#include <cstdio>
#include <thread>

#include "sharded_tensors.hpp"
#include "transport_support.hpp"

using namespace transport_test;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s receive|send <config> ...\n", argv[0]);
    return 64;
  }
  std::string mode = argv[1], config = argv[2];
  try {
    Loaded ucx("ucx");
    if (mode == "receive" && argc == 6) {
      int count = std::stoi(argv[3]);
      int64_t timeout = std::stoll(argv[4]);
      std::string prefix = argv[5];
      Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, config);
      uint64_t next = 1;
      for (int i = 0; i < count; ++i) {
        Received r = rx.receive(next, timeout);
        write_dump(prefix + "." + std::to_string(r.version) + ".bin", r.tensors, r.count);
        rx.release(r.version);
        std::printf("received %llu\n", static_cast<unsigned long long>(r.version));
        std::fflush(stdout);
        next = r.version + 1;
      }
      std::printf("done\n");
      std::fflush(stdout);
      return 0;
    }
    if (mode == "receive-columns" && argc == 8) {
      const uint64_t last = std::stoull(argv[3]);
      const int64_t timeout = std::stoll(argv[4]);
      const std::string prefix = argv[5];
      WantedColumns want(std::stoll(argv[6]), std::stoll(argv[7]));
      Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, config);
      for (uint64_t next = 1; next <= last;) {
        Received r = rx.receive(next, timeout, want.tensors, want.shards.data());
        write_dump(prefix + "." + std::to_string(r.version) + ".bin", r.tensors, r.count);
        rx.release(r.version);
        std::printf("received %llu\n", static_cast<unsigned long long>(r.version));
        std::fflush(stdout);
        next = r.version + 1;
      }
      std::printf("done\n");
      std::fflush(stdout);
      return 0;
    }
    if (mode == "send" && argc >= 6) {
      int64_t timeout = std::stoll(argv[3]);
      int linger = std::stoi(argv[4]);
      Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, config);
      std::vector<TensorSet> keep;  // every version stays valid until the next send (and here: forever)
      for (int i = 5; i < argc; ++i) {
        uint64_t v = std::stoull(argv[i]);
        keep.push_back(mixed_tensors(v));
        tx.send(v, keep.back().views, timeout);
        std::printf("sent %llu\n", static_cast<unsigned long long>(v));
        std::fflush(stdout);
      }
      if (linger < 0) {
        for (;;) pause();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(linger));
      return 0;
    }
    std::fprintf(stderr, "bad arguments\n");
    return 64;
  } catch (const mlpt::Error& e) {
    std::printf("error %d %s\n", static_cast<int>(e.code()), e.what());
    std::fflush(stdout);
    return 2;
  }
}
