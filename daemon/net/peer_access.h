// Who is on the other end of a client socket, and whether epkd's access rules let them in. The kernel's view
// (SO_PEERCRED: uid, gid and pid as of connect(); SO_PEERGROUPS: the supplementary groups), never what a client says
// about itself.
//
// A rule lists uids and gids; a peer matches when its uid is listed or its primary gid or any supplementary gid is.
// An empty rule lets every peer in. epkd's own uid and root always match: both can read epkd's memory anyway, so
// refusing them would protect nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codec/common/result.h"

namespace epk::daemon {

struct PeerCredentials {
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  pid_t pid = 0;
  std::vector<gid_t> groups;  // supplementary groups (empty where the kernel does not say)
};

// The credentials of the peer of connected AF_UNIX socket `fd`.
Result<PeerCredentials> peer_credentials(int fd);
// "uid 1000 gid 1000 pid 4242", for logs and error messages.
std::string describe(const PeerCredentials& p);

struct AccessRule {
  std::vector<std::uint32_t> uids;
  std::vector<std::uint32_t> gids;
  bool open() const { return uids.empty() && gids.empty(); }
};

// Root and epkd's own uid: both can read and write epkd's memory anyway (ptrace, /proc/PID/mem), so every rule lets
// them through, and no session cap or pinned share applies to them (docs/SECURITY.md).
bool privileged(const PeerCredentials& peer);
// Whether the rule lets the peer through: an open rule, a privileged peer, or one the rule lists.
bool allows(const AccessRule& rule, const PeerCredentials& peer);
// Whether the rule names the peer itself: its uid, primary gid or a supplementary gid is listed (root and epkd's
// own uid get no exception here: trust-domain membership is only ever explicit).
bool lists(const AccessRule& rule, const PeerCredentials& peer);

}  // namespace epk::daemon
