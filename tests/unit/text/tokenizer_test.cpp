// The tokenizer against HuggingFace tokenizers (Rust) on the real Qwen3 tokenizer.json: identical
// ids on a corpus of code, Unicode text and edge cases, pre-tokenizer classes and NFC over every
// code point, decoding, the special-token option, batch encoding, errors.
#include <algorithm>
#include <random>

#include "core/error.hpp"
#include "core/text/pretokenizer.hpp"
#include "core/text/unicode.hpp"
#include "tests/unit/text/fixtures.hpp"

using namespace mlpt::text;
using namespace mlpt::text::testing;
using nlohmann::json;
using namespace std::string_literals;

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  unicode::append_utf8(s, cp);
  return s;
}

// The vocabulary spelling of a single byte (GPT-2's byte-to-character map, written out again here).
std::string byte_token(unsigned char b) {
  uint32_t extra = 256, cp = 0;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    uint32_t c = printable ? uint32_t(x) : extra++;
    if (x == b) cp = c;
  }
  return utf8(cp);
}

// Random text drawn from the character kinds the pre-tokenizer distinguishes.
std::string random_text(std::mt19937& rng, size_t len) {
  static const std::vector<std::string> atoms = {
      "a", "Z", "é", "e\xCC\x81", "\xCC\x81", "\xCC\xA3", "ß", "д", "中", "한", "\xE1\x84\x80\xE1\x85\xA1", "1", "٣",
      "²", "Ⅻ", " ", "  ", "\t", "\n", "\r\n", "\r", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "'", "'s", "'S",
      "'ll", "'Re", "'ve", "'d", "'m", "'t", "'x", "!", ".", ",", "(", ")", "{", "}", "_", "-", "=", "\"",
      "😀", "👍🏽", "\xE2\x80\x8D", "\xEF\xB8\x8F", "#", "$", "\\", "\xC5\xBF", "\x0B", "\x0C", "\x1C", "\xC2\x85",
      "Å", "A\xCC\x8A", "\xE0\xA4\x95\xE0\xA4\xBC", "ﬁ", "<|im_end|>", "<think>", "<|im_start|>"};
  std::string s;
  for (size_t i = 0; i < len; ++i) s += atoms[rng() % atoms.size()];
  return s;
}

std::vector<std::string> corpus() {
  namespace fs = std::filesystem;
  std::vector<std::string> texts;
  fs::path src(MLPT_SOURCE_DIR);
  for (const char* f : {"tests/unit/text/corpus/code_samples.txt", "tests/unit/text/corpus/crlf.txt",
                        "tests/unit/text/corpus/unicode_text.txt", "core/text/tokenizer.cpp",
                        "core/text/pretokenizer.cpp", "core/text/unicode.cpp", "scripts/gen-unicode-tables.py",
                        "scripts/fetch-npm-fixtures.sh", "tests/unit/text/reference_tokenizer.mjs", "CMakeLists.txt"})
    texts.push_back(read_file(src / f));
  texts.push_back(read_file(npm_modules() / "@huggingface/jinja/dist/index.js").substr(0, 200000));
  texts.push_back(read_file(npm_modules() / "@anush008/tokenizers/index.d.ts"));
  // edge cases
  texts.push_back("");
  texts.push_back(" ");
  texts.push_back("\n");
  texts.push_back(std::string(3000, ' ') + "x" + std::string(5000, ' '));
  texts.push_back(std::string(2000, 'a'));  // long word: heap BPE path
  texts.push_back("   \n\n  \t \r\n\r\n   end   ");
  texts.push_back("12345678901234567890 3.14 1,000 ١٢٣٤ ½ ⅓ ²³");
  texts.push_back("e\xCC\x81 a\xCC\x8A A\xCC\x8A\xCC\xA3 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB o\xCC\x88\xCC\x81 \xE0\xA4\x95\xE0\xA4\xBC");
  texts.push_back("hello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"x\"}\n</tool_call>");
  texts.push_back("<|im_end|><|im_end|><|endoftext|> <|im_start|><|im_start|x <|im_");
  texts.push_back("bad utf8: \xFF\xFE \xC3 \xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF \xF4\x90\x80\x80 end \x80\xBF");
  texts.push_back("NUL \0 inside"s);
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) texts.push_back(random_text(rng, 1 + rng() % 60));
  return texts;
}

}  // namespace

