// safetensors I/O against an independent pure-Python reader/writer (safetensors_ref.py), sharded
// checkpoints, and every kind of lying or broken file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/safetensors.hpp"
#include "mlpt/sdk/error.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt::ref;
using mlpt_test::TempDir;
using nlohmann::json;

namespace {

json python_read(const std::string& file) {
  int status = 0;
  std::string out = mlpt_test::run_command(std::string(MLPT_PYTHON) + " " + MLPT_REFERENCE_TEST_DIR +
                                               "/safetensors_ref.py read " + file, &status);
  REQUIRE(status == 0);
  return json::parse(out);
}

// The header bytes of a hand-made file: 8-byte length, JSON, then `data`.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string open_error(const std::string& path, mlpt_error_code* code = nullptr) {
  try {
    SafetensorsFile f(path);
  } catch (const mlpt::sdk::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  FAIL("opening " << path << " should fail");
  return {};
}

}  // namespace

TEST_CASE("bf16 and f16 conversions round to nearest even and keep specials") {
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  CHECK(float_to_bf16(1.0f + 0x1.0p-8f) == float_to_bf16(1.0f));  // halfway: to even (down)
  CHECK(bf16_to_float(float_to_bf16(1.0f + 0x1.8p-8f)) == 1.0f + 0x1.0p-7f);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(f16_to_float(float_to_f16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  CHECK(f16_to_float(float_to_f16(0x1.0p-24f)) == 0x1.0p-24f);  // smallest subnormal
  CHECK(f16_to_float(float_to_f16(-0.333251953125f)) == -0.333251953125f);
  for (float v : {0.1f, -3.7f, 1e-5f, 1234.5f}) {
    CHECK(std::fabs(f16_to_float(float_to_f16(v)) - v) <= std::fabs(v) * 0x1.0p-11f + 0x1.0p-25f);
    CHECK(std::fabs(bf16_to_float(float_to_bf16(v)) - v) <= std::fabs(v) * 0x1.0p-8f);
  }
}

TEST_CASE("files written here read back identically in an independent Python reader") {
  TempDir dir("st_write");
  std::vector<float> a{1.5f, -2.25f, 3.0f, 0.1f, 1e-3f, -7.0f}, b{0.3f, -1e4f, 5.5f, 1e-3f}, c{0.1f, 2.0f};
  write_safetensors(dir / "t.safetensors", {{"a", {2, 3}, a.data(), Dtype::f32}, {"layer.b", {4}, b.data(), Dtype::bf16},
                                             {"c", {1, 2}, c.data(), Dtype::f16}});
  json py = python_read(dir / "t.safetensors");
  CHECK(py["a"]["dtype"] == "F32");
  CHECK(py["a"]["shape"] == json::array({2, 3}));
  for (size_t i = 0; i < a.size(); ++i) CHECK(py["a"]["values"][i].get<double>() == static_cast<double>(a[i]));
  CHECK(py["layer.b"]["dtype"] == "BF16");
  for (size_t i = 0; i < b.size(); ++i)
    CHECK(py["layer.b"]["values"][i].get<double>() == bf16_to_float(float_to_bf16(b[i])));
  CHECK(py["c"]["dtype"] == "F16");
  for (size_t i = 0; i < c.size(); ++i) CHECK(py["c"]["values"][i].get<double>() == f16_to_float(float_to_f16(c[i])));
  // The data section starts 8-byte aligned, and no temporary file is left behind.
  std::string bytes = mlpt_test::read_bytes(dir / "t.safetensors");
  uint64_t hl = 0;
  for (int i = 7; i >= 0; --i) hl = hl << 8 | static_cast<unsigned char>(bytes[i]);
  CHECK((8 + hl) % 8 == 0);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.str())) files += e.is_regular_file();
  CHECK(files == 1);
  // Our own reader agrees too.
  SafetensorsFile f(dir / "t.safetensors");
  CHECK(f.tensors().size() == 3);
  CHECK(f.metadata().empty());
}

TEST_CASE("files written by the Python writer read here, in all three dtypes") {
  TempDir dir("st_py");
  int status = 0;
  mlpt_test::run_command(std::string(MLPT_PYTHON) + " " + MLPT_REFERENCE_TEST_DIR + "/safetensors_ref.py write " +
                             (dir / "model.safetensors"), &status);
  REQUIRE(status == 0);
  SafetensorsCheckpoint ck(dir.str());
  CHECK(ck.names() == std::vector<std::string>{"a.f32", "b.bf16", "c.f16"});
  std::vector<float> a(6), b(4), c(4);
  ck.read<float>("a.f32", {2, 3}, a.data());
  CHECK(a == std::vector<float>{1.5f, -2.25f, 3.0f, 0.1f, 1e-3f, -7.0f});
  ck.read<float>("b.bf16", {4}, b.data());
  CHECK(b == std::vector<float>{1.0f, -0.5f, 3.140625f, 256.0f});
  std::vector<double> cd(4);
  ck.read<double>("c.f16", {1, 2, 2}, cd.data());
  CHECK(cd == std::vector<double>{0.5, -1.25, 65504.0, 6.103515625e-05});
}

