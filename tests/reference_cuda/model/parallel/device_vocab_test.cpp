// The device model's vocabulary-parallel embedding and LM head (bf16 emulated on the CPU) under
// mpirun (device_vocab_check.cpp says what is compared and the bounds): at TP2 and TP4, vocabularies
// that divide over the ranks and that do not, and a last rank whose range is padding only, the model
// with the vocabulary split is bit for bit the one with it whole, and the head's logprobs, lse and
// gradients are within the derived rounding bounds of one rank's; the rows gathered whole for
// sampling hold every rank's logits in their places.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "mpi_check_report.hpp"

namespace {

nlohmann::json check_vocab(int tp, int64_t vocab, int64_t valid) {
  return mlpt_test::mpi_check_report(tp, std::string(DEVICE_VOCAB_CHECK) + " --vocab " +
                                             std::to_string(vocab) + " --valid " + std::to_string(valid));
}

}  // namespace

TEST_CASE("device model: the vocabulary split over TP2 and TP4 gives one rank's logprobs and gradients") {
  struct Case {
    int tp;
    int64_t vocab, valid;
  };
  // 300 divides over 2 and 4; 301 over neither; at TP4, 301 ids put the last rank at 226 and 200
  // real ids leave it only padding (and the one before it part padding).
  for (const Case c : {Case{2, 300, 300}, Case{2, 301, 290}, Case{4, 300, 300}, Case{4, 301, 200}}) {
    const nlohmann::json r = check_vocab(c.tp, c.vocab, c.valid);
    INFO(r.dump());
    INFO("draws from the whole rows equal to one rank's (whose logits differ by logits_gap): "
         << r["draws_equal_one_rank"] << " of " << r["rows"]);
    WARN("TP" << c.tp << ", vocabulary " << c.vocab << " (" << c.valid << " real): " << r.dump());
    CHECK(r["model_bitwise_equal"] == true);
    CHECK(r["embedding_rows_equal"] == true);
    CHECK(r["whole_rows_placed"] == true);  // sampling draws from one rank's rows
    for (const char* q : {"lse", "logprob", "dlogits", "d_hidden", "d_lm_head"})
      CHECK(r[q]["max_ratio_to_bound"].get<double>() <= 1.0);
    if (c.valid <= r["range_begin_last_rank"].get<int64_t>()) SUCCEED("the last rank holds padding only");
  }
}
