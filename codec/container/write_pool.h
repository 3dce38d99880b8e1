// Writes tensors into a container::Writer from several threads. Copying a model's bytes into the page cache and
// hashing them is what bounds `epk compress` once tensors are encoded on a GPU (docs/measurements/
// compress-end-to-end.md), so add() reserves each tensor's place
// on the caller's thread, in call order (the file is byte for byte what Writer::add_tensor in that order writes),
// and a worker hashes and writes its bytes. At most `max_pending` tensors wait for a worker; add() blocks beyond
// that, which bounds the memory the callers' results hold.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/common/result.h"
#include "codec/container/writer.h"

namespace epk::container {

class WritePool {
 public:
  // `writer` outlives the pool. threads >= 1, max_pending >= 1.
  WritePool(Writer& writer, int threads, std::size_t max_pending);
  ~WritePool();  // waits for the writes queued (finish() not called: the writer is then left unfinished)
  WritePool(const WritePool&) = delete;
  WritePool& operator=(const WritePool&) = delete;

  // Reserves the tensor's place now (Writer::reserve_tensor's errors, which leave the writer usable), then queues
  // its bytes for a worker. `keep` owns what `buffers` point into (nullptr when they outlive finish()); it is
  // released once they are written. After a worker's write failed, add() returns that error.
  Status add(const TensorSpec& spec, std::vector<BufferData> buffers, std::shared_ptr<const void> keep);

  // Waits for every write, then Writer::finish. The first write error is returned instead, the writer unfinished.
  Status finish();

 private:
  struct Job {
    Writer::Reservation place;
    std::vector<BufferData> buffers;
    std::shared_ptr<const void> keep;
  };
  void work();
  void drain();  // waits until the queue is empty and no job is being written

  Writer& writer_;
  const std::size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::size_t busy_ = 0;  // jobs a worker has taken and not finished
  bool stop_ = false;
  Status error_;  // the first write error
  std::vector<std::thread> threads_;
};

}  // namespace epk::container
