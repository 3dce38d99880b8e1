#include "daemon/net/peer_access.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace epk::daemon {
namespace {

TEST(PeerAccess, TheKernelNamesThePeerOfASocket) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto p = peer_credentials(sv[0]);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->uid, ::geteuid());
  EXPECT_EQ(p->gid, ::getegid());
  EXPECT_EQ(p->pid, ::getpid());
  EXPECT_NE(describe(*p).find("pid " + std::to_string(::getpid())), std::string::npos);
  ::close(sv[0]);
  ::close(sv[1]);
  EXPECT_FALSE(peer_credentials(-1));
}

TEST(PeerAccess, RulesMatchUidsPrimaryAndSupplementaryGroups) {
  PeerCredentials peer;
  peer.uid = 4242;
  peer.gid = 100;
  peer.groups = {27, 44};
  if (::geteuid() == 4242) GTEST_SKIP() << "the test's peer uid is this process's";
  EXPECT_TRUE(allows({}, peer));  // an empty rule lets everyone in
  EXPECT_FALSE(lists({}, peer));  // but lists nobody
  EXPECT_TRUE(allows({{4242}, {}}, peer));
  EXPECT_TRUE(allows({{}, {100}}, peer));
  EXPECT_TRUE(allows({{}, {44}}, peer));
  EXPECT_FALSE(allows({{1}, {2}}, peer));
  EXPECT_TRUE(lists({{}, {27}}, peer));
  EXPECT_FALSE(lists({{1}, {2}}, peer));
  PeerCredentials root;
  root.uid = 0;
  EXPECT_TRUE(allows({{1}, {2}}, root));   // root is always allowed to connect
  EXPECT_FALSE(lists({{1}, {2}}, root));   // but belongs to a domain only when listed
  PeerCredentials self;
  self.uid = ::geteuid();
  EXPECT_TRUE(allows({{1}, {2}}, self));   // so is epkd's own uid
}

}  // namespace
}  // namespace epk::daemon
