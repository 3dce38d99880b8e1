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

  // epkd: a memfd of `bytes` (> 0) named `name`, mapped read-write here until seal(). Its pages read as zeros until
  // written.
  static Result<HostTierMemory> create(std::uint64_t bytes, const std::string& name);
  // Before seal(): the bytes to fill.
  std::span<std::byte> writable() const;
  // Seals the memfd (write, shrink, grow, seal) with the read-write mapping replaced by a read-only one at the same
  // address, so bytes() stays valid throughout: epkd's decodes read the parts already filled while the last ones
  // are written and the tier is sealed. F_SEAL_WRITE is refused while any shared mapping could write (before Linux
  // 6.7 a read-only shared map of a read-write fd counts too), so the address is first held by a private read-only
  // map of the same pages, then by the shared read-only one once sealed. After it writable() is empty, also when it
  // failed.
  Status seal();

  // A client: maps `fd` read-only after checking that it is sealed as seal() leaves it and holds exactly `bytes`.
  // kBadInput naming what is wrong otherwise (an fd that could still change under this process is refused).
  static Result<HostTierMemory> map(UniqueFd fd, std::uint64_t bytes, const std::string& what);

  std::span<const std::byte> bytes() const;
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  bool sealed() const { return sealed_; }

 private:
  UniqueFd fd_;
  Mapping mapping_;
  std::uint64_t size_ = 0;
  bool sealed_ = false;
  bool writable_ = true;  // until seal() starts
};

}  // namespace epk::shm
