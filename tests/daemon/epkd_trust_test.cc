// A client is not trusted: the real epkd (--cpu, host pools) against clients of the test's own that do what libepk
// never would with what epkd hands them (the pool fd), connect as uids the config does not allow, trickle bytes, sit
// idle, open too many sessions, or point a reload at a FIFO. Each case checks that epkd still serves everyone else
// the same bytes. Loopback only; every wait is bounded. Cases that switch uid need root and skip otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <grp.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "codec/container/writer.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/raw_wire.h"
#include "tests/daemon/trust_helpers.h"

namespace epk {
namespace {

using namespace epk::trust_test;  // NOLINT

// hello as the current process; returns the reply (the error frame when refused).
RawReply hello_reply(const std::string& socket, std::vector<shm::UniqueFd>* fds = nullptr) {
  RawReply r;
  int fd = raw_connect(socket);
  if (fd < 0) return r;
  std::vector<std::uint8_t> msg;
  shm::encode_hello(1, {static_cast<std::uint32_t>(::getpid()), 0}, &msg);
  // A connection refused at accept may be closed before the hello is sent (EPIPE); its error frame is read anyway.
  (void)!::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL);
  r = raw_read_reply(fd, 3000, false, fds);
  ::close(fd);
  return r;
}

TEST(EpkdTrust, AClientCannotResizeOrWriteTheHostPoolItReceives) {
  Epkd d({"--synthetic", "m=t0:64x64,t1:32x16"});
  auto a = d.connect(5000);
  ASSERT_TRUE(a) << a.error().to_string();
  const std::vector<std::uint8_t> before = fetch(*a, "m", "t0");
  ASSERT_EQ(before.size(), 64u * 64u * 4u);

  std::vector<shm::UniqueFd> fds;
  RawReply r = hello_reply(d.socket(), &fds);
  ASSERT_TRUE(r.got);
  ASSERT_EQ(r.header.type, static_cast<std::uint16_t>(shm::MsgType::kHello) | shm::kReplyBit);
  ASSERT_FALSE(fds.empty());
  const int pool = fds[0].get();
  struct stat st {};
  ASSERT_EQ(::fstat(pool, &st), 0);
  const auto size = static_cast<std::size_t>(st.st_size);
  EXPECT_NE(::ftruncate(pool, 4096), 0) << "a client truncated epkd's host pool";
  EXPECT_EQ(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, pool, 0), MAP_FAILED)
      << "a client mapped epkd's host pool writable";
  std::vector<std::uint8_t> junk(4096, 0xEE);
  EXPECT_LT(::pwrite(pool, junk.data(), junk.size(), 0), 0) << "a client wrote into epkd's host pool";
  EXPECT_NE(::fallocate(pool, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size)), 0)
      << "a client punched a hole in epkd's host pool";
  fds.clear();

  // epkd survived (a truncated pool would raise SIGBUS at its next decode were the pool not sealed) and serves the
  // same bytes, on a hit and after a fresh decode.
  auto b = Client::connect(d.socket(), 5000);
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(fetch(*b, "m", "t0"), before);
  EXPECT_EQ(fetch(*b, "m", "t1").size(), 32u * 16u * 4u);
  EXPECT_EQ(fetch(*a, "m", "t0"), before);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdTrust, AUidTheConfigDoesNotAllowIsRefusedAtAccept) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  const ConfigFile cfg("allowed_uids = [4242]\n[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n");
  Epkd d({"--config", cfg.path()});
  ASSERT_TRUE(d.running());
  const std::string socket = open_socket_dir(d);
  EXPECT_EQ(run_as(kNobody, [&] {
              RawReply r = hello_reply(socket);
              if (!r.got || r.header.type != static_cast<std::uint16_t>(shm::MsgType::kError)) return 1;
              auto e = shm::decode_error(r.payload);
              if (!e || e->status != shm::WireStatus::kDenied) return 2;
              return e->message.find("uid 65534") != std::string::npos ? 0 : 3;
            }),
            0);
  // root is always allowed (and so is epkd's own uid).
  auto c = Client::connect(socket, 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_FALSE(fetch(*c, "m", "t0").empty());
  // A refused uid reconnecting in a loop: each connection is closed at accept (epkd's fds stay where they were, no
  // session waits for a hello), and the refusals of one uid are logged once per interval, not once each.
  const std::size_t fds_before = open_fds(d.pid());
  const std::uint64_t rss_before = rss_kib(d.pid());
  EXPECT_EQ(run_as(kNobody, [&] {
              for (int i = 0; i < 500; ++i) {
                int fd = raw_connect(socket);
                if (fd < 0) return 1;
                // Silent: no hello. The frame telling why is there at once.
                RawReply r = raw_read_reply(fd, 3000, false, nullptr);
                ::close(fd);
                if (!r.got) return 2;
              }
              return 0;
            }),
            0);
  EXPECT_LE(open_fds(d.pid()), fds_before + 2);
  // No session buffers were made: the heap stays where it was (docs/decisions/epkd-trust.md has the figures).
  const std::uint64_t rss_after = rss_kib(d.pid());
  if (kHeapMeasurable) {
    EXPECT_LE(rss_after, rss_before + 2048) << "RssAnon " << rss_before << " -> " << rss_after << " KiB";
  }
  std::printf("500 refused reconnects: fds %zu -> %zu, RssAnon %llu -> %llu KiB\n", fds_before, open_fds(d.pid()),
              static_cast<unsigned long long>(rss_before), static_cast<unsigned long long>(rss_after));
  const std::string log = read_file(d.log_path());
  // Logged at accept, as key=value fields with the peer's credentials from the kernel, once for 501 refusals.
  const auto at = log.find("access_denied ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_NE(log.find("uid=65534", at), std::string::npos) << log;
  EXPECT_NE(log.find("at=connect", at), std::string::npos) << log;
  EXPECT_EQ(log.find("access_denied ", at + 1), std::string::npos) << "logged more than once:\n" << log;
  EXPECT_EQ(d.terminate(), 0);
}

// The error message of request `msg` sent raw on a session of the current process ("" when no error came back).
std::string raw_error(const std::string& socket, const std::vector<std::uint8_t>& msg) {
  int fd = raw_connect(socket);
  if (fd < 0) return "";
  raw_hello(fd);
  raw_send(fd, msg);
  RawReply r = raw_read_reply(fd, 3000, false);
  ::close(fd);
  if (!r.got || r.header.type != static_cast<std::uint16_t>(shm::MsgType::kError)) return "";
  auto e = shm::decode_error(r.payload);
  if (!e) return "";
  return std::to_string(static_cast<int>(e->status)) + " " + e->message;
}

TEST(EpkdTrust, AnAllowedUidIsServedAndAModelRuleHidesTheOthers) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  // Model ids in config order: "open" 0, "secret" 1; id 2 is unknown.
  const ConfigFile cfg(
      "allowed_uids = [65534]\n"
      "[[synthetic]]\nname = \"open\"\nspec = \"t0:8x8\"\n"
      "[[synthetic]]\nname = \"secret\"\nspec = \"t0:8x8\"\nuids = [4242]\n");
  Epkd d({"--config", cfg.path()});
  ASSERT_TRUE(d.running());
  const std::string socket = open_socket_dir(d);
  auto root = Client::connect(socket, 5000);  // root passes every rule; its session is one nobody may not count
  ASSERT_TRUE(root);
  EXPECT_EQ(run_as_client(kNobody, socket, [&](Client& c) {
              auto t = c.acquire("open", "t0", shm::Layout::kDenseF32);
              if (!t || t->bytes != 256 || !c.release(t->handle)) return 2;
              // The hidden model is not served here, as a name nobody serves is not.
              auto hidden = c.open_model("secret");
              auto unknown = c.open_model("nonesuch");
              if (hidden || unknown || hidden.error().code != ErrorCode::kNotFound) return 3;
              if (hidden.error().message.find("is not served here") == std::string::npos) return 4;
              auto listed = c.models();
              if (!listed || listed->models.size() != 1 || listed->models[0].name != "open") return 5;
              // stats counts the one model it may use and its own session, not root's.
              auto st = c.stats();
              if (!st || st->models != 1 || st->clients != 1) return 6;
              // Requests by id: the hidden model's answer is an unknown id's, word for word, without its name.
              for (const char* request : {"acquire", "tensors", "prefetch"}) {
                std::vector<std::uint8_t> by_hidden, by_unknown;
                for (std::uint32_t id : {1u, 2u}) {
                  std::vector<std::uint8_t>* msg = id == 1 ? &by_hidden : &by_unknown;
                  if (std::string(request) == "acquire") {
                    shm::encode_acquire(7, {id, shm::Layout::kDenseF32, "t0", 0, {}}, msg);
                  } else if (std::string(request) == "tensors") {
                    shm::encode_tensors(7, {id, 0}, msg);
                  } else {
                    shm::encode_prefetch(7, {id, shm::Layout::kDenseF32, {"t0"}, 0}, msg);
                  }
                }
                const std::string a = raw_error(socket, by_hidden), b = raw_error(socket, by_unknown);
                if (a.empty() || a != b || a.find("secret") != std::string::npos) return 7;
              }
              return 0;
            }),
            0);
  EXPECT_FALSE(fetch(*root, "secret", "t0").empty());
  auto listed = root->models();
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->models.size(), 2u);
  auto st = root->stats();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->models, 2u);
  EXPECT_EQ(d.terminate(), 0);
}

