// Holds a CUDA stream of this process until released (epkd_gpu_test): a one-thread kernel on the stream spins on a
// flag in pinned host memory, so work queued behind it (a release fence's event record) stays pending. The kernel
// gives up by itself after `max_ms` (the test then sees timed_out()), so a failed test never leaves the GPU held.
#pragma once

#include <string>

namespace epk::test_harness {

class StreamHold {
 public:
  // Launches the kernel on `stream` (a CUstream / cudaStream_t of device `device`'s primary context).
  StreamHold(void* stream, int device, unsigned max_ms);
  ~StreamHold();
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  // Empty when the kernel was launched; otherwise what failed.
  const std::string& error() const { return error_; }
  // Lets the kernel finish (idempotent). Work queued behind it then runs.
  void release();
  // Whether the kernel stopped on its own deadline instead of release() (read after the stream has synchronised).
  bool timed_out() const;

 private:
  volatile unsigned* flags_ = nullptr;  // [0] release, [1] the kernel timed out
  std::string error_;
};

}  // namespace epk::test_harness
