#include "shm/host_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace epk::shm {
namespace {

// The seals seal() adds; a client refuses an fd lacking any of them.
constexpr int kHostTierSeals = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

Result<HostTierMemory> HostTierMemory::create(std::uint64_t bytes, const std::string& name) {
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "host tier '" + name + "': size 0");
  int raw = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return make_errno_error("host tier '" + name + "': memfd_create", errno);
  HostTierMemory m;
  m.fd_ = UniqueFd(raw);
  if (::ftruncate(m.fd_.get(), static_cast<off_t>(bytes)) != 0) {
    return make_errno_error("host tier '" + name + "': ftruncate to " + std::to_string(bytes), errno);
  }
  EPK_TRY_ASSIGN(m.mapping_, Mapping::map_shared(m.fd_.get(), bytes, "host tier"));
  m.size_ = bytes;
  return m;
}

std::span<std::byte> HostTierMemory::writable() const {
  if (!writable_) return {};
  return {reinterpret_cast<std::byte*>(mapping_.data()), mapping_.size()};
}

Status HostTierMemory::seal() {
  if (sealed_) return {};
  writable_ = false;
  // Each MAP_FIXED map replaces the range's pages at once (a concurrent reader faults on the new map, which shows the
  // same page-cache pages); mapping_ keeps owning the range.
  auto remap = [&](int flags, const char* step) -> Status {
    void* p = ::mmap(mapping_.data(), size_, PROT_READ, flags | MAP_FIXED, fd_.get(), 0);
    if (p == MAP_FAILED) return make_errno_error(std::string("host tier: ") + step, errno);
    return {};
  };
  EPK_TRY(remap(MAP_PRIVATE, "mapping the memfd read-only before the seal"));
  if (::fcntl(fd_.get(), F_ADD_SEALS, kHostTierSeals) != 0) return make_errno_error("host tier: sealing the memfd", errno);
  EPK_TRY(remap(MAP_SHARED, "mapping the sealed memfd shared"));
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
  EPK_TRY_ASSIGN(m.mapping_, Mapping::map_shared_readonly(fd.get(), bytes, "host tier"));
  m.fd_ = std::move(fd);
  m.size_ = bytes;
  m.sealed_ = true;
  return m;
}

std::span<const std::byte> HostTierMemory::bytes() const {
  return {reinterpret_cast<const std::byte*>(mapping_.data()), mapping_.size()};
}

}  // namespace epk::shm
