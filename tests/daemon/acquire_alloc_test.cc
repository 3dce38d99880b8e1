// The cache-hit acquire path allocates nothing (daemon/service/dims.h, daemon/net/handler_memory.h say why).
//
// epkd's own code (run_daemon: sessions, service, cache, sources) runs in this process on a thread whose heap
// allocations are counted by the replaced global operator new below; a client in the test's thread does cache-hit
// acquire + release round trips over the real socket. After warm-up the daemon thread must not allocate once.
// MissesAreCountedOnTheDaemonThread shows that the counter does see that thread's allocations.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/epk.h"
#include "daemon/config/config.h"
#include "daemon/server.h"
#include "tests/daemon/epk_test_models.h"

namespace {

thread_local bool t_counted = false;  // set on the thread that runs the daemon
std::atomic<std::uint64_t> g_allocations{0};
thread_local bool t_client_counted = false;  // set on the test's thread around a client's timed loop
std::atomic<std::uint64_t> g_client_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (t_counted) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (t_client_counted) g_client_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (::posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  return p;
}

}  // namespace

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
// The replacements above allocate with malloc, so free is the matching release; GCC cannot see that through the
// replacement and warns (-Wmismatched-new-delete) at each use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace epk::daemon {
namespace {

using client::Client;

// Longer than any std::string small-buffer: a per-request string would have to allocate.
const std::string kLongName = "model.layers.17.self_attn.q_proj.weight";

class AcquireAllocations : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("epk_alloc_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string epk_path = (dir_ / "m.epk").string();
    {
      auto w = container::Writer::create(epk_path, {});
      ASSERT_TRUE(w) << w.error().to_string();
      auto weights = test_models::gaussian(48, 96, 7);
      auto enc = test_models::encode_f32(weights, 48, 96, 4.0);
      ASSERT_TRUE(enc) << enc.error().to_string();
      ASSERT_TRUE(test_models::write_lattice(*w, kLongName, *enc));
      std::vector<float> norm(96, 1.5f);
      ASSERT_TRUE(test_models::write_raw(*w, "model.layers.17.input_layernorm.weight", DType::kF32, {96},
                                         test_models::bytes_of(norm)));
      ASSERT_TRUE(w->finish());
    }
    cfg_.socket_path = (dir_ / "s.sock").string();
    cfg_.budget_bytes = 16u << 20;
    cfg_.threads = 1;
    cfg_.io_threads = 1;  // every session on the counted thread
    cfg_.spin_us = spin_us_;
    cfg_.log_level = "warn";
    cfg_.models.push_back({"m", epk_path});
    cfg_.synthetic.push_back({"syn", "a:33x17,b:2x3x5x7,c:1000"});
    daemon_ = std::thread([this] {
      t_counted = true;
      rc_ = run_daemon(cfg_);
      t_counted = false;
    });
    for (int i = 0; i < 500; ++i) {
      if (std::filesystem::exists(cfg_.socket_path)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void TearDown() override {
    if (daemon_.joinable()) {
      ::kill(::getpid(), SIGTERM);  // asio's signal_set in run_daemon takes it: drain, then return 0
      daemon_.join();
      EXPECT_EQ(rc_, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  struct Request {
    std::string model, tensor;
    shm::Layout layout;
  };
  // One acquire + release round trip of each request, through `c`.
  static void round_trip(Client& c, const std::vector<Request>& reqs, bool nowait) {
    for (const Request& r : reqs) {
      auto t = c.acquire(r.model, r.tensor, r.layout);
      ASSERT_TRUE(t) << t.error().to_string();
      Status st = nowait ? c.release_nowait(t->handle) : c.release(t->handle);
      ASSERT_TRUE(st) << st.error().to_string();
    }
  }

  void expect_hits_allocate_nothing();

  std::uint32_t spin_us_ = 0;  // epkd's io thread poll window, and the clients'
  std::filesystem::path dir_;
  DaemonConfig cfg_;
  std::thread daemon_;
  int rc_ = -1;
};

// The io thread polls (io_context::poll) for a while after each request and the clients poll their sockets: the hit
// path must stay allocation-free with the spin on as well.
class AcquireAllocationsSpinning : public AcquireAllocations {
 protected:
  AcquireAllocationsSpinning() { spin_us_ = 200; }
};

TEST_F(AcquireAllocations, CacheHitRoundTripsAllocateNothingOnTheDaemonThread) { expect_hits_allocate_nothing(); }

TEST_F(AcquireAllocationsSpinning, CacheHitRoundTripsAllocateNothingWithTheIoThreadSpinning) {
  expect_hits_allocate_nothing();
}

void AcquireAllocations::expect_hits_allocate_nothing() {
  client::ClientOptions opts;
  opts.reply_timeout_ms = 10000;
  opts.spin_us = static_cast<int>(spin_us_);
  auto a = Client::connect(cfg_.socket_path, opts);
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_EQ(a->spin_us(), static_cast<int>(spin_us_));
  auto b = Client::connect(cfg_.socket_path, opts);
  ASSERT_TRUE(b) << b.error().to_string();
  const std::vector<Request> reqs = {
      {"m", kLongName, shm::Layout::kDenseBF16},
      {"m", kLongName, shm::Layout::kRowwiseI8},
      {"m", "model.layers.17.input_layernorm.weight", shm::Layout::kStored},
      {"syn", "a", shm::Layout::kDenseF32},
      {"syn", "b", shm::Layout::kDenseBF16},
      {"syn", "c", shm::Layout::kDenseF16},
  };
  // Misses (decodes), then warm-up hits: session buffers, pin entries and asio's handler memory settle here.
  for (int i = 0; i < 50; ++i) {
    round_trip(*a, reqs, i % 2 == 1);
    round_trip(*b, reqs, i % 2 == 0);
  }
  ASSERT_TRUE(a->stats());  // a full round trip: every release_nowait above has been handled
  const std::uint64_t before = g_allocations.load();
  constexpr int kRounds = 500;
  for (int i = 0; i < kRounds; ++i) {
    round_trip(*a, reqs, i % 3 == 0);
    round_trip(*b, reqs, i % 3 == 1);
    // Two pins of one slot at once, from two clients, released in the other order.
    auto ta = a->acquire("syn", "a", shm::Layout::kDenseF32);
    auto tb = b->acquire("syn", "a", shm::Layout::kDenseF32);
    ASSERT_TRUE(ta && tb);
    ASSERT_TRUE(b->release(tb->handle));
    ASSERT_TRUE(a->release(ta->handle));
  }
  // Every request above was answered (the last of each client is an acknowledged release), so the daemon thread
  // has handled them all.
  const std::uint64_t during = g_allocations.load() - before;
  auto st = a->stats();  // not a hit: read after the count
  ASSERT_TRUE(st);
  EXPECT_EQ(during, 0u) << "the daemon thread allocated " << during << " times over " << kRounds * (2 * 6 + 2)
                        << " cache-hit acquire + release round trips";
  EXPECT_GE(st->hits, static_cast<std::uint64_t>(kRounds) * 14);
  EXPECT_EQ(st->decodes, 6u);  // every request above was a hit after the first six misses
}

// libepk's side of a hit: acquire_into a Tensor the caller keeps, release and release_nowait
// allocate nothing in the client process either, blocking or polling for the reply.
void client_hits_allocate_nothing(const std::string& socket, int spin_us) {
  client::ClientOptions opts;
  opts.reply_timeout_ms = 10000;
  opts.spin_us = spin_us;
  auto c = Client::connect(socket, opts);
  ASSERT_TRUE(c) << c.error().to_string();
  struct Req {
    std::string model, tensor;
    shm::Layout layout;
  };
  const std::vector<Req> reqs = {
      {"m", kLongName, shm::Layout::kDenseBF16},
      {"m", kLongName, shm::Layout::kRowwiseI8},
      {"m", "model.layers.17.input_layernorm.weight", shm::Layout::kStored},
      {"syn", "b", shm::Layout::kDenseBF16},  // 4 dimensions after 2 and 1: the Tensor's vectors shrink and grow
      {"syn", "c", shm::Layout::kDenseF16},
  };
  client::Tensor t;
  auto pass = [&](int i) {
    for (const Req& r : reqs) {
      Status a = c->acquire_into(r.model, r.tensor, r.layout, 0, &t);
      ASSERT_TRUE(a) << a.error().to_string();
      Status st = i % 2 == 0 ? c->release(t.handle) : c->release_nowait(t.handle);
      ASSERT_TRUE(st) << st.error().to_string();
    }
  };
  for (int i = 0; i < 20; ++i) pass(i);  // misses, model ids, the Tensor's capacity
  ASSERT_TRUE(c->stats());
  const std::uint64_t before = g_client_allocations.load();
  t_client_counted = true;
  for (int i = 0; i < 300; ++i) pass(i);
  t_client_counted = false;
  const std::uint64_t during = g_client_allocations.load() - before;
  EXPECT_EQ(during, 0u) << "the client allocated " << during << " times over " << 300 * reqs.size()
                        << " cache-hit acquire_into + release round trips";
  ASSERT_EQ(t.shape.size(), 1u);  // the last was "c" (1000 values)
  EXPECT_EQ(t.shape[0], 1000u);
  EXPECT_EQ(t.strides, std::vector<std::int64_t>{1});
  EXPECT_EQ(t.row_scales, nullptr);
  EXPECT_EQ(c->deferred_release_errors(), 0u);
}

TEST_F(AcquireAllocations, ClientHitsThroughAcquireIntoAllocateNothing) {
  client_hits_allocate_nothing(cfg_.socket_path, 0);
}

TEST_F(AcquireAllocationsSpinning, ClientHitsThroughAcquireIntoAllocateNothingWhilePolling) {
  client_hits_allocate_nothing(cfg_.socket_path, 200);
}

// The C ABI's acquire goes through acquire_into with per-thread scratch (names and Tensor): no allocation either.
TEST_F(AcquireAllocations, CApiHitsAllocateNothing) {
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(cfg_.socket_path.c_str(), &c), EPK_OK) << epk_last_error();
  auto pass = [&](int i) {
    for (const char* name : {kLongName.c_str(), "model.layers.17.input_layernorm.weight"}) {
      epk_tensor t;
      ASSERT_EQ(epk_acquire(c, "m", name, name == kLongName.c_str() ? "dense:bf16" : "stored", &t), EPK_OK)
          << epk_last_error();
      ASSERT_EQ(i % 2 == 0 ? epk_release(c, t.handle) : epk_release_nowait(c, t.handle), EPK_OK) << epk_last_error();
    }
  };
  for (int i = 0; i < 20; ++i) pass(i);
  const std::uint64_t before = g_client_allocations.load();
  t_client_counted = true;
  for (int i = 0; i < 300; ++i) pass(i);
  t_client_counted = false;
  EXPECT_EQ(g_client_allocations.load() - before, 0u);
  epk_disconnect(c);
}

// The client's counter sees the client's allocations: acquire() returns a new Tensor whose shape and strides are
// allocated on every call.
TEST_F(AcquireAllocations, ClientCounterSeesAcquireByValue) {
  auto c = Client::connect(cfg_.socket_path, 10000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto warm = c->acquire("syn", "b", shm::Layout::kDenseBF16);
  ASSERT_TRUE(warm && c->release(warm->handle));
  const std::uint64_t before = g_client_allocations.load();
  t_client_counted = true;
  auto t = c->acquire("syn", "b", shm::Layout::kDenseBF16);
  t_client_counted = false;
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(g_client_allocations.load() - before, 2u) << "a new Tensor: its shape and its strides";
  ASSERT_TRUE(c->release(t->handle));
}

TEST_F(AcquireAllocations, MissesAreCountedOnTheDaemonThread) {
  // The same measurement over misses (each acquire decodes into a new slot) must see allocations, or the counter
  // is not looking at the thread that serves.
  auto c = Client::connect(cfg_.socket_path, 10000);
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_TRUE(c->stats());
  const std::uint64_t before = g_allocations.load();
  round_trip(*c, {{"syn", "a", shm::Layout::kDenseF32}, {"syn", "b", shm::Layout::kDenseF16}}, false);
  EXPECT_GT(g_allocations.load() - before, 0u);
}

}  // namespace
}  // namespace epk::daemon
