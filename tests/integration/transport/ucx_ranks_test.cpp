// UCX sender ranks across real processes: mpirun starts the two sender ranks of a trainer group and
// the receivers (ucx_ranks_peer); they meet through the MPI key-value store. Each receiver must get
// exactly its layout, bit for bit, cut from the whole tensors; bad layouts must fail naming what.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mpirun.hpp"
#include "sharded_tensors.hpp"

using namespace transport_test;
using nlohmann::json;

namespace {

std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("mlpt-ucx-ranks-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

json report(const std::string& dir, int rank) {
  std::ifstream in(dir + "/rank" + std::to_string(rank) + ".json");
  if (!in) return json{{"error", "no report from rank " + std::to_string(rank)}};
  return json::parse(in);
}

}  // namespace

TEST_CASE("ucx sender ranks: 2 ranks of row shards -> 3 receivers of column shards and 1 of whole tensors, bit for bit, two versions") {
  const std::string dir = fresh_dir("reshard");
  auto run = dist_test::mpirun(6, std::string(RANKS_PEER_EXE) + " reshard " + dir, 240);
  INFO(run.output);
  for (int r = 0; r < 6; ++r) {
    json rep = report(dir, r);
    INFO("rank " << r << ": " << rep.dump());
    CHECK_FALSE(rep.contains("error"));
  }
  REQUIRE(run.status == 0);
  for (uint64_t v : {1, 2}) {
    const TensorSet whole = whole_tensors(v);
    for (int j = 0; j < 3; ++j) {
      INFO("version " << v << ", column receiver " << j);
      CHECK(compare_dump(dir + "/rank" + std::to_string(2 + j) + ".v" + std::to_string(v) + ".bin",
                         expected_parts(whole, column_boxes(whole, j, 3))) == "");
    }
    INFO("version " << v << ", whole receiver");
    CHECK(compare_dump(dir + "/rank5.v" + std::to_string(v) + ".bin", whole) == "");
  }
  // Every version came to every receiver as the layout it asked for, landed in that layout by the
  // transport: the SDK handed it over as it was and cut nothing after it.
  for (int r = 2; r < 6; ++r) {
    json rep = report(dir, r);
    INFO("rank " << r << ": " << rep.dump());
    REQUIRE(rep["received"].size() == 2);
    CHECK(rep["received"][0]["version"] == 1);
    CHECK(rep["received"][1]["version"] == 2);
    CHECK(rep["received"][1]["shards"] == (r < 5));  // the whole receiver gets whole tensors
    for (const auto& got : rep["received"]) {
      CHECK(got["bytes"].get<double>() > 0);
      CHECK(got["cut"] == 0);
      // Whole tensors without shard descriptors need no handing over: the SDK does nothing then.
      CHECK(got["handed_over"] == (r < 5 ? got["bytes"].get<double>() : 0.0));
      // The transport received the large pieces (more than a 64 KiB bucket: up_proj's) straight into
      // the layout and copied the small ones, packed in buckets, in: every byte one way or the other.
      CHECK(got["in_place"].get<double>() >= (r < 5 ? 2 * 32 * 1000 * 4 : 64 * 3001 * 4));
      CHECK(got["copied_in"].get<double>() > 0);
      CHECK(got["in_place"].get<double>() + got["copied_in"].get<double>() == got["bytes"].get<double>());
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("ucx sender ranks: a row no rank holds and a sender group of the wrong size fail naming what") {
  const std::string dir = fresh_dir("mismatch");
  auto run = dist_test::mpirun(5, std::string(RANKS_PEER_EXE) + " mismatch " + std::to_string(free_ports(3)) + " " + dir, 240);
  INFO(run.output);
  for (int r = 0; r < 5; ++r) {
    json rep = report(dir, r);
    INFO("rank " << r << ": " << rep.dump());
    REQUIRE_FALSE(rep.contains("error"));
    REQUIRE(rep.contains("gap"));
    REQUIRE(rep.contains("sized"));
    const std::string gap = rep["gap"]["message"], sized = rep["sized"]["message"];
    if (r < 2) {
      // The senders wait for receivers that never asked for pieces, and say so.
      CHECK(rep["gap"]["code"] == MLPT_DEADLINE_EXCEEDED);
      CHECK_THAT(gap, Catch::Contains("never said which pieces it wants"));
      continue;
    }
    // Receiver j wants columns of q_proj [10, 1031]; row 9 is on no rank.
    const int j = r - 2;
    const auto box = split({10, 1031}, 1, 3, j);
    CHECK(rep["gap"]["code"] == MLPT_FAILED_PRECONDITION);
    CHECK_THAT(gap, Catch::Contains("'layers.0.self_attn.q_proj.weight'"));
    CHECK_THAT(gap, Catch::Contains("box offset [0, " + std::to_string(box.offset[1]) + "] shape [10, " +
                                                        std::to_string(box.extent[1]) + "]"));
    CHECK_THAT(gap, Catch::Contains("element [9, " + std::to_string(box.offset[1]) + "]"));
    CHECK(rep["sized"]["code"] == MLPT_UNAVAILABLE);
    // Whichever rank welcomes it first says it is one of 2.
    CHECK_THAT(sized, Catch::Contains("of a group of 2, but this receiver expected rank") && Catch::Contains("of 3 there"));
  }
  std::filesystem::remove_all(dir);
}
