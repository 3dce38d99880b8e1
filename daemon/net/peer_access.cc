#include "daemon/net/peer_access.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace epk::daemon {

Result<PeerCredentials> peer_credentials(int fd) {
  PeerCredentials p;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return make_errno_error("client socket: SO_PEERCRED", errno);
  }
  p.uid = cred.uid;
  p.gid = cred.gid;
  p.pid = cred.pid;
#ifdef SO_PEERGROUPS
  // Linux 4.13+. A peer may be in up to NGROUPS_MAX groups: ask for the size first.
  socklen_t bytes = 0;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, nullptr, &bytes) != 0 && errno == ERANGE && bytes > 0) {
    p.groups.resize(bytes / sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p.groups.data(), &bytes) != 0) {
      p.groups.clear();
    } else {
      p.groups.resize(bytes / sizeof(gid_t));
    }
  }
#endif
  return p;
}

std::string describe(const PeerCredentials& p) {
  return "uid " + std::to_string(p.uid) + " gid " + std::to_string(p.gid) + " pid " + std::to_string(p.pid);
}

bool privileged(const PeerCredentials& peer) { return peer.uid == 0 || peer.uid == ::geteuid(); }

bool allows(const AccessRule& rule, const PeerCredentials& peer) {
  return rule.open() || privileged(peer) || lists(rule, peer);
}

bool lists(const AccessRule& rule, const PeerCredentials& peer) {
  auto listed = [](const std::vector<std::uint32_t>& ids, std::uint32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (listed(rule.uids, peer.uid) || listed(rule.gids, peer.gid)) return true;
  return std::any_of(peer.groups.begin(), peer.groups.end(), [&](gid_t g) { return listed(rule.gids, g); });
}

}  // namespace epk::daemon