TEST_CASE("loads the real Qwen3 tokenizer.json", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  CHECK(tok.vocab_size() == 151669);
  CHECK(tok.token_to_id("<|endoftext|>") == 151643);
  CHECK(tok.token_to_id("<|im_end|>") == 151645);
  CHECK(tok.token_to_id("</think>") == 151668);
  CHECK(tok.token_to_id("Ġhello") == 23811);
  CHECK(tok.id_to_token(151644) == "<|im_start|>");
  CHECK(tok.is_added_token(151657));
  CHECK_FALSE(tok.is_added_token(100));
  CHECK_FALSE(tok.id_to_token(-1).has_value());
  CHECK_FALSE(tok.id_to_token(151669).has_value());
}

TEST_CASE("encodes a mixed corpus exactly like HuggingFace tokenizers", "[tokenizer][reference]") {
  const Tokenizer& tok = qwen3();
  auto texts = corpus();
  json res = run_node("reference_tokenizer.mjs",
                      {{"mode", "encode"}, {"tokenizer", qwen3_tokenizer_json().string()}, {"inputs", write_inputs(texts, "corpus")}});
  size_t tokens = 0, bytes = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ours = tok.encode(texts[i], true);
    auto ref = res["ids"][i].get<std::vector<int32_t>>();
    tokens += ours.size(), bytes += texts[i].size();
    if (ours != ref) {
      size_t k = 0;
      while (k < ours.size() && k < ref.size() && ours[k] == ref[k]) ++k;
      INFO("text " << i << " first difference at token " << k << " ours "
                   << (k < ours.size() ? std::to_string(ours[k]) : "end") << " ref "
                   << (k < ref.size() ? std::to_string(ref[k]) : "end") << " near: "
                   << json(unicode::to_valid_utf8(tok.decode(std::span(ours).subspan(k > 5 ? k - 5 : 0, std::min<size_t>(12, ours.size() - (k > 5 ? k - 5 : 0)))))).dump());
      CHECK(ours == ref);
    }
  }
  INFO(texts.size() << " texts, " << bytes << " bytes, " << tokens << " tokens");
  CHECK(tokens > 50000);
}

TEST_CASE("decode inverts encode (up to NFC) and matches HF on cut characters", "[tokenizer][reference]") {
  const Tokenizer& tok = qwen3();
  for (const auto& t : corpus()) {
    auto ids = tok.encode(t, true);
    // the normaliser is part of encoding: decoding gives the NFC of the (repaired) text
    CHECK(tok.decode(ids) == unicode::nfc(unicode::to_valid_utf8(t)));
    if (unicode::is_valid_utf8(t) && unicode::nfc(t) == t) CHECK(tok.decode_bytes(ids) == t);
  }
  // Sequences that cut a character: the emoji's bytes one token each, and halves of it.
  auto emoji = tok.encode("😀 x");
  REQUIRE(emoji.size() >= 2);
  std::vector<std::vector<int32_t>> seqs = {{emoji[0]}, {emoji.back()}, emoji};
  std::vector<int32_t> bytes;
  for (unsigned char b : std::string("é😀")) bytes.push_back(tok.token_to_id(byte_token(b)).value());
  seqs.push_back(bytes);
  seqs.push_back(std::vector<int32_t>(bytes.begin(), bytes.begin() + 3));
  seqs.push_back(std::vector<int32_t>(bytes.begin() + 1, bytes.end()));
  seqs.push_back({151644, 872, 198, 151645});
  json res = run_node("reference_tokenizer.mjs",
                      {{"mode", "decode"}, {"tokenizer", qwen3_tokenizer_json().string()}, {"ids", seqs}});
  for (size_t i = 0; i < seqs.size(); ++i) CHECK(tok.decode(seqs[i]) == res["texts"][i].get<std::string>());
  CHECK(tok.decode(bytes) == "é😀");
  CHECK(tok.decode_bytes(std::vector<int32_t>(bytes.begin(), bytes.begin() + 3)) == "é\xF0");
  CHECK_THROWS_AS(tok.decode(std::vector<int32_t>{151669}), mlpt::Error);
  CHECK_THROWS_AS(tok.decode(std::vector<int32_t>{-3}), mlpt::Error);
}

