// Writes a file under a temporary name in the destination's directory and renames it into place on commit(), after
// fsync: a crash or an error never leaves a half-written file under the final name. Writes are streamed (no whole-file
// buffer), so tens of GB pass through a small buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "codec/common/result.h"

namespace epk {

class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter();  // not committed: the temporary file is removed
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  static Result<AtomicFileWriter> create(const std::string& final_path);

  // Appends at the current end.
  Status write(std::span<const std::uint8_t> bytes);
  Status write(const void* data, std::size_t size) {
    return write(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(data), size));
  }
  // Appends zero bytes until position() is a multiple of `alignment` (a power of two).
  Status pad_to(std::uint64_t alignment);
  // Overwrites bytes already written (to patch a header once sizes are known).
  Status write_at(std::uint64_t offset, std::span<const std::uint8_t> bytes);

  // Moves the end past `bytes` not written yet and returns where they start: the caller fills them later with
  // write_reserved, possibly from another thread. Bytes never filled read as zero (a hole), as padding must.
  std::uint64_t reserve(std::uint64_t bytes);
  // Writes into a range reserve() returned. Safe to call from several threads at once for disjoint ranges, and
  // beside reserve() and write() on another thread: it reads only the descriptor, which lives until commit.
  Status write_reserved(std::uint64_t offset, std::span<const std::uint8_t> bytes) const;
  // Asks the kernel to start writing [offset, offset + bytes) to the disk now (sync_file_range, no wait), so that
  // commit()'s fsync finds most of a large file already written. Best effort: errors surface at commit.
  void start_writeback(std::uint64_t offset, std::uint64_t bytes) const;

  std::uint64_t position() const { return position_; }
  const std::string& final_path() const { return final_path_; }

  // fsync, rename over the final path, fsync the directory.
  Status commit();

 private:
  void abandon();

  int fd_ = -1;
  std::uint64_t position_ = 0;
  std::string final_path_;
  std::string temp_path_;
};

}  // namespace epk
