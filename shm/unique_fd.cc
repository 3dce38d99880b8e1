#include "shm/unique_fd.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace epk::shm {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // close errors on a descriptor we own are not actionable
  fd_ = fd;
}

Mapping::Mapping(Mapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Mapping::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<Mapping> Mapping::map(int fd, std::size_t size, int prot, const char* what) {
  if (size == 0) return make_error(ErrorCode::kInvalidArgument, std::string(what) + ": cannot map 0 bytes");
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return make_errno_error(std::string(what) + ": mmap of " + std::to_string(size) + " bytes", errno);
  Mapping m;
  m.data_ = static_cast<std::uint8_t*>(p);
  m.size_ = size;
  return m;
}

Result<Mapping> Mapping::map_shared(int fd, std::size_t size, const char* what) {
  return map(fd, size, PROT_READ | PROT_WRITE, what);
}

Result<Mapping> Mapping::map_shared_readonly(int fd, std::size_t size, const char* what) {
  return map(fd, size, PROT_READ, what);
}

}  // namespace epk::shm
