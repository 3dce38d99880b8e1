// Host <-> device copies of pageable memory (a mapped safetensors file, std::vector) at pinned-memory speed: the
// bytes go through two pinned staging slots; a team of host threads copies one chunk into (or out of) a slot while
// the other slot's DMA runs. A pageable cudaMemcpy is several times slower (docs/measurements/gpu-encoder.md); the
// device encoder's source upload and payload download use this instead. One copier per host thread (its slots and
// team are its own).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "codec/common/phased_team.h"

namespace epk::cuda {

class StagedCopier {
 public:
  // Bytes per staging slot (one chunk, one DMA).
  static constexpr std::size_t kChunk = std::size_t{8} << 20;
  // Below this many bytes the calling thread copies alone: waking the team costs more than it saves.
  static constexpr std::size_t kTeamMinBytes = std::size_t{1} << 20;

  // The team: one thread a core, at most 16, less spare_cores (at least one: the caller), for a copier that runs
  // beside other host work that needs a core of its own.
  explicit StagedCopier(int spare_cores = 0) : spare_cores_(spare_cores) {}
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;
  ~StagedCopier();

  // Host bytes to device memory on stream; returns once the last chunk has landed.
  cudaError_t to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream);
  // Rows of host bytes (row_bytes each; row r at src + r * row_bytes) gathered to device memory, rows[i] at
  // dst + i * row_bytes; returns once the last chunk has landed.
  cudaError_t rows_to_device(void* dst, const void* src, std::size_t row_bytes, std::span<const std::uint32_t> rows,
                             cudaStream_t stream);
  // Device bytes to host memory on stream; returns once every byte is in dst. Fresh memory in dst is faulted in by
  // the team's threads together, in the order they copy.
  cudaError_t to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream);

 private:
  cudaError_t init();
  // n bytes to dst on the device, read(to, at, len) putting bytes [at, at + len) of them at to (in a slot).
  cudaError_t fill_device(void* dst, std::size_t n,
                          const std::function<void(std::byte* to, std::size_t at, std::size_t len)>& read,
                          cudaStream_t stream);
  // Phase k = 0 .. chunks - 1: share(k, member, members) on every member, then between(k) on one of them (its
  // false stops the rest). The team when n is large enough to be worth waking it, else the calling thread alone.
  bool phases(std::size_t chunks, std::size_t n, const std::function<void(std::size_t, int, int)>& share,
              const std::function<bool(std::size_t)>& between);
  void* slot_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  std::unique_ptr<PhasedTeam> team_;
  int spare_cores_ = 0;
};

}  // namespace epk::cuda
