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
