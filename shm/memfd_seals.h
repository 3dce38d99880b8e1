// The seals that make a memfd epkd's to write and everyone's to read (host pools, the decode status table).
#pragma once

#include <fcntl.h>

#include <cerrno>
#include <string>

#include "codec/common/result.h"

// Linux 5.1's seal; older C libraries lack the name (the kernel then refuses the seal, and the caller says so).
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace epk::shm {

// Call once the owner's read-write mapping exists: from then on the size is fixed and no new writable mapping,
// write() or hole punch is possible through any fd of the memfd (the existing mapping keeps writing), and no seal
// can be added or removed. The memfd must have been made with MFD_ALLOW_SEALING.
inline Status seal_after_mapping(int fd, const std::string& what) {
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    return make_errno_error(what + ": sealing the memfd (F_SEAL_FUTURE_WRITE needs Linux 5.1)", errno);
  }
  return {};
}

}  // namespace epk::shm
