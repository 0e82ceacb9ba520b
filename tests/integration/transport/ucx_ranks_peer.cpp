// One process of the UCX sender-ranks tests, started by mpirun (ucx_ranks_test.cpp): the first two
// ranks are the sender ranks of one trainer group, the others receivers; they meet through the MPI
// key-value store, as `mlpt run`'s processes do.
//   ucx_ranks_peer reshard OUT_DIR      2 sender ranks (row shards) send versions 1 and 2; ranks
//                                       2..4 receive them as column shards, rank 5 whole; each
//                                       receiver dumps what it got to OUT_DIR/rank<r>.v<v>.bin
//   ucx_ranks_peer mismatch PORT OUT_DIR  (5 ranks) the senders' rows leave a row out: receivers
//                                       get the error naming tensor and box; then a receiver that
//                                       expects 3 sender ranks (an address and "senders": 3) meets
//                                       a group of 2
// Each rank writes OUT_DIR/rank<r>.json with what it saw (errors with code and message).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/dist/mpi/rendezvous.hpp"
#include "core/dist/mpi/session.hpp"
#include "core/error.hpp"
#include "sharded_tensors.hpp"

using namespace transport_test;
using nlohmann::json;

namespace {

constexpr int kSenders = 2;

uint64_t dump_bytes(const mlpt_named_tensor* tensors, size_t count) {
  uint64_t n = 0;
  for (size_t i = 0; i < count; ++i) n += mlpt::sdk::nbytes(tensors[i].tensor);
  return n;
}

json failure(const mlpt::Error& e) { return {{"code", static_cast<int>(e.code())}, {"message", e.what()}}; }

// Between the versions every rank meets at a barrier, so that each receiver sees both (a receive
// returns the newest version: without it a fast sender's version 2 may be the first one seen).
json reshard(Loaded& ucx, mlpt::plugin::Rendezvous& rendezvous, int rank, const std::string& out) {
  const std::string group_name = "trainer";
  if (rank < kSenders) {
    const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, rank, kSenders};
    Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"receivers": 4, "bucket_bytes": 65536})", "rows", &group);
    json sent = json::array();
    std::vector<ShardSet> keep;  // each version stays valid until the next send (here: until the end)
    for (uint64_t v : {1, 2}) {
      TensorSet whole = whole_tensors(v);
      keep.push_back(cut(whole, row_boxes(whole, rank, kSenders)));
      tx.send(v, keep.back().views, 60000, keep.back().shards.data());
      sent.push_back(v);
      rendezvous.barrier("received " + std::to_string(v), 60000, std::atomic<bool>{false});
    }
    return {{"role", "sender"}, {"sent", sent}};
  }
  // What the SDK reports of each receive: bytes it cut into the layout after the transport, bytes
  // handed over as the transport returned them.
  auto cut = std::make_shared<std::map<std::string, double>>();
  ucx.host->set_metric_sink([cut](const std::string& name, double value) { (*cut)[name] += value; });
  Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, R"({"timeout_ms": 60000, "name": "engine-)" + std::to_string(rank) + "\"}", "rows");
  const bool whole = rank == kSenders + 3;
  WantedColumns want(rank - kSenders, 3);
  json got = json::array();
  for (uint64_t v : {1, 2}) {
    Received r = whole ? rx.receive(v, 60000) : rx.receive(v, 60000, want.tensors, want.shards.data());
    write_dump(out + "/rank" + std::to_string(rank) + ".v" + std::to_string(r.version) + ".bin", r.tensors, r.count);
    got.push_back({{"version", r.version},
                   {"shards", r.shards != nullptr},
                   {"bytes", dump_bytes(r.tensors, r.count)},
                   {"cut", (*cut)["transport/receive_bytes_cut"]},
                   {"handed_over", (*cut)["transport/receive_bytes_handed_over"]},
                   {"in_place", (*cut)["transport/receive_bytes_landed_in_place"]},
                   {"copied_in", (*cut)["transport/receive_bytes_copied_in"]}});
    cut->clear();
    rx.release(r.version);
    rendezvous.barrier("received " + std::to_string(v), 60000, std::atomic<bool>{false});
  }
  return {{"role", whole ? "whole receiver" : "column receiver"}, {"received", got}};
}

json mismatch(Loaded& ucx, mlpt::plugin::Rendezvous& rendezvous, int rank, int port) {
  json out;
  const std::string group_name = "trainer";
  const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, rank, kSenders};
  WantedColumns want(rank - kSenders, 3);
  // 1. Rank 1's rows of the q_proj stop one row short: the last row is on no rank.
  if (rank < kSenders) {
    Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"receivers": 3})", "gap", &group);
    TensorSet whole = whole_tensors(1);
    auto boxes = row_boxes(whole, rank, kSenders);
    const auto q_proj = std::find(whole.names.begin(), whole.names.end(), "layers.0.self_attn.q_proj.weight") - whole.names.begin();
    if (rank == 1) boxes[static_cast<size_t>(q_proj)].extent[0] -= 1;
    ShardSet shards = cut(whole, boxes);
    try {
      tx.send(1, shards.views, 4000, shards.shards.data());
    } catch (const mlpt::Error& e) {
      out["gap"] = failure(e);
    }
    rendezvous.barrier("gap done", 60000, std::atomic<bool>{false});
  } else {
    Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, R"({"timeout_ms": 20000})", "gap");
    try {
      rx.receive(1, 20000, want.tensors, want.shards.data());
    } catch (const mlpt::Error& e) {
      out["gap"] = failure(e);
    }
    rendezvous.barrier("gap done", 60000, std::atomic<bool>{false});
  }
  // 2. Receivers told there are 3 sender ranks (rank r at PORT + r) meet a group of 2.
  const std::string address = "127.0.0.1:" + std::to_string(port);
  if (rank < kSenders) {
    Endpoint tx(ucx, MLPT_TRANSPORT_SENDER, R"({"receivers": 3, "address": ")" + address + "\"}", "sized", &group);
    TensorSet whole = whole_tensors(1);
    ShardSet shards = cut(whole, row_boxes(whole, rank, kSenders));
    try {
      tx.send(1, shards.views, 3000, shards.shards.data());
    } catch (const mlpt::Error& e) {
      out["sized"] = failure(e);
    }
  } else {
    try {
      Endpoint rx(ucx, MLPT_TRANSPORT_RECEIVER, R"({"timeout_ms": 3000, "senders": 3, "address": ")" + address + "\"}", "sized");
      rx.receive(1, 10000, want.tensors, want.shards.data());
    } catch (const mlpt::Error& e) {
      out["sized"] = failure(e);
    }
  }
  rendezvous.barrier("sized done", 60000, std::atomic<bool>{false});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  mlpt::dist::MpiSession mpi;
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string out_dir = argv[argc - 1];
  json out;
  try {
    Loaded ucx("ucx");
    ucx.host->set_rendezvous(std::make_unique<mlpt::dist::MpiRendezvous>(MLPT_PROCESS_ROLE_ALL));
    if (mode == "reshard" && argc == 3) out = reshard(ucx, ucx.host->rendezvous(), mpi.rank(), out_dir);
    else if (mode == "mismatch" && argc == 4) out = mismatch(ucx, ucx.host->rendezvous(), mpi.rank(), std::stoi(argv[2]));
    else throw mlpt::Error("usage: ucx_ranks_peer reshard OUT_DIR | mismatch PORT OUT_DIR");
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  std::ofstream(out_dir + "/rank" + std::to_string(mpi.rank()) + ".json") << out.dump(2) << "\n";
  return out.contains("error") ? 1 : 0;
}
