// Move-only owners of a file descriptor and of a shared mapping. Move assignment releases the old resource first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/common/result.h"

namespace epk::shm {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any), then owns `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A MAP_SHARED mapping of a whole fd (or part of it), unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  ~Mapping() { reset(); }
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `size` bytes of `fd` from offset 0, shared: read-write, or read-only. `what` names the mapping in errors.
  static Result<Mapping> map_shared(int fd, std::size_t size, const char* what);
  static Result<Mapping> map_shared_readonly(int fd, std::size_t size, const char* what);

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<std::uint8_t> bytes() const { return {data_, size_}; }

 private:
  static Result<Mapping> map(int fd, std::size_t size, int prot, const char* what);
  void reset();

  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace epk::shm
