// Byte-level BPE tokenizer loaded from a HuggingFace tokenizer.json (Qwen2 / Qwen3 / Qwen3.5 kind):
// NFC normaliser, the Qwen Split pre-tokenizer, ByteLevel mapping, BPE merges, added tokens and the
// ByteLevel decoder. Encoding matches HuggingFace tokenizers id for id (tests/unit/text/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mlpt::text {

class Tokenizer {
 public:
  // Throws mlpt::Error naming the file and the reason (unreadable, bad JSON, unsupported kind).
  static Tokenizer load(const std::filesystem::path& path);
  // The same from the JSON text of a tokenizer.json; `origin` names it in errors.
  static Tokenizer from_json(std::string_view json_text, const std::string& origin = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. With allow_special, added tokens written in the text (`<|im_end|>`) become their
  // ids, as in templates; without, the text is plain text, which is right for anything untrusted
  // (tool output, user content) so that it cannot end a turn. Ill-formed UTF-8 is first replaced
  // by U+FFFD per maximal subpart (what a UTF-8 decoder with replacement gives HF as a string).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  // Appends to `out` instead; the same result.
  void encode_into(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;
  // Many texts, on up to `threads` threads (0: hardware concurrency). Same results as encode().
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts,
                                                 bool allow_special = false, unsigned threads = 0) const;

  // Ids to text, as HF decode(ids, skip_special_tokens=false): the bytes of all tokens joined,
  // then ill-formed UTF-8 (a character cut between tokens) replaced by U+FFFD. Decoding the whole
  // sequence gives exact text. Throws mlpt::Error on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  // The raw bytes, no replacement: for incremental decoding, where a character may be cut.
  std::string decode_bytes(std::span<const int32_t> ids) const;

  // Tokens in the vocabulary's own spelling (byte-level characters, e.g. "Ġhello"), or the added
  // token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_added_token(int32_t id) const;
  // One more than the largest id (BPE vocabulary and added tokens).
  size_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlpt::text
