#include "shm/host_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <optional>

namespace epk::shm {
namespace {

// The seals seal() adds; a client refuses an fd lacking any of them.
constexpr int kHostTierSeals = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// A read-only mapping of the memfd `fd` through a read-only reopening of it (HostTierMemory's class comment).
Result<Mapping> map_read_only(int fd, std::uint64_t bytes, const std::string& what) {
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd ro(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (ro.get() < 0) return make_errno_error(what + ": reopening the host tier read-only (" + path + ")", errno);
  return Mapping::map_shared_readonly(ro.get(), bytes, "host tier");  // the map keeps the file; ro may close
}

// The kernel's estimate of memory that can be allocated without swapping (MemAvailable, in /proc/meminfo): free
// memory plus what it can reclaim (page cache, the checkpoint files' pages among it). None where it cannot be read.
std::optional<std::uint64_t> available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

Result<HostTierMemory> HostTierMemory::create(std::uint64_t bytes, const std::string& name) {
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "host tier '" + name + "': size 0");
  // A memfd's pages are allocated as the fill writes them: a tier larger than the host can hold would otherwise
  // meet the OOM killer halfway through its fill (epkd or another process killed), not a named error.
  if (const std::optional<std::uint64_t> available = available_host_bytes(); available && bytes > *available) {
    return make_error(ErrorCode::kNoSpace, "host tier '" + name + "': " + std::to_string(bytes) +
                                               " bytes needed, the host has " + std::to_string(*available) +
                                               " available (MemAvailable): refused before filling any");
  }
  int raw = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return make_errno_error("host tier '" + name + "': memfd_create", errno);
  HostTierMemory m;
  m.fd_ = UniqueFd(raw);
  if (::ftruncate(m.fd_.get(), static_cast<off_t>(bytes)) != 0) {
    return make_errno_error("host tier '" + name + "': ftruncate to " + std::to_string(bytes), errno);
  }
  EPK_TRY_ASSIGN(m.writable_, Mapping::map_shared(m.fd_.get(), bytes, "host tier"));
  EPK_TRY_ASSIGN(m.mapping_, map_read_only(m.fd_.get(), bytes, "host tier '" + name + "'"));
  m.size_ = bytes;
  m.filling_ = true;
  return m;
}

std::span<std::byte> HostTierMemory::writable() const {
  if (!filling_) return {};
  return {reinterpret_cast<std::byte*>(writable_.data()), writable_.size()};
}

Status HostTierMemory::seal() {
  if (sealed_) return {};
  filling_ = false;
  // F_SEAL_WRITE is refused while a writable shared mapping exists: the read-write map goes first. It also waits for
  // pages something holds pinned (briefly: a driver's DMA) and then refuses with EBUSY: tried again a few times.
  writable_ = Mapping();
  int tries = 0;
  while (::fcntl(fd_.get(), F_ADD_SEALS, kHostTierSeals) != 0) {
    if (errno != EBUSY || ++tries == 3) return make_errno_error("host tier: sealing the memfd", errno);
  }
  sealed_ = true;
  return {};
}

Result<HostTierMemory> HostTierMemory::map(UniqueFd fd, std::uint64_t bytes, const std::string& what) {
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & kHostTierSeals) != kHostTierSeals) {
    return make_error(ErrorCode::kBadInput, what + ": the host tier's fd is not a sealed memfd (seals " +
                                                std::to_string(seals) + "): refused, its bytes could change");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_errno_error(what + ": host tier fstat", errno);
  if (bytes == 0 || static_cast<std::uint64_t>(st.st_size) != bytes) {
    return make_error(ErrorCode::kBadInput, what + ": host tier of " + std::to_string(bytes) +
                                                " bytes announced, the fd holds " + std::to_string(st.st_size));
  }
  HostTierMemory m;
  EPK_TRY_ASSIGN(m.mapping_, map_read_only(fd.get(), bytes, what));
  m.fd_ = std::move(fd);
  m.size_ = bytes;
  m.sealed_ = true;
  return m;
}

std::span<const std::byte> HostTierMemory::bytes() const {
  return {reinterpret_cast<const std::byte*>(mapping_.data()), mapping_.size()};
}

}  // namespace epk::shm