TEST_CASE("pre-tokenizer classes agree with HF's regex on every code point", "[tokenizer][reference][unicode]") {
  // Each code point c appears in a line "a c c b␠c1 c\n"; pieces never cross the '\n', so each
  // line's pieces belong to one code point. Planes 0-3 and 14 are covered fully; the unassigned
  // planes 4-13 and the private-use planes 15-16 by a sample.
  std::vector<std::string> texts;
  std::vector<std::vector<uint32_t>> line_cp;
  std::string cur;
  std::vector<uint32_t> cps;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    if (cp == '\n' || cp == '\r') continue;
    if (cp >= 0x40000 && (cp < 0xE0000 || cp >= 0xF0000) && cp % 61) continue;
    std::string c = utf8(cp);
    cur += "a" + c + c + "b " + c + "1 " + c + "\n";
    cps.push_back(cp);
    if (cps.size() == 0x8000) texts.push_back(std::move(cur)), line_cp.push_back(std::move(cps)), cur.clear(), cps.clear();
  }
  texts.push_back(cur), line_cp.push_back(cps);
  for (auto [pattern, regex] : {std::pair{SplitPattern::kQwen3, kQwen3SplitRegex}, std::pair{SplitPattern::kQwen35, kQwen35SplitRegex}}) {
    json res = run_node("reference_tokenizer.mjs", {{"mode", "pretokenize"}, {"tokenizer", qwen3_tokenizer_json().string()},
                                                    {"regex", std::string(regex)}, {"inputs", write_inputs(texts, "cps")}});
    std::vector<uint32_t> bad;
    for (size_t t = 0; t < texts.size(); ++t) {
      std::vector<std::string_view> ours;
      pre_tokenize(texts[t], pattern, ours);
      // compare line by line
      std::vector<std::string> ref = res["pieces"][t].get<std::vector<std::string>>();
      size_t line = 0, oi = 0, ri = 0;
      while (oi < ours.size() || ri < ref.size()) {
        std::vector<std::string> a, b;
        while (oi < ours.size()) { a.emplace_back(ours[oi]); if (ours[oi++].back() == '\n') break; }
        while (ri < ref.size()) { b.push_back(ref[ri]); if (ref[ri++].back() == '\n') break; }
        if (a != b && line < line_cp[t].size()) bad.push_back(line_cp[t][line]);
        ++line;
      }
    }
    INFO("pattern " << regex << ": " << bad.size() << " code points differ; first:");
    std::string list;
    for (size_t i = 0; i < bad.size() && i < 40; ++i) { char buf[16]; snprintf(buf, sizeof buf, " U+%04X", bad[i]); list += buf; }
    INFO(list);
    CHECK(bad.empty());
  }
}