// open_stored hands out the model file and a writable mapping of the compressed tier: only root, epkd's own uid and
// client_decode_uids get past the rule (then a host pool has no tier: unsupported, naming why).
TEST(EpkdTrust, OnlyTrustedUidsMayDecodeInTheirOwnContext) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  for (bool listed : {false, true}) {
    const ConfigFile cfg(std::string(listed ? "client_decode_uids = [65534]\n" : "") +
                         "[[synthetic]]\nname = \"open\"\nspec = \"t0:8x8\"\n");
    Epkd d({"--config", cfg.path()});
    ASSERT_TRUE(d.running());
    const std::string socket = open_socket_dir(d);
    EXPECT_EQ(run_as_client(kNobody, socket, [&](Client& c) {
                auto s = c.open_stored("open", 0);
                if (s) return 2;
                const ErrorCode want = listed ? ErrorCode::kUnsupported : ErrorCode::kPermission;
                if (s.error().code != want) return 3;
                auto t = c.acquire("open", "t0", shm::Layout::kDenseF32);  // the session goes on
                if (!t || !c.release(t->handle)) return 4;
                return 0;
              }),
              0)
        << "listed " << listed;
    auto root = Client::connect(socket, 5000);
    ASSERT_TRUE(root);
    auto s = root->open_stored("open", 0);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
    EXPECT_NE(s.error().message.find("host pool"), std::string::npos) << s.error().message;
    EXPECT_EQ(d.terminate(), 0);
  }
}

