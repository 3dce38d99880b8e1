#include "codec/common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "codec/common/map_faults.h"

namespace epk {

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      watch_(std::exchange(other.watch_, map_faults::kNoWatch)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();  // release ours first
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    watch_ = std::exchange(other.watch_, map_faults::kNoWatch);
  }
  return *this;
}

bool MappedFile::damaged() const { return map_faults::damaged(watch_); }

void MappedFile::reset() {
  map_faults::unwatch(watch_);  // before the range goes: a later map there is not this file
  watch_ = map_faults::kNoWatch;
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO (or a device) would otherwise block until a writer comes, and the file type is only
  // known once it is open. On a regular file the flag changes nothing.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return make_errno_error(path + ": open", errno);
  auto f = map_fd(fd, path);
  ::close(fd);
  return f;
}

Result<MappedFile> MappedFile::map_fd(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_errno_error(name + ": fstat", errno);
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kBadInput, name + ": not a regular file (a FIFO, device, socket or directory)");
  }
  MappedFile f;
  f.path_ = name;
  f.size_ = static_cast<std::size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      f.size_ = 0;
      return make_errno_error(name + ": mmap", errno);
    }
    f.data_ = static_cast<const std::uint8_t*>(p);
    f.watch_ = map_faults::watch(f.data_, f.size_);
  }
  return f;
}

}  // namespace epk
