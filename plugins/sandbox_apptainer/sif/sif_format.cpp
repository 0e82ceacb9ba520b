#include "sif_format.hpp"

#include <cstdio>
#include <cstring>

namespace mlpt::sif {
namespace {

template <class T>
T get_le(const uint8_t* p) {
  using U = std::make_unsigned_t<T>;
  U v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<U>(static_cast<U>(p[i]) << (8 * i));
  return static_cast<T>(v);
}
template <class T>
void put_le(uint8_t* p, T value) {
  using U = std::make_unsigned_t<T>;
  U v = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
std::string get_str(const uint8_t* p, size_t n) {
  size_t len = 0;
  while (len < n && p[len] != 0) ++len;
  return std::string(reinterpret_cast<const char*>(p), len);
}
void put_str(uint8_t* p, size_t n, const std::string& s) {
  std::memset(p, 0, n);
  std::memcpy(p, s.data(), std::min(n, s.size()));
}

}  // namespace

std::string data_type_name(int32_t t) {
  switch (static_cast<DataType>(t)) {
    case DataType::Deffile: return "Def.FILE";
    case DataType::EnvVar: return "Env.Vars";
    case DataType::Labels: return "JSON.Labels";
    case DataType::Partition: return "FS";
    case DataType::Signature: return "Signature";
    case DataType::GenericJson: return "JSON.Generic";
    case DataType::Generic: return "Generic/Raw";
    case DataType::CryptoMessage: return "Cryptographic Message";
  }
  return "Unknown";
}
std::string fs_type_name(int32_t t) {
  switch (static_cast<FsType>(t)) {
    case FsType::Squashfs: return "Squashfs";
    case FsType::Ext3: return "Ext3";
    case FsType::ImmutableObject: return "Archive";
    case FsType::Raw: return "Raw";
    case FsType::EncryptedSquashfs: return "Encrypted squashfs";
  }
  return "Unknown";
}
std::string part_type_name(int32_t t) {
  switch (static_cast<PartType>(t)) {
    case PartType::System: return "System";
    case PartType::PrimarySystem: return "*System";
    case PartType::Data: return "Data";
    case PartType::Overlay: return "Overlay";
  }
  return "Unknown";
}
std::string arch_name(const std::string& code) {
  static const char* names[] = {"unknown", "386",    "amd64",  "arm",     "arm64",    "ppc64",
                                "ppc64le", "mips",   "mipsle", "mips64",  "mips64le", "s390x"};
  if (code.size() == 2 && code[0] >= '0' && code[0] <= '9' && code[1] >= '0' && code[1] <= '9') {
    int n = (code[0] - '0') * 10 + (code[1] - '0');
    if (n < 12) return names[n];
  }
  return code;
}
std::string host_arch_code() {
#if defined(__x86_64__)
  return "02";
#elif defined(__aarch64__)
  return "04";
#elif defined(__i386__)
  return "01";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "06";
#elif defined(__s390x__)
  return "11";
#else
  return "00";
#endif
}

int32_t Descriptor::fs_type() const { return get_le<int32_t>(extra.data()); }
int32_t Descriptor::part_type() const { return get_le<int32_t>(extra.data() + 4); }
std::string Descriptor::part_arch() const { return get_str(extra.data() + 8, kArchLen); }

std::string uuid_string(const std::array<uint8_t, 16>& id) {
  char buf[37];
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0], id[1],
                id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13],
                id[14], id[15]);
  return buf;
}

void encode_header(const Header& h, uint8_t* out) {
  std::memset(out, 0, kHeaderSize);
  put_str(out + kLaunchOff, kLaunchLen, h.launch);
  put_str(out + kMagicOff, kMagicLen, h.magic);
  put_str(out + kVersionOff, kVersionLen, h.version);
  put_str(out + kArchOff, kArchLen, h.arch);
  std::memcpy(out + kIdOff, h.id.data(), kIdLen);
  put_le(out + kCtimeOff, h.ctime);
  put_le(out + kMtimeOff, h.mtime);
  put_le(out + kDfreeOff, h.dfree);
  put_le(out + kDtotalOff, h.dtotal);
  put_le(out + kDescrOffOff, h.descr_offset);
  put_le(out + kDescrLenOff, h.descr_length);
  put_le(out + kDataOffOff, h.data_offset);
  put_le(out + kDataLenOff, h.data_length);
}