TEST(EpkdTrust, ATrustDomainGetsPoolsOfItsOwnAndNeverAnothers) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  const ConfigFile cfg(
      "[[domain]]\nname = \"batch\"\nuids = [65534]\nbudget_mb = 2\n"
      "[[synthetic]]\nname = \"m\"\nspec = \"t0:64x64\"\n");
  Epkd d({"--config", cfg.path()});
  ASSERT_TRUE(d.running());
  open_socket_dir(d);
  auto root = Client::connect(d.socket(), 5000);
  ASSERT_TRUE(root);
  ASSERT_EQ(root->pools().size(), 1u);
  EXPECT_EQ(root->pools()[0].pool_id, 0u);
  const std::vector<std::uint8_t> want = fetch(*root, "m", "t0");
  // The domain's client is given pool 1 only, and cannot write the slot it is served.
  Child k = d.client({"tamper", "m", "t0", "dense:fp32", std::to_string(kNobody)});
  EXPECT_EQ(read_line(k.out, 5000), "pools 1");
  EXPECT_EQ(read_line(k.out, 5000), "refused 1");
  EXPECT_EQ(wait_exit(k.pid, 5000), 0);
  EXPECT_EQ(fetch(*root, "m", "t0"), want);
  // Its stats show its own pool alone.
  EXPECT_EQ(run_as_client(kNobody, d.socket(), [&](Client& c) {
              auto st = c.stats();
              if (!st || st->pools.size() != 1 || st->pools[0].pool_id != 1) return 2;
              return st->budget_bytes == (2u << 20) ? 0 : 3;
            }),
            0);
  auto stats = d.stats();
  ASSERT_EQ(stats.pools.size(), 2u);
  EXPECT_EQ(stats.pools[1].budget_bytes, 2u << 20);  // the domain's own budget
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdTrust, AClientOverItsPinQuotaIsRefusedAndTheNextClientGetsItsShare) {
  Epkd d({"--synthetic", "m=t0:256x256,t1:256x256,t2:256x256,t3:256x256,t4:256x256,t5:256x256",
          "--quota-pinned-mb", "1", "--max-pins-per-tensor", "4"},
         "4");
  auto a = d.connect(5000);
  auto b = d.connect(5000);
  ASSERT_TRUE(a && b);
  for (const char* name : {"t0", "t1", "t2", "t3"}) {  // 256 KiB each: 1 MiB, the quota
    ASSERT_TRUE(a->acquire("m", name, shm::Layout::kDenseF32));
  }
  auto over = a->acquire("m", "t4", shm::Layout::kDenseF32);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kQuota) << over.error().to_string();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->acquire("m", "t0", shm::Layout::kDenseF32));  // pins 2..4 of t0
  auto fifth = a->acquire("m", "t0", shm::Layout::kDenseF32);
  ASSERT_FALSE(fifth);
  EXPECT_NE(fifth.error().message.find("max_pins_per_tensor"), std::string::npos) << fifth.error().message;
  for (const char* name : {"t4", "t5", "t0", "t1"}) {  // the next client is not starved
    auto t = b->acquire("m", name, shm::Layout::kDenseF32);
    ASSERT_TRUE(t) << name << ": " << t.error().to_string();
  }
  EXPECT_EQ(d.terminate(), 0);
}

