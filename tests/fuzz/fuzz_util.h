// Shared by the libFuzzer targets: the readers under test open files by path (they memory-map them), so each input
// is written to one memfd the process keeps, and opened again through /proc/self/fd. One file per process: targets
// run inputs one at a time.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace epk::fuzz {

class InputFile {
 public:
  InputFile() {
    fd_ = ::memfd_create("epk_fuzz_input", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Replaces the file's contents with [data, data + size) and returns its path.
  const std::string& set(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    return path_;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// A property the code under test promises was broken: libFuzzer records the input as a crash.
[[noreturn]] inline void violated() { __builtin_trap(); }

}  // namespace epk::fuzz
