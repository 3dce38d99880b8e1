// A read-only memory map of a whole file (move-only RAII). Large checkpoints are read through this, never copied.
// Every live map is watched for SIGBUS (codec/common/map_faults.h): where the handler is installed (epkd), a file
// truncated or unreadable under its map reads as zeros there and damaged() turns true.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "codec/common/result.h"

namespace epk {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);
  // Maps the file open on `fd` (not consumed: the map outlives it); `name` names it in errors and path().
  static Result<MappedFile> map_fd(int fd, const std::string& name);

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Whether a read of this map hit a page the file no longer backs (truncated, replaced in place, an I/O error):
  // bytes read from it since may be zeros. Only where the SIGBUS handler is installed; false otherwise.
  bool damaged() const;

 private:
  void reset();

  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
  int watch_ = -1;  // map_faults::kNoWatch
};

}  // namespace epk