// A served .epk file truncated under epkd (or a smaller file copied over it in place) raises SIGBUS at epkd's next
// read of the mapped file: that model's uncached tensors fail with an error naming the file, what was cached stays
// served, and the other models serve on.
TEST(EpkdTrust, AModelFileTruncatedUnderEpkdFailsOnlyThatModelsMisses) {
  char tmpl[] = "/tmp/epkdtrunc.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string path = dir + "/a.epk";
  {
    auto w = container::Writer::create(path, {{"source", "truncation test"}});
    ASSERT_TRUE(w);
    for (int i = 0; i < 2; ++i) {
      auto e = test_models::encode_f32(test_models::gaussian(256, 256, 40 + i), 256, 256, 4.0);
      ASSERT_TRUE(e) << e.error().to_string();
      ASSERT_TRUE(test_models::write_lattice(*w, "w" + std::to_string(i), *e));
    }
    ASSERT_TRUE(w->finish());
  }
  ASSERT_GT(std::filesystem::file_size(path), 64u * 1024u);
  Epkd d({"--model", "a=" + path, "--synthetic", "s=t0:8x8"}, "4");
  auto c = d.connect(5000);
  ASSERT_TRUE(c);
  auto held = c->acquire("a", "w0", shm::Layout::kDenseF32);
  ASSERT_TRUE(held) << held.error().to_string();
  const auto* p = static_cast<const std::uint8_t*>(held->data);
  const std::vector<std::uint8_t> w0(p, p + held->bytes);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  auto lost = c->acquire("a", "w1", shm::Layout::kDenseF32);
  ASSERT_FALSE(lost) << "a tensor was served from a truncated file";
  EXPECT_NE(lost.error().message.find("truncated"), std::string::npos) << lost.error().to_string();
  EXPECT_NE(lost.error().message.find(path), std::string::npos) << lost.error().to_string();
  EXPECT_EQ(fetch(*c, "a", "w0"), w0);  // cached before: still served
  EXPECT_FALSE(fetch(*c, "s", "t0").empty());  // another model: untouched
  auto fresh = Client::connect(d.socket(), 5000);
  ASSERT_TRUE(fresh) << "epkd died: " << fresh.error().to_string();
  EXPECT_TRUE(c->release(held->handle));
  EXPECT_EQ(d.terminate(), 0);
  std::filesystem::remove_all(dir);
}

