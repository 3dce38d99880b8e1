// epkd's resident tier on the host path (config `resident_compressed = true`): every tensor section of a .epk is read
// into epkd's own memory once, when the model opens, and checksummed there; the model then decodes from that memory
// and the file is no longer mapped, so a later disk failure or a change to the file cannot reach what is served (and
// a truncated file cannot fault the daemon through its map).
//
// The sections are laid out in one PinnedArena (each at a 4096-aligned place, so sections that are 4096-aligned in
// the file, all of 1 MiB or more, are read with O_DIRECT), read by a SectionReader into its registered memory, or by
// pread where io_uring is not available. Raw tensors are read too: they are what a compressed checkpoint keeps
// uncompressed (norms, biases, embeddings unless asked), and with them every byte served comes from memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "daemon/sources/section_reader.h"

namespace epk::daemon {

enum class ResidentRead : std::uint8_t {
  kIoUring,  // SectionReader (falls back to kPread where io_uring is not available)
  kPread,    // pread_ranges, the reference
};

struct ResidentOptions {
  ResidentRead method = ResidentRead::kIoUring;
  SectionReaderOptions reader;
  bool lock = true;              // mlock the arena (best effort)
  bool register_buffers = true;  // io_uring fixed buffers over the arena
  bool verify_checksums = true;  // XXH3 of every buffer against the index, in memory, before the model is served
};

struct ResidentLoadStats {
  std::uint64_t bytes = 0;     // tensor bytes read (sections)
  std::uint64_t sections = 0;  // non-empty sections
  std::uint64_t arena_bytes = 0;
  bool io_uring = false;  // read through io_uring (else pread)
  bool registered = false;
  bool locked = false;
  double arena_ms = 0;     // mapping, populating and locking the arena
  double register_ms = 0;  // io_uring_register_buffers (pins the arena's pages)
  double read_ms = 0;
  double checksum_ms = 0;
  ReadStats reads;  // io_uring only
};

class ResidentModel {
 public:
  // Reads every section of `file` (a reader over the .epk open on `fd`, which is not consumed) into memory and
  // checksums it. The reads are from `fd`, not the path: the sections come from the file the index was read from,
  // even when the path was replaced since. Errors name the file (and the range, tensor or buffer): a truncated file,
  // an OS error, a checksum that does not match.
  static Result<std::unique_ptr<ResidentModel>> load(const container::Reader& file, int fd,
                                                     const ResidentOptions& options = {});

  // The model over the memory copy: same tensors, same order, same names as `file`. Valid while this lives.
  const container::Reader& reader() const { return reader_; }
  // Moves the reader out (the caller keeps this object alive for as long as it uses the reader).
  container::Reader take_reader() { return std::move(reader_); }
  const ResidentLoadStats& stats() const { return stats_; }
  std::span<const std::uint8_t> memory() const { return arena_.span(); }

 private:
  ResidentModel() = default;
  PinnedArena arena_;
  container::Reader reader_;
  ResidentLoadStats stats_;
};

}  // namespace epk::daemon
