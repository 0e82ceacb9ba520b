#include "engine/group_message.hpp"

#include <cstring>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {

template <class T>
void put(std::vector<char>& out, const T* values, size_t count) {
  const uint64_t n = count;
  out.insert(out.end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + sizeof n);
  out.insert(out.end(), reinterpret_cast<const char*>(values), reinterpret_cast<const char*>(values + count));
}

class Reader {
 public:
  explicit Reader(const std::vector<char>& bytes) : bytes_(bytes) {}
  template <class T>
  std::vector<T> take(const char* what) {
    uint64_t n = 0;
    read(&n, sizeof n, what);
    if (n > (bytes_.size() - at_) / sizeof(T))
      throw sdk::Error(MLPT_INTERNAL, std::string("engine group message: ") + what + " claims " + std::to_string(n) +
                                          " entries, more than the message holds");
    std::vector<T> v(static_cast<size_t>(n));
    read(v.data(), v.size() * sizeof(T), what);
    return v;
  }
  void done() const {
    if (at_ != bytes_.size())
      throw sdk::Error(MLPT_INTERNAL, "engine group message: " + std::to_string(bytes_.size() - at_) + " bytes left over");
  }

 private:
  void read(void* to, size_t n, const char* what) {
    if (n > bytes_.size() - at_) throw sdk::Error(MLPT_INTERNAL, std::string("engine group message: truncated in ") + what);
    if (n) std::memcpy(to, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<char>& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<char> encode(const GroupMessage& m) {
  std::vector<char> out;
  const uint64_t head[2] = {static_cast<uint64_t>(m.kind), m.version};
  put(out, head, 2);
  put(out, m.ops.data(), m.ops.size());
  put(out, m.states.data(), m.states.size());
  put(out, m.offsets.data(), m.offsets.size());
  put(out, m.tokens.data(), m.tokens.size());
  return out;
}

GroupMessage decode(const std::vector<char>& bytes) {
  Reader r(bytes);
  GroupMessage m;
  const std::vector<uint64_t> head = r.take<uint64_t>("the header");
  if (head.size() != 2 || head[0] < 1 || head[0] > 3) throw sdk::Error(MLPT_INTERNAL, "engine group message: bad header");
  m.kind = static_cast<GroupMessage::Kind>(head[0]);
  m.version = head[1];
  m.ops = r.take<StateOp>("the state operations");
  m.states = r.take<uint64_t>("the segments' states");
  m.offsets = r.take<int64_t>("the segments' offsets");
  m.tokens = r.take<int32_t>("the tokens");
  r.done();
  if (m.offsets.size() != m.states.size() + 1 || m.offsets.front() != 0 ||
      m.offsets.back() != static_cast<int64_t>(m.tokens.size()))
    throw sdk::Error(MLPT_INTERNAL, "engine group message: the segments' offsets do not match their tokens");
  for (size_t s = 0; s + 1 < m.offsets.size(); ++s)
    if (m.offsets[s + 1] < m.offsets[s]) throw sdk::Error(MLPT_INTERNAL, "engine group message: offsets decrease");
  return m;
}

}  // namespace mlpt::ref