TEST(EpkdTrust, AHelloTrickledByteByByteTimesOutAsOneMessage) {
  Epkd d({"--synthetic", "m=t0:8x8"});  // --read-timeout-ms 300 (the harness)
  ASSERT_TRUE(d.running());
  int fd = raw_connect(d.socket());
  ASSERT_GE(fd, 0);
  std::vector<std::uint8_t> msg;
  shm::encode_hello(1, {static_cast<std::uint32_t>(::getpid()), 0}, &msg);
  // One byte every 50 ms: each arrives well within the timeout, the whole message does not (~1.2 s for 24 bytes).
  const auto t0 = Clock::now();
  bool refused = false;
  for (std::uint8_t byte : msg) {
    if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) {
      refused = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      refused = true;
      break;
    }
  }
  EXPECT_TRUE(refused) << "a hello sent over " << msg.size() * 50 << " ms was read to its end";
  RawReply r = raw_read_reply(fd, 2000, true);
  ASSERT_TRUE(r.got);
  EXPECT_EQ(error_status(r), shm::WireStatus::kBadMessage);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1000));
  ::close(fd);
  auto c = Client::connect(d.socket(), 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_FALSE(fetch(*c, "m", "t0").empty());
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdTrust, AnIdleSessionIsClosedAndLosesItsPins) {
  Epkd d({"--synthetic", "m=t0:8x8", "--idle-timeout-ms", "300"});
  auto c = d.connect(5000);
  ASSERT_TRUE(c);
  auto t = c->acquire("m", "t0", shm::Layout::kDenseF32);
  ASSERT_TRUE(t);
  EXPECT_EQ(d.stats().pools.at(0).pins, 1u);
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && d.stats().pools.at(0).pins != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(d.stats().pools.at(0).pins, 0u);
  EXPECT_FALSE(c->release(t->handle));  // the session is gone
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdTrust, SessionsPerUidAreBounded) {
  Epkd d({"--synthetic", "m=t0:8x8", "--max-sessions-per-uid", "2"});
  ASSERT_TRUE(d.running());  // the harness's readiness probe has closed its session
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && d.stats().clients > 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto a = Client::connect(d.socket(), 5000);
  ASSERT_TRUE(a) << a.error().to_string();
  // The last stats() session counts against the uid until epkd has read its end, which may come after a's accept:
  // b is retried until it has. A bound that admitted one session only would never let b in.
  deadline = Clock::now() + std::chrono::seconds(3);
  Result<Client> b = make_error(ErrorCode::kIo, "not tried");
  while (Clock::now() < deadline && !(b = Client::connect(d.socket(), 5000))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(b) << b.error().to_string();
  auto c = Client::connect(d.socket(), 5000);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kPermission) << c.error().to_string();
  EXPECT_NE(c.error().message.find("max_sessions_per_uid"), std::string::npos) << c.error().message;
  EXPECT_FALSE(fetch(*a, "m", "t0").empty());
  b->disconnect();
  deadline = Clock::now() + std::chrono::seconds(3);
  Result<Client> again = make_error(ErrorCode::kIo, "not tried");
  while (Clock::now() < deadline && !(again = Client::connect(d.socket(), 5000))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(again) << "a freed session slot is given again";
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdTrust, AFifoGivenOnReloadIsRefusedWithoutBlockingAnyone) {
  const ConfigFile cfg("[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n");
  const std::string fifo = cfg.dir() + "/model.epk";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Epkd d({"--config", cfg.path()});
  ASSERT_TRUE(d.running());
  std::vector<Client> clients;
  for (int i = 0; i < 3; ++i) {  // one session on each of the harness's three io threads
    auto c = Client::connect(d.socket(), 2000);
    ASSERT_TRUE(c);
    clients.push_back(std::move(*c));
  }
  std::ofstream(cfg.path(), std::ios::app) << "[[model]]\nname = \"pipe\"\npath = \"" << fifo << "\"\n";
  ::kill(d.pid(), SIGHUP);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string log;
  while (Clock::now() < deadline && log.find("model_refused model=pipe") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = read_file(d.log_path());
  }
  EXPECT_NE(log.find("not a regular file"), std::string::npos) << log;
  for (Client& c : clients) EXPECT_FALSE(fetch(c, "m", "t0").empty());  // within the 2 s reply timeout each
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
