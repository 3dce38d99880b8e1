#include "codec/cuda/encode/encode_copy.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>
#include <utility>

namespace epk::cuda {

namespace {

// Every core: the copies are bound by memory bandwidth, and more threads copied faster on the H200 host
// (docs/measurements/gpu-encoder.md).
int team_members(int spare_cores) {
  const int cores = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  return std::max(1, cores - spare_cores);
}

// Member m's part of a len-byte chunk: contiguous parts in multiples of 4 KiB, so that members fault in different
// pages of a page-aligned destination.
std::pair<std::size_t, std::size_t> part(std::size_t len, int m, int members) {
  constexpr std::size_t kPage = 4096;
  const std::size_t per = ((len + std::size_t(members) - 1) / std::size_t(members) + kPage - 1) / kPage * kPage;
  const std::size_t b = std::min(len, per * std::size_t(m));
  return {b, std::min(len, b + per)};
}

}  // namespace

StagedCopier::~StagedCopier() {
  team_.reset();
  for (int i = 0; i < 2; ++i) {
    if (done_[i]) cudaEventDestroy(done_[i]);
    if (slot_[i]) cudaFreeHost(slot_[i]);
  }
}

cudaError_t StagedCopier::init() {
  for (int i = 0; i < 2; ++i) {
    if (!slot_[i]) {
      if (cudaError_t e = cudaMallocHost(&slot_[i], kChunk); e != cudaSuccess) return e;
    }
    if (!done_[i]) {
      if (cudaError_t e = cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming); e != cudaSuccess) return e;
    }
  }
  if (!team_) {
    try {
      team_ = std::make_unique<PhasedTeam>(team_members(spare_cores_));
    } catch (const std::system_error&) {
      team_ = std::make_unique<PhasedTeam>(1);  // no threads to be had: the calling thread copies alone
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
  }
  return cudaSuccess;
}

bool StagedCopier::phases(std::size_t chunks, std::size_t n, const std::function<void(std::size_t, int, int)>& share,
                          const std::function<bool(std::size_t)>& between) {
  if (n < kTeamMinBytes || team_->members() == 1) {
    for (std::size_t k = 0; k < chunks; ++k) {
      share(k, 0, 1);
      if (!between(k)) return false;
    }
    return true;
  }
  // between() may run on any member: each one works on the caller's device.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  const int members = team_->members();
  return team_->run(
      chunks, [&](std::size_t k, int m) { share(k, m, members); }, between, [device] { cudaSetDevice(device); });
}

cudaError_t StagedCopier::to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream) {
  const auto* from = static_cast<const std::byte*>(src);
  return fill_device(
      dst, n, [from](std::byte* to, std::size_t at, std::size_t len) { std::memcpy(to, from + at, len); }, stream);
}

cudaError_t StagedCopier::rows_to_device(void* dst, const void* src, std::size_t row_bytes,
                                         std::span<const std::uint32_t> rows, cudaStream_t stream) {
  if (row_bytes == 0) return cudaSuccess;
  const auto* from = static_cast<const std::byte*>(src);
  auto read = [&](std::byte* to, std::size_t at, std::size_t len) {
    while (len) {
      const std::size_t i = at / row_bytes, in_row = at % row_bytes;
      const std::size_t take = std::min(len, row_bytes - in_row);
      std::memcpy(to, from + std::size_t(rows[i]) * row_bytes + in_row, take);
      to += take;
      at += take;
      len -= take;
    }
  };
  return fill_device(dst, rows.size() * row_bytes, read, stream);
}

cudaError_t StagedCopier::fill_device(void* dst, std::size_t n,
                                      const std::function<void(std::byte*, std::size_t, std::size_t)>& read,
                                      cudaStream_t stream) {
  if (cudaError_t e = init(); e != cudaSuccess) return e;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  auto* to = static_cast<std::byte*>(dst);
  auto len_of = [&](std::size_t k) { return std::min(kChunk, n - k * kChunk); };
  cudaError_t err = cudaSuccess;
  // Phase k: the members copy chunk k into slot k % 2. Between phases: chunk k's DMA is started, and the DMA of
  // chunk k - 1 (from the other slot, which phase k + 1 refills) is waited for.
  auto share = [&](std::size_t k, int m, int members) {
    const auto [b, e] = part(len_of(k), m, members);
    if (b < e) read(static_cast<std::byte*>(slot_[k & 1]) + b, k * kChunk + b, e - b);
  };
  auto between = [&](std::size_t k) {
    const int s = int(k & 1);
    err = cudaMemcpyAsync(to + k * kChunk, slot_[s], len_of(k), cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) err = cudaEventRecord(done_[s], stream);
    if (err == cudaSuccess && k >= 1 && k + 1 < chunks) err = cudaEventSynchronize(done_[s ^ 1]);
    return err == cudaSuccess;
  };
  phases(chunks, n, share, between);
  const cudaError_t drained = cudaStreamSynchronize(stream);
  return err != cudaSuccess ? err : drained;
}

cudaError_t StagedCopier::to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream) {
  if (cudaError_t e = init(); e != cudaSuccess) return e;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst);
  auto len_of = [&](std::size_t k) { return std::min(kChunk, n - k * kChunk); };
  auto issue = [&](std::size_t k) {
    const int s = int(k & 1);
    const cudaError_t e = cudaMemcpyAsync(slot_[s], from + k * kChunk, len_of(k), cudaMemcpyDeviceToHost, stream);
    return e == cudaSuccess ? cudaEventRecord(done_[s], stream) : e;
  };
  cudaError_t err = cudaSuccess;
  if (chunks) err = issue(0);
  if (err == cudaSuccess && chunks > 1) err = issue(1);
  if (err == cudaSuccess && chunks) err = cudaEventSynchronize(done_[0]);
  // Phase k: the members copy chunk k out of slot k % 2 (chunk k + 1's DMA runs meanwhile). Between phases: chunk
  // k + 2's DMA is started into the slot just emptied, and chunk k + 1's is waited for.
  auto share = [&](std::size_t k, int m, int members) {
    const auto [b, e] = part(len_of(k), m, members);
    if (b < e) std::memcpy(to + k * kChunk + b, static_cast<const std::byte*>(slot_[k & 1]) + b, e - b);
  };
  auto between = [&](std::size_t k) {
    if (k + 2 < chunks) err = issue(k + 2);
    if (err == cudaSuccess && k + 1 < chunks) err = cudaEventSynchronize(done_[(k + 1) & 1]);
    return err == cudaSuccess;
  };
  if (err == cudaSuccess) phases(chunks, n, share, between);
  if (err != cudaSuccess) cudaStreamSynchronize(stream);  // no DMA into a slot outlives the call
  return err;
}

}  // namespace epk::cuda
