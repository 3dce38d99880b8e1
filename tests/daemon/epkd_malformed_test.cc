// Malformed traffic against the real epkd on a temporary socket, through raw sockets: bad magic, oversized,
// truncated and stalled messages, malformed payloads, requests before the hello and a wrong version. Each gets its
// refusal, and epkd still serves another client and exits 0 on SIGTERM. Loopback only; every wait is bounded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "codec/common/bytes.h"
#include "shm/protocol.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/raw_wire.h"

namespace epk {
namespace {

using namespace epk::test_harness;  // NOLINT

// epkd serving one synthetic tensor to sessions that send it what it must refuse; once a test has had its refusal,
// epkd still serves another client and exits 0 on SIGTERM.
class EpkdMalformed : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.running()); }
  void TearDown() override {
    if (HasFatalFailure()) return;
    expect_serving(d_);
    EXPECT_EQ(d_.terminate(), 0);
  }

  // The reply to what was sent on `fd` is an error of `status`, then end of stream; closes fd. *reply, when given,
  // gets the reply for the test's own checks.
  static void expect_refused(int fd, shm::WireStatus status, int timeout_ms = 2000, RawReply* reply = nullptr) {
    RawReply r = raw_read_reply(fd, timeout_ms, true);
    ASSERT_TRUE(r.got);
    EXPECT_EQ(error_status(r), status);
    EXPECT_TRUE(r.eof_after);
    ::close(fd);
    if (reply != nullptr) *reply = std::move(r);
  }

  // A raw session that has said hello.
  int connect_after_hello() const {
    const int fd = raw_connect(d_.socket());
    raw_hello(fd);
    return fd;
  }
  // A well-formed acquire of t0 (request id 2), for a test to break.
  static std::vector<std::uint8_t> acquire_t0() {
    std::vector<std::uint8_t> msg;
    shm::encode_acquire(2, {0, shm::Layout::kStored, "t0"}, &msg);
    return msg;
  }

  Epkd d_{{"--synthetic", "m=t0:8x8"}};
};

TEST_F(EpkdMalformed, BadMagicGetsAnErrorAndTheSessionCloses) {
  int fd = raw_connect(d_.socket());
  ASSERT_GE(fd, 0);
  raw_send(fd, std::vector<std::uint8_t>(16, 0xEE));
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage));
}

TEST_F(EpkdMalformed, OversizedMessageIsRefusedFromItsHeader) {
  const int fd = connect_after_hello();
  std::vector<std::uint8_t> msg(shm::kHeaderSize);
  shm::encode_header(
      {shm::kProtocolVersion, static_cast<std::uint16_t>(shm::MsgType::kAcquire), 9, shm::kMaxPayload + 1}, msg.data());
  raw_send(fd, msg);
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage));
}

TEST_F(EpkdMalformed, TruncatedMessageThenEndOfStream) {
  const int fd = connect_after_hello();
  std::vector<std::uint8_t> msg = acquire_t0();
  msg.resize(msg.size() - 3);
  raw_send(fd, msg);
  ::shutdown(fd, SHUT_WR);
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage));
}

TEST_F(EpkdMalformed, StalledMessageTimesOut) {
  const int fd = connect_after_hello();
  std::vector<std::uint8_t> msg = acquire_t0();
  msg.resize(10);  // part of the header, then silence
  auto t0 = Clock::now();
  raw_send(fd, msg);
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage, 3000));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2000));  // --read-timeout-ms 300
}

TEST_F(EpkdMalformed, MalformedPayloadAfterHello) {
  const int fd = connect_after_hello();
  std::vector<std::uint8_t> msg = acquire_t0();
  store_le<std::uint16_t>(msg.data() + shm::kHeaderSize + 8, 60000);  // name length past the payload and the limit
  raw_send(fd, msg);
  RawReply r;
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage, 2000, &r));
  EXPECT_EQ(r.header.request_id, 2u);
}

TEST_F(EpkdMalformed, RequestBeforeHelloAndWrongVersion) {
  int fd = raw_connect(d_.socket());
  std::vector<std::uint8_t> msg;
  shm::encode_empty(1, shm::MsgType::kStats, &msg);
  raw_send(fd, msg);
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadMessage));
  fd = raw_connect(d_.socket());
  shm::encode_hello(1, {1, 0}, &msg);
  store_le<std::uint16_t>(msg.data() + 4, shm::kProtocolVersion + 1);
  raw_send(fd, msg);
  ASSERT_NO_FATAL_FAILURE(expect_refused(fd, shm::WireStatus::kBadVersion));
}

}  // namespace
}  // namespace epk
