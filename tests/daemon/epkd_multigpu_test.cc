// epkd serving several CUDA devices (a pool, a stream, an event ring, a resident tier and a cache budget per device):
// the real epkd, real client processes and this process through libepk. Every test skips without a usable device;
// the ones that need a second device skip where only one exists. Bytes are compared with a --cpu epkd.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "client/client.h"
#include "client/epk.h"
#include "codec/common/checksum.h"
#include "shm/device_pool.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_device_harness.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::test_models;   // NOLINT
using shm::Layout;

const shm::PoolStats* pool_of(const client::Stats& s, std::uint32_t id) {
  for (const auto& p : s.pools) {
    if (p.pool_id == id) return &p;
  }
  return nullptr;
}

// Four rounds over w1..w4 in two layouts on device 0: far more than a 2 MiB pool holds, so it evicts.
void pressure_on_device_zero(Client& c) {
  for (int round = 0; round < 4; ++round) {
    for (int i = 1; i <= 4; ++i) {
      for (Layout l : {Layout::kDenseF32, Layout::kDenseBF16}) {
        auto t = c.acquire("m", "w" + std::to_string(i), l, 0);
        ASSERT_TRUE(t) << t.error().to_string();
        ASSERT_TRUE(c.release_after(t->handle, nullptr));
      }
    }
  }
}

class EpkdMultiGpu : public DeviceModelTest {
 protected:
  static bool two_devices() { return shm::cuda_device_available(1); }
};

// One device listed: the other is not served (a clear kNotFound), and the session stays open.
TEST_F(EpkdMultiGpu, AnUnlistedDeviceIsNotServed) {
  DevEpkd d({"--model", "m=" + path_, "--devices", "0"}, "8");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->pools().size(), 1u);
  auto t = c->acquire("m", "w1", Layout::kDenseF32, 1);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::kNotFound);
  EXPECT_NE(t.error().message.find("device 1"), std::string::npos) << t.error().message;
  auto ok = c->acquire("m", "w1", Layout::kDenseF32, 0);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->device, 0);
  EXPECT_TRUE(c->release_after(ok->handle, nullptr));
}

// device_budget_mb overrides budget_mb for one device (config file; flags add the rest).
TEST_F(EpkdMultiGpu, PerDeviceBudgetFromTheConfigFile) {
  const std::string cfg = (dir_ / "epkd.toml").string();
  {
    std::ofstream f(cfg);
    f << "devices = [" << (two_devices() ? "0, 1" : "0") << "]\n"
      << "device_budget_mb = { \"0\" = 4 }\n";  // whole 2 MiB VMM granules: the pool is the budget
  }
  DevEpkd d({"--model", "m=" + path_, "--config", cfg}, "2");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto s = c->stats();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->pools.size(), two_devices() ? 2u : 1u);
  EXPECT_EQ(s->pools[0].device, 0);
  EXPECT_EQ(s->pools[0].budget_bytes, 4u << 20);
  if (two_devices()) {
    EXPECT_EQ(s->pools[1].device, 1);
    EXPECT_EQ(s->pools[1].budget_bytes, 2u << 20);
    EXPECT_EQ(s->budget_bytes, 6u << 20);
  }
}

