// Buffer pools shared between epkd and its clients. A pool is one exportable allocation (a POSIX fd) that the daemon
// carves into slots; clients receive the fd once (SCM_RIGHTS). Host pools are memfd memory that only epkd can write
// (see HostPool); a device pool (CUDA VMM exported as a POSIX fd, shm/device_pool.h) implements the same interface on
// GPU machines. docs/SECURITY.md says which client may write what.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/common/result.h"
#include "shm/unique_fd.h"

namespace epk::shm {

// Stored on the wire: never renumber.
enum class PoolKind : std::uint32_t {
  kHost = 0,    // memfd; clients mmap it
  kDevice = 1,  // CUDA VMM allocation exported as a POSIX fd; clients import, map and set access
};

// Daemon side: the owner of a pool.
class Pool {
 public:
  virtual ~Pool() = default;
  virtual PoolKind kind() const = 0;
  virtual int device() const = 0;  // CUDA ordinal, -1 for host pools
  virtual std::uint64_t size() const = 0;
  // The fd passed to clients; borrowed, stays owned by the pool.
  virtual int export_fd() const = 0;
  // A CPU-writable view of [offset, offset + len); empty for pools the CPU cannot address (device pools).
  virtual std::span<std::uint8_t> host_span(std::uint64_t offset, std::uint64_t len) = 0;
};

// A memfd of `size` bytes (sparse until touched), mapped shared by the daemon. Once epkd has mapped it, the memfd is
// sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE, F_SEAL_SEAL), as the decode status table is: whoever holds
// the fd can no longer resize it (a truncation would SIGBUS epkd at its next decode), write() to it, punch holes in
// it, map it writable or add seals; epkd's own mapping, made before the seal, is the only way to write the slots.
// Clients map it read-only. Evicted ranges keep their pages: hole punching is sealed off too.
class HostPool final : public Pool {
 public:
  static Result<std::unique_ptr<HostPool>> create(const std::string& name, std::uint64_t size);

  PoolKind kind() const override { return PoolKind::kHost; }
  int device() const override { return -1; }
  std::uint64_t size() const override { return mapping_.size(); }
  int export_fd() const override { return fd_.get(); }
  std::span<std::uint8_t> host_span(std::uint64_t offset, std::uint64_t len) override;

 private:
  HostPool(UniqueFd fd, Mapping mapping) : fd_(std::move(fd)), mapping_(std::move(mapping)) {}

  UniqueFd fd_;
  Mapping mapping_;
};

// Client side: a pool received from the daemon and mapped into this process.
class ImportedPool {
 public:
  // Maps a received host pool fd, read-only. `size` comes from the daemon's hello reply and is checked against the
  // fd's size.
  static Result<ImportedPool> import_host(UniqueFd fd, std::uint64_t size);

  // Read-only memory: a store through it faults.
  std::uint8_t* data() const { return mapping_.data(); }
  std::uint64_t size() const { return mapping_.size(); }

 private:
  UniqueFd fd_;
  Mapping mapping_;
};

}  // namespace epk::shm
