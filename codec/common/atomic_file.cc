#include "codec/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <utility>

namespace epk {
namespace {

std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status write_all_at(int fd, const std::uint8_t* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_errno_error(path + ": write", errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
  return {};
}

}  // namespace

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      position_(std::exchange(other.position_, 0)),
      final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    fd_ = std::exchange(other.fd_, -1);
    position_ = std::exchange(other.position_, 0);
    final_path_ = std::move(other.final_path_);
    temp_path_ = std::move(other.temp_path_);
  }
  return *this;
}

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
  fd_ = -1;
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& final_path) {
  AtomicFileWriter w;
  w.final_path_ = final_path;
  w.temp_path_ = final_path + ".tmp.XXXXXX";
  int fd = ::mkostemp(w.temp_path_.data(), O_CLOEXEC);
  if (fd < 0) return make_errno_error(final_path + ": cannot create temporary file " + w.temp_path_, errno);
  ::fchmod(fd, 0644);
  w.fd_ = fd;
  return w;
}

Status AtomicFileWriter::write(std::span<const std::uint8_t> bytes) {
  EPK_TRY(write_all_at(fd_, bytes.data(), bytes.size(), position_, temp_path_));
  position_ += bytes.size();
  return {};
}

Status AtomicFileWriter::pad_to(std::uint64_t alignment) {
  static constexpr std::array<std::uint8_t, 4096> kZeros{};
  std::uint64_t pad = (alignment - position_ % alignment) % alignment;
  while (pad > 0) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(pad, kZeros.size()));
    EPK_TRY(write(std::span<const std::uint8_t>(kZeros.data(), n)));
    pad -= n;
  }
  return {};
}

Status AtomicFileWriter::write_at(std::uint64_t offset, std::span<const std::uint8_t> bytes) {
  if (offset + bytes.size() > position_)
    return make_error(ErrorCode::kInternal, temp_path_ + ": write_at past the written end");
  return write_all_at(fd_, bytes.data(), bytes.size(), offset, temp_path_);
}

std::uint64_t AtomicFileWriter::reserve(std::uint64_t bytes) {
  const std::uint64_t at = position_;
  position_ += bytes;
  return at;
}

Status AtomicFileWriter::write_reserved(std::uint64_t offset, std::span<const std::uint8_t> bytes) const {
  return write_all_at(fd_, bytes.data(), bytes.size(), offset, temp_path_);
}

void AtomicFileWriter::start_writeback(std::uint64_t offset, std::uint64_t bytes) const {
  ::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes), SYNC_FILE_RANGE_WRITE);
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return make_error(ErrorCode::kInternal, final_path_ + ": commit without an open file");
  if (::fsync(fd_) != 0) return make_errno_error(temp_path_ + ": fsync", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_path_.c_str());
    return make_errno_error(temp_path_ + ": close", errno);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    int e = errno;
    ::unlink(temp_path_.c_str());
    return make_errno_error("rename " + temp_path_ + " -> " + final_path_, e);
  }
  int dfd = ::open(directory_of(final_path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some filesystems refuse fsync on directories
    ::close(dfd);
  }
  return {};
}

}  // namespace epk