TEST_CASE("sharded checkpoints: index plus shards, read across shards") {
  TempDir dir("st_shard");
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 5; ++i) values.push_back(std::vector<float>(100, static_cast<float>(i) + 0.5f));
  for (int i = 0; i < 5; ++i) tensors.push_back({"t" + std::to_string(i), {10, 10}, values[i].data(), Dtype::f32});
  write_checkpoint(dir.str(), tensors, 900);  // 400 bytes each: two per shard
  CHECK(std::filesystem::exists(dir / "model.safetensors.index.json"));
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  json index = json::parse(mlpt_test::read_bytes(dir / "model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 2000);
  CHECK(index["weight_map"]["t4"] == "model-00003-of-00003.safetensors");
  json shard = python_read(dir / "model-00002-of-00003.safetensors");
  CHECK(shard.size() == 2);
  CHECK(shard["t3"]["values"][99] == 3.5);
  SafetensorsCheckpoint ck(dir.str());
  std::vector<float> out(100);
  ck.read<float>("t4", {10, 10}, out.data());
  CHECK(out == values[4]);
  // Rewriting unsharded replaces the index (a stale index must not shadow the new file).
  write_checkpoint(dir.str(), tensors, 0);
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  CHECK(SafetensorsCheckpoint(dir.str()).names().size() == 5);
}

TEST_CASE("missing tensors, wrong shapes and unsupported dtypes are named") {
  TempDir dir("st_errors");
  std::vector<float> v(6, 1.0f);
  write_checkpoint(dir.str(), {{"w", {2, 3}, v.data(), Dtype::bf16}});
  SafetensorsCheckpoint ck(dir.str());
  std::vector<float> out(6);
  try {
    ck.read<float>("nope", {2, 3}, out.data());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_NOT_FOUND);
    CHECK_THAT(e.what(), Catch::Contains("no tensor 'nope'"));
  }
  try {
    ck.read<float>("w", {3, 2}, out.data());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("tensor 'w' has shape [2, 3], the model config needs [3, 2]"));
  }
  mlpt_test::write_bytes(dir / "c64.safetensors", make_file(R"({"x":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", std::string(16, 'a')));
  CHECK_THAT(open_error(dir / "c64.safetensors"), Catch::Contains("tensor 'x': unsupported dtype 'C64'"));
  try {
    SafetensorsCheckpoint(dir / "missing-dir");
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_NOT_FOUND);
  }
}

TEST_CASE("lying or truncated headers are refused before any byte is trusted") {
  TempDir dir("st_lies");
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& expect) {
    mlpt_test::write_bytes(dir / name, bytes);
    mlpt_error_code code{};
    std::string msg = open_error(dir / name, &code);
    INFO(name << ": " << msg);
    CHECK_THAT(msg, Catch::Contains(expect));
    CHECK_THAT(msg, Catch::Contains(name));
  };
  const std::string ok = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  check("short.safetensors", "abc", "no header length");
  check("len.safetensors", make_file(ok, std::string(8, '\0')).substr(0, 20), "runs past the end of the file");
  check("json.safetensors", make_file(R"({"x": {"dtype": )", ""), "not valid JSON");
  check("range.safetensors", make_file(ok, std::string(4, '\0')), "out of range");  // truncated data
  check("size.safetensors", make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
        "do not hold F32 [3]");
  check("overlap.safetensors",
        make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  std::string(12, '\0')),
        "overlap");
  check("neg.safetensors", make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
        "negative dimension");
  check("fields.safetensors", make_file(R"({"x":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
        "needs dtype, shape and data_offsets");
  check("reversed.safetensors", make_file(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')),
        "out of range");

  // An index that names a shard without the tensor, or a missing shard.
  TempDir ck("st_index");
  std::vector<float> v(2, 1.0f);
  write_safetensors(ck / "a.safetensors", {{"x", {2}, v.data(), Dtype::f32}});
  mlpt_test::write_bytes(ck / "model.safetensors.index.json", R"({"weight_map": {"y": "a.safetensors"}})");
  try {
    SafetensorsCheckpoint c(ck.str());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("lists 'y' in a.safetensors, which does not hold it"));
  }
  mlpt_test::write_bytes(ck / "model.safetensors.index.json", R"({"weight_map": {"x": "b.safetensors"}})");
  try {
    SafetensorsCheckpoint c(ck.str());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("b.safetensors"));
  }
}
