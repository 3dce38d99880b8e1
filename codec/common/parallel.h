// A small fork-join helper for CPU codec work: blocks of an index range handed out to threads through an atomic
// counter. fn(begin, end) must not throw; its calls for different blocks may run concurrently.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace epk {

template <class Fn>
void parallel_for_blocks(std::size_t n, std::size_t block, int threads, Fn&& fn) {
  if (n == 0) return;
  block = std::max<std::size_t>(block, 1);
  const std::size_t blocks = (n + block - 1) / block;
  const std::size_t workers = std::min<std::size_t>(std::size_t(std::max(threads, 1)), blocks);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (;;) {
      const std::size_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks) return;
      const std::size_t begin = b * block;
      fn(begin, std::min(n, begin + block));
    }
  };
  if (workers <= 1) {
    work();
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (std::size_t i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace epk
