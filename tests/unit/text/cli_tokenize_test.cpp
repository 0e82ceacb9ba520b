// The built `mlpt tokenize` command, run as scripts run it: text on stdin to ids on one line
// (space-separated), --special for added tokens, --decode back to the exact text, and errors.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <sstream>

#include "core/text/tokenizer.hpp"
#include "core/text/unicode.hpp"
#include "tests/unit/text/fixtures.hpp"

using namespace mlpt::text;
using namespace mlpt::text::testing;
using nlohmann::json;

namespace {

struct Result {
  int status = -1;
  std::string out, err;
};

// Runs `mlpt tokenize ARGS < stdin_text`.
Result tokenize_cli(const std::string& args, const std::string& stdin_text) {
  static int counter = 0;
  ++counter;
  const fs::path in = temp_dir() / ("cli_in" + std::to_string(counter));
  const fs::path err = temp_dir() / ("cli_err" + std::to_string(counter));
  write_file(in, stdin_text);
  std::string cmd = std::string(MLPT_BUILD_DIR) + "/bin/mlpt tokenize " + args + " < '" + in.string() + "' 2> '" + err.string() + "'";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = read_file(err);
  return r;
}

std::string tokenizer_arg() { return "--tokenizer '" + qwen3_tokenizer_json().string() + "'"; }

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

TEST_CASE("mlpt tokenize prints the ids on one line, as HF tokenizers gives them", "[tokenizer][cli]") {
  const Tokenizer& tok = qwen3();
  const std::string text = "def foo():\r\n    return 1/0  # «é» 😀\n\n<|im_end|> tail\n";
  Result r = tokenize_cli(tokenizer_arg(), text);
  INFO(r.err);
  REQUIRE(r.status == 0);
  REQUIRE(!r.out.empty());
  CHECK(r.out.back() == '\n');
  CHECK(r.out.find('\n') == r.out.size() - 1);  // one line
  CHECK(r.out == joined(tok.encode(text, false)) + "\n");
  // Without --special the text "<|im_end|>" is plain text: untrusted input cannot end a turn.
  CHECK(r.out.find(std::to_string(*tok.token_to_id("<|im_end|>"))) == std::string::npos);

  // --special: added tokens in the text are their ids, exactly as HF encodes the text
  Result s = tokenize_cli(tokenizer_arg() + " --special", text);
  REQUIRE(s.status == 0);
  json ref = run_node("reference_tokenizer.mjs",
                      {{"mode", "encode"}, {"tokenizer", qwen3_tokenizer_json().string()}, {"inputs", write_inputs({text}, "cli")}});
  CHECK(s.out == joined(ref["ids"][0].get<std::vector<int32_t>>()) + "\n");
  CHECK(s.out.find(" " + std::to_string(*tok.token_to_id("<|im_end|>")) + " ") != std::string::npos);

  // empty input: an empty line
  Result e = tokenize_cli(tokenizer_arg(), "");
  CHECK(e.status == 0);
  CHECK(e.out == "\n");
}

TEST_CASE("mlpt tokenize --decode gives back the exact text", "[tokenizer][cli]") {
  const Tokenizer& tok = qwen3();
  const std::string text = "Tabs\tand  spaces,\r\nCRLF, e\xCC\x81 ünïcödé 👍🏽\n<|im_start|>assistant\n";
  Result enc = tokenize_cli(tokenizer_arg() + " --special", text);
  REQUIRE(enc.status == 0);
  Result dec = tokenize_cli(tokenizer_arg() + " --decode", enc.out);
  INFO(dec.err);
  REQUIRE(dec.status == 0);
  CHECK(dec.out == unicode::nfc(text));  // the normaliser's NFC: "e\u0301" comes back as "\u00e9"
  // ids in any whitespace, over several lines
  auto ids = tok.encode("Hello, world!", false);
  std::string spread;
  for (auto id : ids) spread += "\n  " + std::to_string(id) + "\t";
  CHECK(tokenize_cli(tokenizer_arg() + " --decode", spread).out == "Hello, world!");
}

TEST_CASE("mlpt tokenize errors name the problem and exit 2", "[tokenizer][cli][errors]") {
  Result r = tokenize_cli(tokenizer_arg() + " --decode", "9707 x 11");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("'x'") && Catch::Contains("not a token id"));
  r = tokenize_cli(tokenizer_arg() + " --decode", "9707 99999999");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("99999999") && Catch::Contains("not in the vocabulary"));
  r = tokenize_cli(tokenizer_arg() + " --decode", "-1");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("not a token id"));
  r = tokenize_cli("", "hi");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("--tokenizer"));
  r = tokenize_cli("--tokenizer /nonexistent/tokenizer.json", "hi");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent/tokenizer.json"));
  r = tokenize_cli(tokenizer_arg() + " 'some text'", "");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("unexpected argument 'some text'"));
  r = tokenize_cli(tokenizer_arg() + " --bogus", "");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("--bogus"));
}
