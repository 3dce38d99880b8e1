// A model's host tier: its compressed tier region (every lattice-rans tensor's stored buffers at the places
// codec/cuda/decode/tier_layout.h gives) in host memory that epkd fills once and shares read-only with every client
// that decodes the model itself (open_stored). A memfd: epkd writes it through one mapping, then drops that mapping
// and seals the memfd against writes, resizing and further seals, so no process (epkd included) can change a byte
// that epkd checked, and a client that maps it read-only needs no trust beyond the model's own uids/gids
// (docs/SECURITY.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "codec/common/result.h"
#include "shm/unique_fd.h"

namespace epk::shm {

class HostTierMemory {
 public:
  HostTierMemory() = default;

  // epkd: a memfd of `bytes` (> 0) named `name`, mapped twice here: read-write until seal(), and read-only (bytes())
  // from now on at one address, so decodes may read the parts already filled while others are written and while
  // the memfd is sealed. Its pages read as zeros until written. kNoSpace when `bytes` exceeds the host memory
  // available now (MemAvailable): a later shortage (other processes growing during the fill) still meets the OOM
  // killer, as any process's memory does.
  static Result<HostTierMemory> create(std::uint64_t bytes, const std::string& name);
  // Before seal(): the bytes to fill.
  std::span<std::byte> writable() const;
  // Drops the read-write mapping and seals the memfd (write, shrink, grow, seal); bytes() is unchanged. After it (also
  // when it failed) writable() is empty.
  Status seal();

  // A client: maps `fd` read-only after checking that it is sealed as seal() leaves it and holds exactly `bytes`.
  // kBadInput naming what is wrong otherwise (an fd that could still change under this process is refused).
  static Result<HostTierMemory> map(UniqueFd fd, std::uint64_t bytes, const std::string& what);

  // Every read-only view (epkd's and a client's) maps a read-only reopening of the memfd (/proc/self/fd): a shared
  // map of a read-write fd, even PROT_READ, may be made writable, so it blocks F_SEAL_WRITE before the seal and,
  // before Linux 6.7, is refused after it.

  std::span<const std::byte> bytes() const;
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  bool sealed() const { return sealed_; }

 private:
  UniqueFd fd_;
  Mapping mapping_;   // read-only
  Mapping writable_;  // until seal()
  std::uint64_t size_ = 0;
  bool sealed_ = false;
  bool filling_ = false;  // created here, seal() not yet called
};

}  // namespace epk::shm