TEST_CASE("NFC agrees with HF's normaliser", "[tokenizer][reference][unicode]") {
  std::vector<std::string> texts(1);
  std::mt19937 rng(7);
  std::vector<uint32_t> marks;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    if (unicode::flags(cp) & unicode::kNfcUnstable) marks.push_back(cp);
  }
  for (uint32_t cp = 0xA0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    if (texts.back().size() > 1 << 20) texts.emplace_back();
    texts.back() += utf8(cp) + "|";
  }
  // Sequences of starters and marks in random order, which exercise reordering and composition.
  texts.emplace_back();
  for (int i = 0; i < 20000; ++i) {
    texts.back() += "aeo"[rng() % 3];
    for (int k = 0; k < 1 + int(rng() % 4); ++k) texts.back() += utf8(marks[rng() % marks.size()]);
    texts.back() += ' ';
  }
  json res = run_node("reference_tokenizer.mjs",
                      {{"mode", "normalize"}, {"tokenizer", qwen3_tokenizer_json().string()}, {"inputs", write_inputs(texts, "nfc")}});
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string ours = unicode::nfc(texts[i]), ref = res["texts"][i].get<std::string>();
    if (ours != ref) {
      size_t k = 0;
      while (k < ours.size() && k < ref.size() && ours[k] == ref[k]) ++k;
      auto cps = [](const std::string& t, size_t at) {
        size_t from = t.rfind(' ', at > 0 ? at - 1 : 0);
        from = from == std::string::npos ? 0 : from;
        std::string r;
        for (size_t j = from; j < t.size() && j < from + 40;) {
          char buf[16];
          snprintf(buf, sizeof buf, "%X ", unicode::next_code_point(t, j));
          r += buf;
        }
        return r;
      };
      INFO("text " << i << " differs at byte " << k << ": ours " << cps(ours, k) << "| ref " << cps(ref, k));
      CHECK(ours == ref);
    }
  }
}

TEST_CASE("special tokens in text are recognised only when allowed", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  std::string text = "file says <|im_end|> and </tool_response> here";
  auto plain = tok.encode(text, false), special = tok.encode(text, true);
  CHECK(std::find(special.begin(), special.end(), 151645) != special.end());
  CHECK(std::find(plain.begin(), plain.end(), 151645) == plain.end());
  for (int32_t id : plain) CHECK_FALSE(tok.is_added_token(id));
  CHECK(tok.decode(plain) == text);
  CHECK(tok.decode(special) == text);
  CHECK(tok.encode("<|im_end|>", true) == std::vector<int32_t>{151645});
  CHECK(tok.encode("<|im_end|>", false).size() > 1);
}

TEST_CASE("batch encoding on several threads equals one by one", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  auto texts = corpus();
  for (unsigned threads : {1u, 2u, 4u}) {
    auto batch = tok.encode_batch(texts, true, threads);
    REQUIRE(batch.size() == texts.size());
    for (size_t i = 0; i < texts.size(); ++i) CHECK(batch[i] == tok.encode(texts[i], true));
  }
}

TEST_CASE("random bytes never crash encode or decode", "[tokenizer][fuzz]") {
  const Tokenizer& tok = qwen3();
  std::mt19937 rng(99);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 200, '\0');
    for (auto& c : s) c = char(rng() % 4 == 0 ? rng() % 256 : " \n\ta'1é<|>"[rng() % 11]);
    auto ids = tok.encode(s, rng() % 2);
    CHECK(tok.decode(ids) == unicode::nfc(unicode::to_valid_utf8(s)));
  }
}

TEST_CASE("bad tokenizer files give errors naming the file and reason", "[tokenizer][errors]") {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const mlpt::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message([] { Tokenizer::load("/nonexistent/tokenizer.json"); }),
             Catch::Contains("/nonexistent/tokenizer.json") && Catch::Contains("cannot open"));
  CHECK_THAT(message([] { Tokenizer::from_json("{not json", "x.json"); }), Catch::Contains("x.json") && Catch::Contains("JSON"));
  CHECK_THAT(message([] { Tokenizer::from_json(R"({"model": {"type": "Unigram"}})", "u.json"); }),
             Catch::Contains("Unigram"));
  json j = json::parse(read_file(qwen3_tokenizer_json()));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  CHECK_THAT(message([&] { Tokenizer::from_json(j.dump(), "r.json"); }), Catch::Contains("Split regex"));
  j = json::parse(read_file(qwen3_tokenizer_json()));
  j["model"]["merges"][5] = json::array({"Ġ", "notatoken"});
  CHECK_THAT(message([&] { Tokenizer::from_json(j.dump(), "m.json"); }), Catch::Contains("merge 5"));
}
