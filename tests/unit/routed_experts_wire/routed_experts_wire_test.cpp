// Routed experts as vLLM puts them in a completion (`routed_experts`, base64 .npy of shape
// (positions, layers, top-k)): the HTTP engine's reader (plugins/engine_http) against arrays made
// outside mlpt (.npy format 1.0 written with Python's struct and base64), and against mlpt serve's
// writer.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include "core/serve/routed_experts_npy.hpp"
#include "routed_experts_npy.hpp"
#include "tests/support/test_util.hpp"

using mlpt::engine_http::routed_experts_from_npy_base64;

namespace {

// The .npy file of np.arange(12, dtype=np.uint8).reshape(3, 2, 2), base64-encoded.
const char kUint8[] =
    "k05VTVBZAQB2AHsnZGVzY3InOiAnfHUxJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDMsIDIsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg"
    "ICAgICAgICAgICAgICAgICAgICAgICAgIAoAAQIDBAUGBwgJCgs=";
// The .npy file of np.array([7, 1, 0, 15, 3, 3, 9, 2], dtype='<i4').reshape(2, 2, 2), likewise.
const char kInt32[] =
    "k05VTVBZAQB2AHsnZGVzY3InOiAnPGk0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDIsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg"
    "ICAgICAgICAgICAgICAgICAgICAgICAgIAoHAAAAAQAAAAAAAAAPAAAAAwAAAAMAAAAJAAAAAgAAAA==";

}  // namespace

TEST_CASE("routed experts from vLLM's base64 .npy: per layer [position][k], positions it left out are -1") {
  // (3 positions, 2 layers, top-2) holding 0..11; 4 positions asked for: the last one was never fed.
  auto got = routed_experts_from_npy_base64(kUint8, 4, 2, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0] == std::vector<int16_t>{0, 1, 4, 5, 8, 9, -1, -1});
  CHECK(got[1] == std::vector<int16_t>{2, 3, 6, 7, 10, 11, -1, -1});
  auto wide = routed_experts_from_npy_base64(kInt32, 2, 2, 2);
  CHECK(wide[0] == std::vector<int16_t>{7, 1, 3, 3});
  CHECK(wide[1] == std::vector<int16_t>{0, 15, 9, 2});
}

TEST_CASE("routed experts: what mlpt serve writes reads back exactly, -1 included") {
  const std::vector<int16_t> experts = {3, 7, 0, 15, 12, 1, 4, 4, -1, -1, -1, -1, 9, 2, 5, 6, 11, 0};  // 3 positions x 3 layers x 2
  const std::string text = mlpt::serve::routed_experts_npy_base64(experts, 3, 3, 2);
  const auto got = routed_experts_from_npy_base64(text, 3, 3, 2);
  for (size_t l = 0; l < 3; ++l)
    for (size_t p = 0; p < 3; ++p)
      for (size_t k = 0; k < 2; ++k) CHECK(got[l][p * 2 + k] == experts[(p * 3 + l) * 2 + k]);
}

TEST_CASE("routed experts that do not fit the model are refused, saying how") {
  CHECK_THAT(mlpt_test::error_of([] { routed_experts_from_npy_base64(kUint8, 4, 4, 2); }), Catch::Contains("shape (3, 2, 2)") && Catch::Contains("4 MoE layers"));
  CHECK_THAT(mlpt_test::error_of([] { routed_experts_from_npy_base64(kUint8, 2, 2, 2); }), Catch::Contains("3 positions, more than the 2"));
  CHECK_THAT(mlpt_test::error_of([] { routed_experts_from_npy_base64("not*base64", 1, 1, 1); }), Catch::Contains("not base64"));
  CHECK_THAT(mlpt_test::error_of([] { routed_experts_from_npy_base64("aGVsbG8gd29ybGQ=", 1, 1, 1); }), Catch::Contains("not a .npy array"));
}

namespace {

std::string base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += abc[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? abc[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// A .npy file (format 2.0: a 4-byte header length) with this header and `data` after it.
std::string npy_with_header(const std::string& header, const std::string& data = std::string(64, '\0')) {
  std::string f = "\x93NUMPY";
  f += '\x02';
  f += '\x00';
  for (int b = 0; b < 4; ++b) f += char((header.size() >> (8 * b)) & 0xff);
  return f + header + data;
}

std::string error_text(const std::string& npy) {
  try {
    routed_experts_from_npy_base64(base64(npy), 8, 2, 2);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The header is the server's bytes: the reader scans it in linear time (a backtracking regex
// overflowed its stack on long input). Checked against std::regex, the old definition, on short
// random headers from the format's own alphabet, and on megabyte and random-byte headers.
TEST_CASE("routed experts: hostile .npy headers are refused or read by a linear scan that agrees with the regex") {
  const std::regex descr_re("'descr':\\s*'([<|>]?)([uif])([1248])'");
  const std::regex shape_re("'shape':\\s*\\((\\d+),\\s*(\\d+),\\s*(\\d+),?\\)");
  const std::vector<std::string> tokens = {"'descr':", "'shape':", " ", "  ", "'", "<", ">", "|", "i", "u", "f", "1", "2",
                                           "4", "8", "(", ")", ",", "3", "x", "\n", "{", "}"};
  std::mt19937_64 rng(7);
  int readable = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string h;
    const int n = 4 + int(rng() % 28);
    for (int i = 0; i < n; ++i) h += tokens[rng() % tokens.size()];
    if (trial % 3 == 0) {  // near-valid: each part drawn from a few right and wrong choices
      auto pick = [&](std::initializer_list<const char*> c) { return std::string(c.begin()[rng() % c.size()]); };
      h = "{'descr':" + pick({"", " ", "\n "}) + "'" + pick({"", "<", ">", "|", "="}) + pick({"i", "u", "f", "b"}) +
          pick({"1", "2", "4", "8", "3"}) + "', 'shape':" + pick({"", " "}) + "(" + pick({"8", "3", "", "x"}) + "," +
          pick({"", " ", "  "}) + pick({"2", "4"}) + pick({",", ";"}) + pick({"", " "}) + pick({"2", ""}) +
          pick({"", ","}) + ")" + pick({"}", ", 'fortran_order': False}"});
    }
    const bool regex_reads = std::regex_search(h, descr_re) && std::regex_search(h, shape_re);
    const std::string error = error_text(npy_with_header(h));
    INFO("header [" << h << "]: " << error);
    CHECK(regex_reads == (error.find("is not a 3-d integer array") == std::string::npos));
    readable += regex_reads;
  }
  CHECK(readable > 0);
  // A megabyte of spaces inside the header, or of repeated keys, and random bytes: refused, quickly.
  CHECK_THAT(error_text(npy_with_header("{'descr':" + std::string(1 << 20, ' ') + "x}")), Catch::Contains("not a 3-d"));
  std::string keys;
  for (int i = 0; i < 100000; ++i) keys += "'shape': (1, ";
  CHECK_THAT(error_text(npy_with_header(keys)), Catch::Contains("not a 3-d"));
  for (int trial = 0; trial < 200; ++trial) {
    std::string junk(size_t(rng() % 4096), '\0');
    for (char& c : junk) c = char(rng());
    CHECK_FALSE(error_text(trial % 2 ? junk : npy_with_header(junk)).empty());
  }
}