TEST_F(EpkdMultiGpu, TwoDevicesServeTheSameTensorIntoTheirOwnPools) {
  if (!two_devices()) GTEST_SKIP() << "one CUDA device: the second-device cases are not tested";
  DeviceAndHost both({"--model", "m=" + path_, "--devices", "0,1"}, "m=" + path_, "8");
  ASSERT_TRUE(both.connect());
  std::optional<Client>& c = both.on_device;
  std::optional<Client>& h = both.on_host;
  ASSERT_EQ(c->pools().size(), 2u);
  EXPECT_EQ(c->pools()[0].device, 0);
  EXPECT_EQ(c->pools()[1].device, 1);
  auto st = c->stats();
  ASSERT_TRUE(st);
  ASSERT_EQ(st->pools.size(), 2u);
  EXPECT_GT(st->pools[0].resident_bytes, 0u);  // the resident tier on both devices (eager, at open)
  EXPECT_EQ(st->pools[0].resident_bytes, st->pools[1].resident_bytes);
  int compared = 0;
  for (const std::string name : {"w0", "w2"}) {
    for (Layout l : {Layout::kStored, Layout::kDenseBF16, Layout::kDenseF32, Layout::kRowwiseI8}) {
      auto want = h->acquire("m", name, l);
      ASSERT_TRUE(want) << want.error().to_string();
      std::vector<std::uint8_t> got[2];
      for (std::uint32_t dev : {0u, 1u}) {
        auto t = c->acquire("m", name, l, dev);
        ASSERT_TRUE(t) << t.error().to_string();
        EXPECT_TRUE(t->on_device);
        EXPECT_EQ(t->device, static_cast<int>(dev));
        EXPECT_EQ(shm::handle_pool(t->handle), dev);  // pool i serves device i here
        ASSERT_EQ(t->bytes, want->bytes);
        ASSERT_TRUE(c->wait(*t, nullptr));
        got[dev] = host_bytes(*c, *t);
        EXPECT_TRUE(c->release_after(t->handle, nullptr));
      }
      EXPECT_TRUE(got[0] == got[1]) << name << " " << shm::layout_name(l);
      EXPECT_EQ(std::memcmp(got[0].data(), want->data, want->bytes), 0) << name << " " << shm::layout_name(l);
      EXPECT_TRUE(h->release(want->handle));
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8);
  auto s = c->stats();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->pools.size(), 2u);
  for (const auto& p : s->pools) {
    EXPECT_EQ(p.slots, 8u) << p.pool_id;  // each device holds its own copy of every (tensor, layout)
    EXPECT_EQ(p.misses, 8u) << p.pool_id;
    EXPECT_EQ(p.pins, 0u) << p.pool_id;
  }
  EXPECT_EQ(s->decodes, 16u);
  // The C ABI names the device too.
  epk_client* cc = nullptr;
  ASSERT_EQ(epk_connect(both.device.socket().c_str(), &cc), EPK_OK) << epk_last_error();
  epk_tensor et;
  ASSERT_EQ(epk_acquire_on(cc, "m", "w0", "dense:fp32", 1, &et), EPK_OK) << epk_last_error();
  EXPECT_EQ(et.device, 1);
  std::vector<std::uint8_t> back(et.bytes);
  ASSERT_EQ(epk_copy_to_host(cc, &et, back.data()), EPK_OK) << epk_last_error();
  auto ref = h->acquire("m", "w0", Layout::kDenseF32);
  ASSERT_TRUE(ref);
  EXPECT_EQ(std::memcmp(back.data(), ref->data, ref->bytes), 0);
  EXPECT_EQ(epk_release_after(cc, et.handle, nullptr), EPK_OK) << epk_last_error();
  EXPECT_EQ(epk_acquire_on(cc, "m", "w0", "dense:fp32", 9, &et), EPK_E_NOT_FOUND);
  epk_disconnect(cc);
}

TEST_F(EpkdMultiGpu, BudgetsAreIndependent) {
  if (!two_devices()) GTEST_SKIP() << "one CUDA device: the second-device cases are not tested";
  DevEpkd d({"--model", "m=" + path_, "--devices", "0,1"}, "2");  // 2 MiB per device: four fp32 slots at most
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  // Device 1: two slots, released, stay cached.
  for (const std::string name : {"w1", "w2"}) {
    auto t = c->acquire("m", name, Layout::kDenseF32, 1);
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(c->release_after(t->handle, nullptr));
  }
  // Device 0: rounds over four tensors and two layouts, far more than its 2 MiB.
  ASSERT_NO_FATAL_FAILURE(pressure_on_device_zero(*c));
  auto s = c->stats();
  ASSERT_TRUE(s);
  const shm::PoolStats* p0 = pool_of(*s, 0);
  const shm::PoolStats* p1 = pool_of(*s, 1);
  ASSERT_TRUE(p0 && p1);
  EXPECT_EQ(p0->budget_bytes, 2u << 20);
  EXPECT_EQ(p1->budget_bytes, 2u << 20);
  EXPECT_GT(p0->evictions, 8u);
  EXPECT_LE(p0->used_bytes, p0->budget_bytes);
  EXPECT_EQ(p1->evictions, 0u);  // device 0's pressure never touches device 1's cache
  EXPECT_EQ(p1->slots, 2u);
  // Device 1's slots are still there: hits.
  for (const std::string name : {"w1", "w2"}) {
    auto t = c->acquire("m", name, Layout::kDenseF32, 1);
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(c->release_after(t->handle, nullptr));
  }
  auto after = c->stats();
  ASSERT_TRUE(after);
  EXPECT_EQ(pool_of(*after, 1)->hits, p1->hits + 2);
  EXPECT_EQ(pool_of(*after, 1)->misses, 2u);
  EXPECT_EQ(after->used_bytes, pool_of(*after, 0)->used_bytes + pool_of(*after, 1)->used_bytes);
}