Header decode_header(const uint8_t* in) {
  Header h;
  h.launch = get_str(in + kLaunchOff, kLaunchLen);
  h.magic = get_str(in + kMagicOff, kMagicLen);
  h.version = get_str(in + kVersionOff, kVersionLen);
  h.arch = get_str(in + kArchOff, kArchLen);
  std::memcpy(h.id.data(), in + kIdOff, kIdLen);
  h.ctime = get_le<int64_t>(in + kCtimeOff);
  h.mtime = get_le<int64_t>(in + kMtimeOff);
  h.dfree = get_le<int64_t>(in + kDfreeOff);
  h.dtotal = get_le<int64_t>(in + kDtotalOff);
  h.descr_offset = get_le<int64_t>(in + kDescrOffOff);
  h.descr_length = get_le<int64_t>(in + kDescrLenOff);
  h.data_offset = get_le<int64_t>(in + kDataOffOff);
  h.data_length = get_le<int64_t>(in + kDataLenOff);
  return h;
}

void encode_descriptor(const Descriptor& d, uint8_t* out) {
  std::memset(out, 0, kDescriptorSize);
  put_le(out + kDDataTypeOff, d.data_type);
  out[kDUsedOff] = d.used ? 1 : 0;
  put_le(out + kDIdOff, d.id);
  put_le(out + kDGroupOff, d.group_id);
  put_le(out + kDLinkOff, d.linked_id);
  put_le(out + kDOffsetOff, d.offset);
  put_le(out + kDSizeOff, d.size);
  put_le(out + kDStoreLenOff, d.store_length);
  put_le(out + kDCtimeOff, d.ctime);
  put_le(out + kDMtimeOff, d.mtime);
  put_le(out + kDUidOff, d.uid);
  put_le(out + kDGidOff, d.gid);
  put_str(out + kDNameOff, kDNameLen, d.name);
  std::memcpy(out + kDExtraOff, d.extra.data(), kDExtraLen);
}

Descriptor decode_descriptor(const uint8_t* in) {
  Descriptor d;
  d.data_type = get_le<int32_t>(in + kDDataTypeOff);
  d.used = in[kDUsedOff] != 0;
  d.id = get_le<uint32_t>(in + kDIdOff);
  d.group_id = get_le<uint32_t>(in + kDGroupOff);
  d.linked_id = get_le<uint32_t>(in + kDLinkOff);
  d.offset = get_le<int64_t>(in + kDOffsetOff);
  d.size = get_le<int64_t>(in + kDSizeOff);
  d.store_length = get_le<int64_t>(in + kDStoreLenOff);
  d.ctime = get_le<int64_t>(in + kDCtimeOff);
  d.mtime = get_le<int64_t>(in + kDMtimeOff);
  d.uid = get_le<int64_t>(in + kDUidOff);
  d.gid = get_le<int64_t>(in + kDGidOff);
  d.name = get_str(in + kDNameOff, kDNameLen);
  std::memcpy(d.extra.data(), in + kDExtraOff, kDExtraLen);
  return d;
}

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Io: return "io";
    case ErrorKind::Truncated: return "truncated";
    case ErrorKind::BadMagic: return "bad_magic";
    case ErrorKind::BadVersion: return "bad_version";
    case ErrorKind::BadHeader: return "bad_header";
    case ErrorKind::BadDescriptor: return "bad_descriptor";
    case ErrorKind::Overlap: return "overlap";
    case ErrorKind::NoPartition: return "no_partition";
    case ErrorKind::WrongFsType: return "wrong_fs_type";
    case ErrorKind::BadSquashfs: return "bad_squashfs";
  }
  return "unknown";
}

}  // namespace mlpt::sif
