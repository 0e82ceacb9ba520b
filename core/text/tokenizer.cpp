#include "core/text/tokenizer.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/text/pretokenizer.hpp"
#include "core/text/unicode.hpp"

namespace mlpt::text {
namespace {

using nlohmann::json;

// GPT-2's reversible map from bytes to printable characters (ByteLevel pre-tokenizer/decoder).
struct ByteMap {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324];  // the mapped code points are all below 324
  ByteMap() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t(-1));
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp[b] = printable ? uint32_t(b) : extra++;
      cp_to_byte[byte_to_cp[b]] = int16_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// The bytes a token stands for: each character mapped back through the byte map; a token with a
// character outside the map stands for its own UTF-8 (as the HF ByteLevel decoder does).
std::string token_bytes(std::string_view token) {
  if (!unicode::is_valid_utf8(token)) return std::string(token);
  std::string out;
  const auto& m = byte_map();
  for (size_t i = 0; i < token.size();) {
    uint32_t cp = unicode::next_code_point(token, i);
    if (cp >= 324 || m.cp_to_byte[cp] < 0) return std::string(token);
    out.push_back(char(m.cp_to_byte[cp]));
  }
  return out;
}

// Open-addressing map from a merge pair (left id, right id) to (rank, merged id).
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, 0);
    mask_ = cap - 1;
  }
  bool insert(uint64_t key, uint64_t value) {
    for (size_t h = hash(key) & mask_;; h = (h + 1) & mask_) {
      if (keys_[h] == key) return false;  // first (lowest rank) wins
      if (keys_[h] == kEmpty) {
        keys_[h] = key, values_[h] = value;
        return true;
      }
    }
  }
  const uint64_t* find(uint64_t key) const {
    for (size_t h = hash(key) & mask_;; h = (h + 1) & mask_) {
      if (keys_[h] == key) return &values_[h];
      if (keys_[h] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  std::vector<uint64_t> keys_;
  std::vector<uint64_t> values_;
  size_t mask_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordCache = std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

std::atomic<uint64_t> g_instances{0};

}  // namespace

struct Tokenizer::Impl {
  uint64_t instance = ++g_instances;
  SplitPattern pattern = SplitPattern::kQwen3;
  bool nfc = false;
  int32_t byte_id[256];
  MergeTable merges;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;  // spelled form
  std::vector<std::string> id_bytes;     // what each id decodes to
  std::vector<std::string> id_spelling;  // id_to_token
  std::vector<uint8_t> id_kind;          // 0 none, 1 BPE, 2 added
  struct Added {
    std::string content;
    int32_t id;
  };
  std::vector<Added> added;  // sorted longest first
  bool added_first_byte[256] = {};

  // --- BPE -----------------------------------------------------------------------------------
  const uint64_t* merge(int32_t a, int32_t b) const {
    return merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
  }

  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    size_t n = piece.size();
    if (n == 1) return out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    std::vector<int32_t> sym(n);
    for (size_t i = 0; i < n; ++i) sym[i] = byte_id[static_cast<unsigned char>(piece[i])];
    if (n <= 48) {
      // Short words: repeatedly merge the leftmost pair of lowest rank.
      while (sym.size() > 1) {
        uint64_t best = ~uint64_t(0);
        size_t at = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i)
          if (const uint64_t* m = merge(sym[i], sym[i + 1]); m && *m < best) best = *m, at = i;
        if (best == ~uint64_t(0)) break;
        sym[at] = int32_t(uint32_t(best));
        sym.erase(sym.begin() + long(at) + 1);
      }
      out.insert(out.end(), sym.begin(), sym.end());
      return;
    }
    // Long words: a heap of candidate merges over a linked list, O(n log n).
    std::vector<int> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) prev[i] = int(i) - 1, next[i] = i + 1 < n ? int(i + 1) : -1;
    struct Cand {
      uint64_t rank_id;
      int pos;
      bool operator>(const Cand& o) const { return rank_id != o.rank_id ? (rank_id >> 32) > (o.rank_id >> 32) : pos > o.pos; }
    };
    std::vector<Cand> heap;
    auto push = [&](int i) {
      if (i < 0 || next[i] < 0) return;
      if (const uint64_t* m = merge(sym[i], sym[next[i]])) {
        heap.push_back({*m, i});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    };
    for (size_t i = 0; i + 1 < n; ++i) push(int(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      Cand c = heap.back();
      heap.pop_back();
      int i = c.pos;
      if (!alive[i] || next[i] < 0) continue;
      const uint64_t* m = merge(sym[i], sym[next[i]]);
      if (!m || *m != c.rank_id) continue;  // stale
      int j = next[i];
      sym[i] = int32_t(uint32_t(*m));
      alive[j] = false;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      push(prev[i]);
      push(i);
    }
    for (int i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
  }

  void encode_word(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) return out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    thread_local WordCache cache;
    thread_local uint64_t cache_owner = 0;
    if (cache_owner != instance) cache.clear(), cache_owner = instance;
    if (piece.size() > 128) return bpe(piece, out);
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    size_t start = out.size();
    bpe(piece, out);
    if (cache.size() >= (1u << 17)) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + long(start), out.end()));
  }

  // Text with no added tokens in it: normalise, pre-tokenize, BPE each piece.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc && !unicode::nfc_quick_stable(text)) {
      normalized = unicode::nfc(text);
      text = normalized;
    }
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    pre_tokenize(text, pattern, pieces);
    for (std::string_view p : pieces) encode_word(p, out);
  }

  // Longest added token starting at text[i], or nullptr.
  const Added* added_at(std::string_view text, size_t i) const {
    for (const Added& a : added)
      if (text.compare(i, a.content.size(), a.content) == 0) return &a;
    return nullptr;
  }

  void encode_valid(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
    if (!allow_special || added.empty()) return encode_plain(text, out);
    size_t seg = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (!added_first_byte[static_cast<unsigned char>(text[i])]) continue;
      if (const Added* a = added_at(text, i)) {
        encode_plain(text.substr(seg, i - seg), out);
        out.push_back(a->id);
        i += a->content.size() - 1;
        seg = i + 1;
      }
    }
    encode_plain(text.substr(seg), out);
  }
};

namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& why) {
  throw Error(origin + ": " + why);
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

void check_byte_level(const json& j, const std::string& origin, const char* where) {
  if (type_of(j) != "ByteLevel") fail(origin, std::string(where) + " must be ByteLevel, found '" + type_of(j) + "'");
  if (j.value("add_prefix_space", false)) fail(origin, std::string(where) + ": add_prefix_space is not supported");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), "cannot open tokenizer file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) fail(path.string(), "cannot read tokenizer file");
  return from_json(ss.str(), path.string());
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(origin, std::string("not valid JSON: ") + e.what());
  }
  auto impl = std::make_unique<Impl>();
  try {
    if (!j.is_object() || !j.contains("model")) fail(origin, "no 'model' section (not a tokenizer.json?)");
    const json& model = j["model"];
    if (type_of(model) != "BPE") fail(origin, "model type '" + type_of(model) + "' is not supported (only BPE)");
    if (model.value("byte_fallback", false)) fail(origin, "BPE byte_fallback is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(k) && model[k].is_string() && !model[k].get<std::string>().empty())
        fail(origin, std::string("BPE ") + k + " is not supported");
    if (model.value("ignore_merges", false)) fail(origin, "BPE ignore_merges is not supported");

    // normaliser: none or NFC
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const json& nj = j["normalizer"];
      if (type_of(nj) == "NFC") impl->nfc = true;
      else if (type_of(nj) == "Sequence" && nj["normalizers"].size() == 1 && type_of(nj["normalizers"][0]) == "NFC")
        impl->nfc = true;
      else fail(origin, "normalizer '" + type_of(nj) + "' is not supported (only NFC)");
    }
    // pre-tokenizer: Split(Qwen regex, Isolated) then ByteLevel without its own regex
    const json& pj = j.at("pre_tokenizer");
    if (type_of(pj) != "Sequence" || pj["pretokenizers"].size() != 2)
      fail(origin, "pre_tokenizer must be Sequence[Split, ByteLevel]");
    const json& split = pj["pretokenizers"][0];
    if (type_of(split) != "Split") fail(origin, "first pre-tokenizer must be Split");
    std::string regex = split.at("pattern").value("Regex", "");
    if (regex == kQwen3SplitRegex) impl->pattern = SplitPattern::kQwen3;
    else if (regex == kQwen35SplitRegex) impl->pattern = SplitPattern::kQwen35;
    else fail(origin, "Split regex is not one of the Qwen patterns this tokenizer implements: " + regex);
    if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
      fail(origin, "Split must have behavior Isolated and invert false");
    check_byte_level(pj["pretokenizers"][1], origin, "second pre-tokenizer");
    if (pj["pretokenizers"][1].value("use_regex", true)) fail(origin, "ByteLevel use_regex is not supported");
    if (j.contains("decoder") && !j["decoder"].is_null()) check_byte_level(j["decoder"], origin, "decoder");

    // vocabulary
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) fail(origin, "model.vocab must be an object");
    int32_t max_id = -1;
    impl->vocab.reserve(vocab.size() * 2);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > 0x7FFFFFFF) fail(origin, "vocab id out of range for '" + it.key() + "'");
      impl->vocab.emplace(it.key(), int32_t(id));
      max_id = std::max(max_id, int32_t(id));
    }
    const json& added = j.value("added_tokens", json::array());
    for (const auto& a : added) max_id = std::max(max_id, a.at("id").get<int32_t>());
    impl->id_bytes.assign(size_t(max_id) + 1, "");
    impl->id_spelling.assign(size_t(max_id) + 1, "");
    impl->id_kind.assign(size_t(max_id) + 1, 0);
    for (const auto& [spelling, id] : impl->vocab) {
      impl->id_spelling[id] = spelling;
      impl->id_bytes[id] = token_bytes(spelling);
      impl->id_kind[id] = 1;
    }
    // byte ids, from the single-byte tokens
    const auto& bm = byte_map();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      unicode::append_utf8(s, bm.byte_to_cp[b]);
      auto it = impl->vocab.find(s);
      if (it == impl->vocab.end()) fail(origin, "vocabulary lacks the byte token for byte " + std::to_string(b));
      impl->byte_id[b] = it->second;
    }
    // merges: ["a", "b"] pairs or "a b" strings; rank = position
    const json& merges = model.at("merges");
    impl->merges.reserve(merges.size());
    uint64_t rank = 0;
    for (const auto& m : merges) {
      std::string a, b;
      if (m.is_array() && m.size() == 2) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos) fail(origin, "merge " + std::to_string(rank) + " has no space: " + s);
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else {
        fail(origin, "merge " + std::to_string(rank) + " is neither a pair nor a string");
      }
      auto ia = impl->vocab.find(a), ib = impl->vocab.find(b), iab = impl->vocab.find(a + b);
      if (ia == impl->vocab.end() || ib == impl->vocab.end() || iab == impl->vocab.end())
        fail(origin, "merge " + std::to_string(rank) + " (" + a + " " + b + ") uses tokens not in the vocabulary");
      impl->merges.insert((uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second),
                          (rank << 32) | uint32_t(iab->second));
      ++rank;
    }
    // added tokens
    for (const auto& a : added) {
      Impl::Added t{a.at("content").get<std::string>(), a.at("id").get<int32_t>()};
      if (t.content.empty()) fail(origin, "added token " + std::to_string(t.id) + " is empty");
      for (const char* k : {"single_word", "lstrip", "rstrip"})
        if (a.value(k, false)) fail(origin, "added token '" + t.content + "' uses " + k + ", which is not supported");
      impl->id_spelling[t.id] = t.content;
      impl->id_bytes[t.id] = token_bytes(t.content);
      impl->id_kind[t.id] = 2;
      impl->added_first_byte[static_cast<unsigned char>(t.content[0])] = true;
      impl->added.push_back(std::move(t));
    }
    std::stable_sort(impl->added.begin(), impl->added.end(),
                     [](const Impl::Added& x, const Impl::Added& y) { return x.content.size() > y.content.size(); });
  } catch (const json::exception& e) {
    fail(origin, std::string("malformed tokenizer.json: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::encode_into(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  if (unicode::is_valid_utf8(text)) return impl_->encode_valid(text, allow_special, out);
  std::string valid = unicode::to_valid_utf8(text);
  impl_->encode_valid(valid, allow_special, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, allow_special, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts, bool allow_special,
                                                          unsigned threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, unsigned(texts.size()));
  if (threads <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) out[i] = encode(texts[i], allow_special);
    return out;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < texts.size();) out[i] = encode(texts[i], allow_special);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= impl_->id_kind.size() || !impl_->id_kind[id])
      throw Error("decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                  std::to_string(impl_->id_kind.size()) + ")");
    out += impl_->id_bytes[id];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes = decode_bytes(ids);
  return unicode::is_valid_utf8(bytes) ? bytes : unicode::to_valid_utf8(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->id_kind.size() || !impl_->id_kind[id]) return std::nullopt;
  return impl_->id_spelling[id];
}

bool Tokenizer::is_added_token(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->id_kind.size() && impl_->id_kind[id] == 2;
}

size_t Tokenizer::vocab_size() const { return impl_->id_kind.size(); }

}  // namespace mlpt::text
