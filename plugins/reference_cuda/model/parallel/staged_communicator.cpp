#include "model/parallel/staged_communicator.hpp"

#include <numeric>

namespace mlpt::ref {

StagedCommunicator::StagedCommunicator(Communicator& host_group, std::unique_ptr<Staging> staging)
    : host_(host_group), staging_(std::move(staging)) {}

size_t StagedCommunicator::total(const size_t* counts) const {
  return std::accumulate(counts, counts + host_.size(), size_t{0});
}

void StagedCommunicator::all_reduce_sum(float* values, size_t count) {
  send_.resize(count);
  staging_->to_host(send_.data(), values, count);
  host_.all_reduce_sum(send_.data(), count);
  staging_->to_buffer(values, send_.data(), count);
}

void StagedCommunicator::all_to_all_v(const float* send, const size_t* send_counts, float* recv,
                                      const size_t* recv_counts) {
  const size_t out = total(send_counts), in = total(recv_counts);
  send_.resize(out);
  recv_.resize(in);
  staging_->to_host(send_.data(), send, out);
  host_.all_to_all_v(send_.data(), send_counts, recv_.data(), recv_counts);
  staging_->to_buffer(recv, recv_.data(), in);
}

void StagedCommunicator::all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) {
  const size_t in = total(recv_counts);
  send_.resize(send_count);
  recv_.resize(in);
  staging_->to_host(send_.data(), send, send_count);
  host_.all_gather_v(send_.data(), send_count, recv_.data(), recv_counts);
  staging_->to_buffer(recv, recv_.data(), in);
}

void StagedCommunicator::reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) {
  const size_t out = total(recv_counts), in = recv_counts[host_.rank()];
  send_.resize(out);
  recv_.resize(in);
  staging_->to_host(send_.data(), send, out);
  host_.reduce_scatter_v(send_.data(), recv_.data(), recv_counts);
  staging_->to_buffer(recv, recv_.data(), in);
}

void StagedCommunicator::exchange_counts(const size_t* send_counts, size_t* recv_counts) {
  host_.exchange_counts(send_counts, recv_counts);  // counts are host memory on every side
}

void StagedCommunicator::send(const float* values, size_t count, int peer) {
  send_.resize(count);
  staging_->to_host(send_.data(), values, count);
  host_.send(send_.data(), count, peer);
}

void StagedCommunicator::recv(float* values, size_t count, int peer) {
  recv_.resize(count);
  host_.recv(recv_.data(), count, peer);
  staging_->to_buffer(values, recv_.data(), count);
}

void StagedCommunicator::send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) {
  send_.resize(send_count);
  recv_.resize(recv_count);
  staging_->to_host(send_.data(), send, send_count);
  host_.send_recv(send_.data(), send_count, to, recv_.data(), recv_count, from);
  staging_->to_buffer(recv, recv_.data(), recv_count);
}

}  // namespace mlpt::ref
