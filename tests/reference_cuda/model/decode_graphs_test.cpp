// Recorded decode steps' host rules (device_model/graph_buckets.hpp: buckets, table widths, when a
// recording is valid) and the runner (device_model/decode_graphs.hpp) on the CPU's bf16 emulation,
// which cannot record: its staging, padding and invalidation rule against generate_step, bit for
// bit. The GPU runs the same checks recorded (tests/reference_cuda/backends/cuda).
#include <catch2/catch.hpp>
#include <string>

#include "backends/cpu/bf16_ops.hpp"
#include "decode_graph_checks.hpp"
#include "device_model/backend_options.hpp"
#include "device_model/graph_buckets.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/settings.hpp"

using namespace model_testing;
namespace dev = mlpt::ref::dev;

TEST_CASE("decode graphs: cuda_graphs is off unless set, decode by the setting or MLPT_CUDA_GRAPHS") {
  auto read = [](const std::string& json) {
    mlpt::sdk::Settings s(json, "engine qwen35_cuda");
    return mlpt::ref::read_backend_options(s);
  };
  using mlpt::ref::DecodeGraphMode;
  CHECK(read("{}").graphs == DecodeGraphMode::off);
  CHECK(read(R"({"cuda_graphs": "decode"})").graphs == DecodeGraphMode::decode);
  CHECK(read(R"({"cuda_graphs": "off"})").graphs == DecodeGraphMode::off);
  for (DecodeGraphMode g : {DecodeGraphMode::off, DecodeGraphMode::decode})
    CHECK(mlpt::ref::parse_decode_graphs(mlpt::ref::to_string(g), "x") == g);
  std::string e;
  try {
    read(R"({"cuda_graphs": "always"})");
  } catch (const std::exception& x) {
    e = x.what();
  }
  CHECK_THAT(e, Catch::Contains("engine qwen35_cuda") && Catch::Contains("cuda_graphs") &&
                    Catch::Contains("always") && Catch::Contains("\"decode\""));
  mlpt::ref::BackendOptions o;
  CHECK(mlpt::ref::with_overrides(o, nullptr, nullptr, nullptr, "decode").graphs == DecodeGraphMode::decode);
  o.graphs = DecodeGraphMode::decode;
  CHECK(mlpt::ref::with_overrides(o, nullptr, nullptr, nullptr, "").graphs == DecodeGraphMode::decode);
  CHECK(mlpt::ref::with_overrides(o, nullptr, nullptr, nullptr, "off").graphs == DecodeGraphMode::off);
  // Not yet with cuDNN's attention, whose buffers the recordings' key does not hold.
  o.attention = mlpt::ref::AttentionLibrary::cudnn;
  CHECK_THROWS_WITH(mlpt::ref::check_combination(o, "engine qwen35_cuda"),
                    Catch::Contains("engine qwen35_cuda") && Catch::Contains("cuda_attention"));
  o.graphs = DecodeGraphMode::off;
  CHECK_NOTHROW(mlpt::ref::check_combination(o, "engine qwen35_cuda"));
  o.graphs = DecodeGraphMode::decode;
  o.attention = mlpt::ref::AttentionLibrary::kernel;
  CHECK_NOTHROW(mlpt::ref::check_combination(o, "engine qwen35_cuda"));
  CHECK_THROWS_WITH(mlpt::ref::with_overrides(o, nullptr, nullptr, nullptr, "on"),
                    Catch::Contains("MLPT_CUDA_GRAPHS") && Catch::Contains("\"off\", \"decode\""));
}

TEST_CASE("decode graphs: buckets are powers of two up to the largest batch, each batch in the smallest") {
  CHECK(dev::decode_buckets(1) == std::vector<int64_t>{1});
  CHECK(dev::decode_buckets(32) == std::vector<int64_t>{1, 2, 4, 8, 16, 32});
  CHECK(dev::decode_buckets(20) == std::vector<int64_t>{1, 2, 4, 8, 16, 32});
  const auto b = dev::decode_buckets(128);
  for (int64_t n = 1; n <= 128; ++n) {
    const int64_t got = dev::choose_bucket(b, n);
    INFO("batch " << n);
    CHECK(got >= n);
    CHECK(got < 2 * n);  // the smallest power of two that holds it
    CHECK((got & (got - 1)) == 0);
  }
  CHECK(dev::choose_bucket(b, 129) == 0);
  CHECK(dev::choose_bucket(b, 0) == 0);
  CHECK_THROWS_AS(dev::decode_buckets(0), mlpt::sdk::Error);
  CHECK_THROWS_AS(dev::decode_buckets(5000), mlpt::sdk::Error);
}

