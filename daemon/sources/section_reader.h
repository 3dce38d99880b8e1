// Reading byte ranges of a file (a .epk's tensor sections) into memory with io_uring, for epkd's resident tier.
//
// PinnedArena is the destination: anonymous memory, page-aligned, populated and locked (mlock) where the limits allow,
// and registered with the ring (io_uring_register_buffers) so that reads into it are fixed-buffer reads: the kernel
// pins its pages once instead of on every request. SectionReader splits each range into requests of at most
// `chunk_bytes` and keeps up to `queue_depth` in flight. Where the file offset, the length and the destination are
// all 4096-aligned it reads through an O_DIRECT descriptor (docs/FORMAT.md 4.2: sections of 1 MiB or more start at
// 4096), the rest buffered; a short read is resubmitted for what is left (buffered if what is left is no longer
// aligned), a filesystem that refuses O_DIRECT falls back to buffered reads, and a file that ends inside a range is an
// error naming the file and the range. pread_ranges() is the plain reference beside it (tests compare the two bit for
// bit).
//
// A SectionReader is one ring: use it from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/common/result.h"

namespace epk::daemon {

inline constexpr std::uint64_t kDirectAlign = 4096;

// Anonymous host memory for a resident tier: move-only, unmapped on destruction.
class PinnedArena {
 public:
  PinnedArena() = default;
  ~PinnedArena();
  PinnedArena(PinnedArena&& other) noexcept;
  PinnedArena& operator=(PinnedArena&& other) noexcept;  // unmaps ours first
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;

  // `bytes` rounded up to the page size; `lock`: mlock it (best effort: locked() says whether it worked, e.g. under
  // RLIMIT_MEMLOCK without CAP_IPC_LOCK it does not). Pages are populated either way.
  static Result<PinnedArena> create(std::uint64_t bytes, bool lock = true);

  std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  std::span<std::uint8_t> span() const { return {data_, size_}; }
  bool locked() const { return locked_; }

 private:
  void reset();
  std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
  bool locked_ = false;
};

// Read [offset, offset + size) of the file into dst (size bytes of memory the caller owns).
struct ReadRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint8_t* dst = nullptr;
};

struct ReadStats {
  std::uint64_t direct_bytes = 0;    // through O_DIRECT
  std::uint64_t buffered_bytes = 0;  // through the page cache
  std::uint64_t requests = 0;        // submissions, resubmissions included
  std::uint64_t short_reads = 0;     // completions with fewer bytes than asked (resubmitted)
  std::uint64_t fixed_requests = 0;  // read_fixed into registered memory
};

struct SectionReaderOptions {
  unsigned queue_depth = 64;
  std::uint64_t chunk_bytes = 1 << 20;  // the most one request reads; a multiple of kDirectAlign
  bool direct = true;                   // O_DIRECT where the alignment allows
  // Tests: every completion is taken as at most this many bytes, as if the kernel had returned a short read (the
  // bytes past it are read again). 0: off.
  std::uint64_t clip_completions_to = 0;
};

class SectionReader {
 public:
  SectionReader();
  ~SectionReader();
  SectionReader(SectionReader&&) noexcept;
  SectionReader& operator=(SectionReader&&) noexcept;  // tears our ring down first

  // kUnsupported when io_uring is not available here (old kernel, seccomp, io_uring_disabled): callers fall back to
  // pread_ranges.
  static Result<SectionReader> create(const SectionReaderOptions& options = {});

  // Registers `memory` (an arena that outlives the reader, or until unregister) as fixed buffers. An error leaves the
  // reader usable without them (reads then use plain requests).
  Status register_memory(std::span<std::uint8_t> memory);
  bool registered() const;

  // Reads every range of the file open on `file` (not consumed; `path` names it in errors). Errors: kIo naming the
  // file, the range and the OS error; kBadInput when the file ends before a range does ("the file ends at N");
  // kInvalidArgument for a range whose end overflows; kUnsupported when there is no /proc/self/fd to open the file
  // again through (pread_ranges reads it then), kIo when `file` cannot be opened again through it.
  Result<ReadStats> read(int file, const std::string& path, std::span<const ReadRange> ranges);

 private:
  struct Ring;
  std::unique_ptr<Ring> ring_;
};

// The reference: pread() each range in order, with the same errors.
Status pread_ranges(int file, const std::string& path, std::span<const ReadRange> ranges);

}  // namespace epk::daemon
