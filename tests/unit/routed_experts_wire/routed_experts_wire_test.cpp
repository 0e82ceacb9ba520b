// Routed experts as vLLM puts them in a completion (`routed_experts`, base64 .npy of shape
// (positions, layers, top-k)): the HTTP engine's reader (plugins/engine_http) against arrays made
// outside mlpt (.npy format 1.0 written with Python's struct and base64), and against mlpt serve's
// writer.
#include <catch2/catch.hpp>

#include "core/serve/routed_experts_npy.hpp"
#include "routed_experts_npy.hpp"
#include "tests/unit/reference_model/test_util.hpp"

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