TEST_CASE("decode graphs: the block table widens by powers of two") {
  CHECK(dev::table_width(0) == 1);
  CHECK(dev::table_width(1) == 1);
  CHECK(dev::table_width(3) == 4);
  CHECK(dev::table_width(4) == 4);
  CHECK(dev::table_width(5) == 8);
  int64_t changes = 0;
  for (int64_t blocks = 1, last = 0; blocks <= 1024; ++blocks) {
    changes += dev::table_width(blocks) != last;
    last = dev::table_width(blocks);
  }
  CHECK(changes == 11);  // 1, 2, 4, ..., 1024: a sequence growing to 1024 blocks re-records 10 times
}

TEST_CASE("decode graphs: a recording is valid exactly while every address it baked in is unchanged") {
  int a = 0, b = 0, c = 0;
  const dev::RecordingKey made{{&a, &b}, 8, 300};
  CHECK(made == dev::RecordingKey{{&a, &b}, 8, 300});            // weights written in place: same addresses
  CHECK_FALSE(made == dev::RecordingKey{{&a, &c}, 8, 300});      // one tensor reallocated
  CHECK_FALSE(made == dev::RecordingKey{{&a, &b, &c}, 8, 300});  // more buffers (another layout)
  CHECK_FALSE(made == dev::RecordingKey{{&a, &b}, 16, 300});     // a wider block table
  CHECK_FALSE(made == dev::RecordingKey{{&a, &b}, 8, 299});      // another vocabulary bound
}

TEST_CASE("decode graphs: a step the runner cannot take is refused with the reason") {
  mlpt::ref::cpu::Bf16Ops ops;
  const ModelConfig c = small_config();
  dev::KvBlockPool pool(ops, c, 8, 8);
  dev::DecodeGraphs graphs(ops, c, pool, 4);
  CHECK(graphs.buckets() == std::vector<int64_t>{1, 2, 4});
  CHECK(pool.free_blocks() == 7);  // the pad sequence's block
  dev::DeviceSequenceState st(ops, c);
  dev::DeviceBatch b;
  b.tokens = {1, 2};
  b.offsets = {0, 2};
  b.states = {&st};
  b.kv = &pool.cache();
  CHECK_THAT(graphs.refusal(b), Catch::Contains("segment 0 has 2 tokens"));
  b.tokens = {1};
  b.offsets = {0, 1};
  CHECK(graphs.refusal(b).empty());
  b.kv = nullptr;
  CHECK_THAT(graphs.refusal(b), Catch::Contains("no KV cache"));
  b.kv = &pool.cache();
  b.states = {nullptr};
  CHECK_THAT(graphs.refusal(b), Catch::Contains("without its sequence state"));
  dev::DeviceBatch five;
  five.kv = &pool.cache();
  for (int i = 0; i < 5; ++i)
    five.tokens.push_back(1), five.offsets.push_back(i + 1), five.states.push_back(&st);
  CHECK_THAT(graphs.refusal(five), Catch::Contains("5 sequences (buckets hold 1 to 4)"));
  CHECK_THROWS_WITH(graphs.step(dev::DeviceWeights{}, five, {}, c.vocab_size),
                    Catch::Contains("decode graphs: cannot run 5 sequences"));
  CHECK_THROWS_AS(dev::DecodeGraphs(ops, c, pool, 256), mlpt::sdk::Error);
}

TEST_CASE("decode graphs (CPU, unrecorded): staged and padded steps equal generate_step bit for bit") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_recorded_decode_equals_eager(ops);
}

TEST_CASE("decode graphs (CPU, unrecorded): a batch that does not fill its bucket") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_partial_bucket(ops);
}

TEST_CASE("decode graphs (CPU, unrecorded): new sessions after a refit in place and into new buffers") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_decode_after_refit(ops);
}
