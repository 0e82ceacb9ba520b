// TensorBoard event files: the CRC-32C against the published check values and a bitwise
// reference, and the writer's files read back by a reader written from the format's description
// (tfevents_reader.hpp), which also catches a corrupted byte.
#include <catch2/catch.hpp>
#include <chrono>
#include <random>

#include "core/observe/crc32c.hpp"
#include "core/observe/tfevents_writer.hpp"
#include "tests/integration/observe/tfevents_reader.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt;
namespace fs = std::filesystem;

namespace {

fs::path only_events_file(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(folder)) files.push_back(f.path());
  REQUIRE(files.size() == 1);
  return files.front();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("crc32c gives the published check values (RFC 3720 B.4) and the bitwise CRC on random bytes",
          "[observe]") {
  const std::string digits = "123456789";
  CHECK(observe::crc32c(digits.data(), digits.size()) == 0xE3069283u);
  std::vector<unsigned char> bytes(32, 0x00);
  CHECK(observe::crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  CHECK(observe::crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
  CHECK(observe::crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);

  std::mt19937 rng(3);
  for (int n : {0, 1, 7, 64, 1000, 4099}) {
    std::vector<unsigned char> data(static_cast<size_t>(n));
    for (auto& b : data) b = static_cast<unsigned char>(rng());
    const uint32_t whole = observe::crc32c(data.data(), data.size());
    CHECK(whole == tfevents_spec::crc32c_bitwise(data.data(), data.size()));
    const size_t half = data.size() / 2;  // continuing a CRC gives the CRC of the whole
    CHECK(observe::crc32c(data.data() + half, data.size() - half, observe::crc32c(data.data(), half)) ==
          whole);
    CHECK(observe::masked_crc32c(whole) == tfevents_spec::mask(whole));
  }
}

TEST_CASE("tfevents: every scalar written is read back by a reader from the format's spec", "[observe]") {
  mlpt_test::TempDir dir("tfevents");
  const double before = unix_now();
  fs::path file;
  {
    observe::TfEventsWriter writer(dir.str());
    file = writer.file();
    writer.scalars(1, {{"train/reward_mean", 0.25}, {"trainer/loss", -1.5e-4}});
    writer.scalars(2, {{"train/reward_mean", 0.5}, {"trainer/logprob_abs_diff_mean", 3.0e-7}});
    writer.scalars(1ll << 40, {{"eval/pass_at_k", 1.0}});
  }
  CHECK(file == only_events_file(dir.str()));
  CHECK(file.filename().string().rfind("events.out.tfevents.", 0) == 0);  // what TensorBoard globs for

  const auto events = tfevents_spec::read(file);
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].scalars.empty());
  for (const auto& e : events) CHECK((e.wall_time >= before - 1 && e.wall_time <= unix_now() + 1));
  CHECK(events[1].step == 1);
  REQUIRE(events[1].scalars.size() == 2);
  CHECK(events[1].scalars[0].first == "train/reward_mean");
  CHECK(events[1].scalars[0].second == 0.25f);
  CHECK(events[1].scalars[1].first == "trainer/loss");
  CHECK(events[1].scalars[1].second == static_cast<float>(-1.5e-4));
  CHECK(events[2].step == 2);
  CHECK(events[2].scalars[1].second == static_cast<float>(3.0e-7));
  CHECK(events[3].step == (1ll << 40));
  CHECK(events[3].scalars == std::vector<std::pair<std::string, float>>{{"eval/pass_at_k", 1.0f}});
}

TEST_CASE("tfevents: a corrupted byte fails the record's CRC", "[observe]") {
  mlpt_test::TempDir dir("tfevents_corrupt");
  fs::path file;
  {
    observe::TfEventsWriter writer(dir.str());
    file = writer.file();
    writer.scalars(3, {{"train/reward_mean", 0.75}});
  }
  REQUIRE(tfevents_spec::read(file).size() == 2);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-6, std::ios::end);  // inside the last record's data (the float's bytes)
  f.put('\x7f');
  f.close();
  CHECK_THROWS_WITH(tfevents_spec::read(file), Catch::Contains("record 1: data CRC mismatch"));
}
