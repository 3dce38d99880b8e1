#include "shm/pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "shm/memfd_seals.h"

namespace epk::shm {

Result<std::unique_ptr<HostPool>> HostPool::create(const std::string& name, std::uint64_t size) {
  if (size == 0) return make_error(ErrorCode::kInvalidArgument, "host pool '" + name + "': size 0");
  int raw = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return make_errno_error("host pool '" + name + "': memfd_create", errno);
  UniqueFd fd(raw);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return make_errno_error("host pool '" + name + "': ftruncate to " + std::to_string(size), errno);
  }
  EPK_TRY_ASSIGN(Mapping m, Mapping::map_shared(fd.get(), size, "host pool"));
  EPK_TRY(seal_after_mapping(fd.get(), "host pool '" + name + "'"));
  return std::unique_ptr<HostPool>(new HostPool(std::move(fd), std::move(m)));
}

std::span<std::uint8_t> HostPool::host_span(std::uint64_t offset, std::uint64_t len) {
  if (offset > mapping_.size() || len > mapping_.size() - offset) return {};
  return mapping_.bytes().subspan(offset, len);
}

Result<ImportedPool> ImportedPool::import_host(UniqueFd fd, std::uint64_t size) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_errno_error("imported host pool: fstat", errno);
  if (size == 0 || static_cast<std::uint64_t>(st.st_size) < size) {
    return make_error(ErrorCode::kBadInput, "imported host pool: announced size " + std::to_string(size) +
                                                " but the fd holds " + std::to_string(st.st_size) + " bytes");
  }
  EPK_TRY_ASSIGN(Mapping m, Mapping::map_shared_readonly(fd.get(), size, "imported host pool"));
  ImportedPool p;
  p.fd_ = std::move(fd);
  p.mapping_ = std::move(m);
  return p;
}

}  // namespace epk::shm
