#include "landing_plan.hpp"

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/reshard.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;
using mlpt::sdk::operator==;

namespace {

// The box a piece of a part says it is (whole when it names no global shape).
sdk::Box box_of(const TensorMeta& m) {
  return sdk::Box{m.box_offset.empty() ? std::vector<int64_t>(m.shape.size(), 0) : m.box_offset, m.shape};
}

}  // namespace

LandingPlan::LandingPlan(uint64_t request, std::vector<WantedTensor> wanted, std::vector<std::vector<Pull>> pulls, bool shards)
    : request_(request), wanted_(std::move(wanted)), pulls_(std::move(pulls)), shards_(shards) {
  offsets_.reserve(wanted_.size());
  for (const auto& w : wanted_) {
    offsets_.push_back(bytes_);
    bytes_ = align_up(bytes_ + static_cast<uint64_t>(w.box.elements()) * sdk::element_bytes(w.dtype));
  }
}

std::vector<PiecePlace> LandingPlan::places(uint32_t rank, const Layout& part) const {
  using sdk::detail::shape_text;
  const std::string from = "sender rank " + std::to_string(rank);
  if (rank >= pulls_.size()) throw Error(MLPT_DATA_LOSS, from + " answered pulls this receiver did not send it");
  const std::vector<Pull>& pulls = pulls_[rank];
  if (part.tensors.size() != pulls.size())
    throw Error(MLPT_DATA_LOSS, from + " sent " + std::to_string(part.tensors.size()) + " pieces for request " +
                                    std::to_string(request_) + ", which pulled " + std::to_string(pulls.size()) + " from it");
  std::vector<PiecePlace> out(pulls.size());
  uint64_t end = 0;  // of the previous piece in the stream: pieces follow each other, apart
  for (size_t k = 0; k < pulls.size(); ++k) {
    const TensorMeta& m = part.tensors[k];
    if (m.offset < end)
      throw Error(MLPT_DATA_LOSS, from + " sent piece " + std::to_string(k) + " at byte " + std::to_string(m.offset) +
                                      " of its stream, before the end of piece " + std::to_string(k - 1) + " (byte " +
                                      std::to_string(end) + ")");
    end = m.offset + m.nbytes;
    const Pull& p = pulls[k];
    const WantedTensor& w = wanted_[p.want];
    const sdk::Box got = box_of(m);
    const std::vector<int64_t>& global = m.global_shape.empty() ? m.shape : m.global_shape;
    const uint64_t width = sdk::element_bytes(w.dtype);
    if (m.name != p.name || !(got == p.box) || !(m.dtype == w.dtype) || global != w.global_shape ||
        m.nbytes != static_cast<uint64_t>(p.box.elements()) * width)
      throw Error(MLPT_DATA_LOSS, from + " sent piece " + std::to_string(k) + " as '" + m.name + "' box offset " +
                                      shape_text(got.offset) + " shape " + shape_text(got.extent) + " " + sdk::dtype_name(m.dtype) +
                                      " (" + std::to_string(m.nbytes) + " bytes), but this receiver pulled '" + p.name +
                                      "' box offset " + shape_text(p.box.offset) + " shape " + shape_text(p.box.extent) + " " +
                                      sdk::dtype_name(w.dtype) + " of global shape " + shape_text(w.global_shape));
    out[k].want = p.want;
    if (contiguous_in(w.box, p.box))
      out[k].at = static_cast<int64_t>(offsets_[p.want] + static_cast<uint64_t>(first_element_in(w.box, p.box)) * width);
  }
  return out;
}

LayoutBuffer::LayoutBuffer(std::shared_ptr<const LandingPlan> p, std::shared_ptr<ReceiveBufferPool> q, uint64_t v)
    : plan(std::move(p)), pool(std::move(q)), version(v) {
  buffer = pool->take(plan->bytes());
  const auto& wanted = plan->wanted();
  tensors.resize(wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    const WantedTensor& w = wanted[i];
    mlpt_named_tensor& t = tensors[i];
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.name = sdk::borrow(w.name);
    t.tensor.data = buffer.data + plan->offset(i);
    t.tensor.device = DLDevice{kDLCPU, 0};
    t.tensor.ndim = static_cast<int32_t>(w.box.extent.size());
    t.tensor.dtype = w.dtype;
    t.tensor.shape = const_cast<int64_t*>(w.box.extent.data());
    t.tensor.strides = nullptr;
    t.tensor.byte_offset = 0;
    if (plan->shards())
      shards.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, w.global_shape.data(), w.box.offset.data()});
  }
}

void LayoutBuffer::copy_in(const TensorMeta& piece, const PiecePlace& place, const uint8_t* data) {
  DLTensor from{};
  from.data = const_cast<uint8_t*>(data);
  from.device = DLDevice{kDLCPU, 0};
  from.ndim = static_cast<int32_t>(piece.shape.size());
  from.dtype = piece.dtype;
  from.shape = const_cast<int64_t*>(piece.shape.data());
  const sdk::Box box = box_of(piece);
  const WantedTensor& w = plan->wanted()[place.want];
  sdk::copy_box(from, box, tensors[place.want].tensor, w.box, box);
  bytes_copied_in += piece.nbytes;
}

}  // namespace mlpt::transport::ucx
