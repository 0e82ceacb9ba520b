// A pipeline group's place (rank, size) without a transport, for tests of a model whose stage
// messages the caller passes (StageBoundary): a double, since such a model must send nothing on
// the group; any message or collective it tries fails the test.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "model/parallel/communicator.hpp"

namespace mlpt_test {

class StagePlace : public mlpt::ref::Communicator {
 public:
  StagePlace(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, size_t) override { fail("all_reduce_sum"); }
  void all_to_all_v(const float*, const size_t*, float*, const size_t*) override { fail("all_to_all_v"); }
  void all_gather_v(const float*, size_t, float*, const size_t*) override { fail("all_gather_v"); }
  void exchange_counts(const size_t*, size_t*) override { fail("exchange_counts"); }
  void send(const float*, size_t, int) override { fail("send"); }
  void recv(float*, size_t, int) override { fail("recv"); }
  void send_recv(const float*, size_t, int, float*, size_t, int) override { fail("send_recv"); }

 private:
  static void fail(const std::string& call) { FAIL("the model called " << call << " on the pipeline group"); }
  int rank_, size_;
};

}  // namespace mlpt_test
