// The Singularity Image Format (SIF) as apptainer writes it: a 128-byte global header, a table of
// fixed-size 585-byte object descriptors, then the data objects. All integers little-endian, fields
// packed without padding. Facts from the public format (apptainer/sif, pkg/sif); our own code.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlpt::sif {

// ---- Global header: byte offsets of its fields ----
inline constexpr size_t kHeaderSize = 128;
inline constexpr size_t kLaunchOff = 0, kLaunchLen = 32;   // "#!/usr/bin/env run-singularity\n"
inline constexpr size_t kMagicOff = 32, kMagicLen = 10;    // "SIF_MAGIC\0"
inline constexpr size_t kVersionOff = 42, kVersionLen = 3; // "01\0"
inline constexpr size_t kArchOff = 45, kArchLen = 3;       // "02\0" = amd64
inline constexpr size_t kIdOff = 48, kIdLen = 16;          // UUID bytes
inline constexpr size_t kCtimeOff = 64, kMtimeOff = 72, kDfreeOff = 80, kDtotalOff = 88;
inline constexpr size_t kDescrOffOff = 96, kDescrLenOff = 104, kDataOffOff = 112, kDataLenOff = 120;

inline constexpr const char* kLaunchScript = "#!/usr/bin/env run-singularity\n";
inline constexpr const char* kMagic = "SIF_MAGIC";
inline constexpr const char* kVersion = "01";

// ---- Descriptor: byte offsets within one 585-byte entry ----
inline constexpr size_t kDescriptorSize = 585;
inline constexpr size_t kDDataTypeOff = 0, kDUsedOff = 4, kDIdOff = 5, kDGroupOff = 9, kDLinkOff = 13;
inline constexpr size_t kDOffsetOff = 17, kDSizeOff = 25, kDStoreLenOff = 33, kDCtimeOff = 41;
inline constexpr size_t kDMtimeOff = 49, kDUidOff = 57, kDGidOff = 65;
inline constexpr size_t kDNameOff = 73, kDNameLen = 128, kDExtraOff = 201, kDExtraLen = 384;
// Partition descriptors keep {fstype i32, parttype i32, arch[3]} at the start of `extra`.

// Layout apptainer uses for a new image: 48 descriptors at 4096, data at 32768, objects page-aligned.
inline constexpr int64_t kDefaultDescriptors = 48;
inline constexpr int64_t kDescriptorsStart = 4096;
inline constexpr int64_t kDataStart = 32768;
inline constexpr int64_t kObjectAlign = 4096;
inline constexpr uint32_t kGroupMask = 0xf0000000u;  // group ids carry this mask
inline constexpr uint32_t kDefaultGroup = kGroupMask | 1u;

enum class DataType : int32_t {
  Deffile = 0x4001, EnvVar = 0x4002, Labels = 0x4003, Partition = 0x4004, Signature = 0x4005,
  GenericJson = 0x4006, Generic = 0x4007, CryptoMessage = 0x4008,
};
enum class FsType : int32_t { Squashfs = 1, Ext3 = 2, ImmutableObject = 3, Raw = 4, EncryptedSquashfs = 5 };
enum class PartType : int32_t { System = 1, PrimarySystem = 2, Data = 3, Overlay = 4 };

std::string data_type_name(int32_t t);
std::string fs_type_name(int32_t t);
std::string part_type_name(int32_t t);
// "02" -> "amd64" etc.; unknown codes are returned as they are.
std::string arch_name(const std::string& code);
// The SIF code for the machine this was built for ("02" on x86-64).
std::string host_arch_code();

struct Header {
  std::string launch;   // trailing NULs trimmed
  std::string magic;    // trimmed
  std::string version;  // trimmed
  std::string arch;     // trimmed code, e.g. "02"
  std::array<uint8_t, 16> id{};
  int64_t ctime = 0, mtime = 0;
  int64_t dfree = 0, dtotal = 0;
  int64_t descr_offset = 0, descr_length = 0;
  int64_t data_offset = 0, data_length = 0;
};

struct Descriptor {
  int32_t data_type = 0;
  bool used = false;
  uint32_t id = 0, group_id = 0, linked_id = 0;
  int64_t offset = 0, size = 0, store_length = 0;
  int64_t ctime = 0, mtime = 0, uid = 0, gid = 0;
  std::string name;  // trimmed
  std::array<uint8_t, kDExtraLen> extra{};
  // Partition metadata (meaningful when data_type == Partition).
  int32_t fs_type() const;
  int32_t part_type() const;
  std::string part_arch() const;
};

std::string uuid_string(const std::array<uint8_t, 16>& id);

// Little-endian (de)serialisation of the two records.
void encode_header(const Header& h, uint8_t* out /* kHeaderSize */);
Header decode_header(const uint8_t* in);
void encode_descriptor(const Descriptor& d, uint8_t* out /* kDescriptorSize */);
Descriptor decode_descriptor(const uint8_t* in);

// What went wrong reading an image; tests and callers branch on `kind`, people read what().
enum class ErrorKind {
  Io,             // missing or unreadable file
  Truncated,      // the file ends before a structure it declares
  BadMagic,       // not a SIF file
  BadVersion,     // a SIF version this reader does not know
  BadHeader,      // inconsistent header counts or offsets
  BadDescriptor,  // a descriptor's offset/size is out of the file or the data section
  Overlap,        // two data objects share bytes
  NoPartition,    // no primary system partition
  WrongFsType,    // the primary partition is not squashfs
  BadSquashfs,    // the partition does not start with a squashfs superblock
};
const char* error_kind_name(ErrorKind k);

class SifError : public std::runtime_error {
 public:
  SifError(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace mlpt::sif
