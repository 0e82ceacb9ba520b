// UTF-8 checking and repair (sdk/include/mlpt/sdk/utf8.hpp, used by core/text and the plugins),
// checked against Python's decoder as the independent reference for errors="replace".
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <string>

#include "core/text/unicode.hpp"
#include "mlpt/sdk/utf8.hpp"

namespace utf8 = mlpt::sdk::utf8;
namespace unicode = mlpt::text::unicode;

namespace {
// Python's bytes.decode("utf-8", "replace") re-encoded, for `bytes`.
std::string python_replace(const std::string& bytes) {
  std::string hex;
  char b[3];
  for (unsigned char c : bytes) std::snprintf(b, sizeof b, "%02x", c), hex += b;
  std::string cmd = "python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex(\"" + hex +
                    "\").decode(\"utf-8\", \"replace\").encode())'";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}
}  // namespace

TEST_CASE("lead bytes 0xC0, 0xC1 and 0xF5..0xFF never start a character") {
  for (int lead : {0xC0, 0xC1, 0xF5, 0xF6, 0xF7, 0xF8, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF}) {
    std::string s = {static_cast<char>(lead), '\x80', '\x80', '\x80'};
    INFO(std::hex << lead);
    CHECK_FALSE(utf8::is_valid(s));
    CHECK_FALSE(unicode::is_valid_utf8(s));
    CHECK(utf8::is_valid(utf8::to_valid(s)));
  }
  CHECK(utf8::is_valid("\xF4\x8F\xBF\xBF"));        // U+10FFFF
  CHECK_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above it
  CHECK_FALSE(utf8::is_valid("\xED\xA0\x80"));      // a surrogate
  CHECK_FALSE(utf8::is_valid("\xE0\x80\xAF"));      // overlong
}

TEST_CASE("repair matches Python's errors=replace on fixed and random bytes") {
  std::vector<std::string> inputs = {"ok \xF8\x88\x80\x80\x80 \xFF\xFE \xC3 \xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF end \x80\xBF",
                                     "\xF5\xF6\xF7\xF8\xF9\xFA\xFB\xFC\xFD\xFE\xFF"};
  std::mt19937 rng(20261203);
  for (int i = 0; i < 40; ++i) {
    std::string s(1 + rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 3 ? 0x80 + rng() % 128 : rng() % 128);
    inputs.push_back(s);
  }
  for (const auto& s : inputs) {
    INFO(s.size() << " bytes");
    const std::string fixed = utf8::to_valid(s);
    CHECK(fixed == python_replace(s));
    CHECK(fixed == unicode::to_valid_utf8(s));
    CHECK(utf8::is_valid(fixed));
  }
}