TEST_F(EpkdMultiGpu, AClientPinnedOnDeviceOneSurvivesPressureOnDeviceZero) {
  if (!two_devices()) GTEST_SKIP() << "one CUDA device: the second-device cases are not tested";
  DevEpkd d({"--model", "m=" + path_, "--devices", "0,1"}, "2");
  ASSERT_TRUE(d.running());
  // Another process pins w3 on device 1 and holds it.
  Child k = d.client({"devhash", "m", "w3", "dense:fp32", "-1", "device=1"});
  std::string line = read_line(k.out, 20000);
  ASSERT_EQ(line.rfind("hash ", 0), 0u) << line;
  const std::string pinned_hash = line.substr(5, 16);
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c) << c.error().to_string();
  // Pressure on device 0, including the same tensor.
  ASSERT_NO_FATAL_FAILURE(pressure_on_device_zero(*c));
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_GT(pool_of(*s, 0)->evictions, 8u);
  EXPECT_EQ(pool_of(*s, 0)->pins, 0u);
  EXPECT_EQ(pool_of(*s, 1)->pins, 1u);
  EXPECT_EQ(pool_of(*s, 1)->evictions, 0u);
  // The pinned slot still holds its bytes: the same tensor on device 1 is a hit with the same hash.
  auto t = c->acquire("m", "w3", Layout::kDenseF32, 1);
  ASSERT_TRUE(t) << t.error().to_string();
  ASSERT_TRUE(c->wait(*t, nullptr));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xxh3_64(host_bytes(*c, *t))));
  EXPECT_EQ(pinned_hash, std::string(hex));
  EXPECT_TRUE(c->release_after(t->handle, nullptr));
  ::kill(k.pid, SIGKILL);
  EXPECT_EQ(wait_exit(k.pid, 5000), 128 + SIGKILL);
  auto pins = pins_after_wait(*c, [](const client::Stats& st) { return pool_of(st, 1)->pins; });
  ASSERT_TRUE(pins) << pins.error().to_string();
  EXPECT_EQ(*pins, 0u);
}

// `epk get --device 1` writes the same file as the host path; `epk status` prints budget, bytes used and pins per
// device.
TEST_F(EpkdMultiGpu, EpkGetDeviceAndStatusPerDevice) {
  if (!two_devices()) GTEST_SKIP() << "one CUDA device: the second-device cases are not tested";
  if (!fs::exists(EPK_CLI_PATH)) GTEST_SKIP() << "no epk CLI at " << EPK_CLI_PATH;
  DevEpkd d({"--model", "m=" + path_, "--devices", "0,1"}, "8");
  Epkd cpu({"--model", "m=" + path_}, "8");
  ASSERT_TRUE(d.running() && cpu.running());
  const std::string a = (dir_ / "dev1.safetensors").string(), b = (dir_ / "cpu.safetensors").string();
  Child g = spawn({EPK_CLI_PATH, "get", "--socket", d.socket(), "m", "w0", "w4", "-o", a, "--layout", "dense:bf16",
                   "--device", "1"},
                  false);
  ASSERT_EQ(wait_exit(g.pid, 30000), 0);
  Child h = spawn({EPK_CLI_PATH, "get", "--socket", cpu.socket(), "m", "w0", "w4", "-o", b, "--layout", "dense:bf16"},
                  false);
  ASSERT_EQ(wait_exit(h.pid, 30000), 0);
  const std::string ga = read_file(a), cb = read_file(b);
  EXPECT_GT(ga.size(), 1000u);
  EXPECT_TRUE(ga == cb) << "epk get --device 1 differs from the host path";
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  auto pinned = c->acquire("m", "w1", Layout::kDenseF32, 1);  // a pin on device 1 for status to show
  ASSERT_TRUE(pinned) << pinned.error().to_string();
  Child st = spawn({EPK_CLI_PATH, "status", "--socket", d.socket()}, true);
  std::string all, line;
  while (!(line = read_line(st.out, 10000)).empty()) all += line + "\n";
  EXPECT_EQ(wait_exit(st.pid, 10000), 0);
  EXPECT_NE(all.find("pool 0 (device, device 0)"), std::string::npos) << all;
  EXPECT_NE(all.find("pool 1 (device, device 1)"), std::string::npos) << all;
  EXPECT_NE(all.find("of 8.00 MiB budget"), std::string::npos) << all;
  EXPECT_NE(all.find("1 pin(s)"), std::string::npos) << all;
  EXPECT_NE(all.find("resident compressed tier on device 1"), std::string::npos) << all;
  EXPECT_TRUE(c->release_after(pinned->handle, nullptr));
}

}  // namespace
}  // namespace epk
