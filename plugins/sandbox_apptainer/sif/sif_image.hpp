// Reading and writing SIF files. The reader trusts nothing in the file: every count, offset and
// size is checked against the file's real size before it is used, and each failure names the file
// and the field (SifError with an ErrorKind).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sif_format.hpp"

namespace mlpt::sif {

struct SifImage {
  std::filesystem::path path;
  uint64_t file_size = 0;
  Header header;
  std::vector<Descriptor> descriptors;  // the used ones, in table order
  size_t primary = 0;                   // index into `descriptors` of the primary system partition
  uint64_t squashfs_bytes_used = 0;     // from the partition's superblock

  const Descriptor& primary_partition() const { return descriptors[primary]; }
};

// Opens and validates `path`; throws SifError.
SifImage read_sif(const std::filesystem::path& path);

struct BuildOptions {
  std::string compression = "gzip";  // mksquashfs -comp
  int64_t time = -1;                 // header/descriptor times; -1: SOURCE_DATE_EPOCH, else now
  std::string mksquashfs = "mksquashfs";
  int processors = 0;                // 0: mksquashfs default
};

// Turns `dir` into `out` with one primary system squashfs partition. mksquashfs runs with
// deterministic flags (all files owned by root, fixed timestamps) so the same tree and the same
// `time` give the same bytes; the image id is derived from the partition's content.
// Throws SifError(Io) with mksquashfs's output when it fails.
SifImage build_sif(const std::filesystem::path& dir, const std::filesystem::path& out,
                   const BuildOptions& options = {});

// Writes a SIF around an existing squashfs file (used by build_sif and by tests).
void write_sif(const std::filesystem::path& squashfs, const std::filesystem::path& out, int64_t time);

// 64-bit FNV-1a over the bytes [offset, offset+size) of `path`: a content key for caches.
uint64_t content_hash(const std::filesystem::path& path, uint64_t offset, uint64_t size);

}  // namespace mlpt::sif
