// SIGHUP on the real epkd (host pools, the CPU decoder) serving real .epk files: a reload that removes a model while a
// client holds a lease on it (the lease's bytes stay readable and intact, new requests naming the model are refused
// naming it, the model's file mapping and its listing in stats, the models list and the metrics go once the lease is
// released), a reload that replaces a model's file (a new generation serves, the old lease keeps the old bytes), and a
// refused reload that changes nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "client/client.h"
#include "codec/rans/decoder.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/raw_wire.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::test_models;   // NOLINT

constexpr std::uint32_t kRows = 129, kCols = 67;
constexpr std::size_t kF32Bytes = std::size_t(kRows) * kCols * 4;

// Polls `done` every 10 ms for up to `ms`.
bool eventually(const std::function<bool()>& done, int ms = 5000) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// GET /metrics over epkd's Unix metrics socket (HTTP/1.0: the server closes after the body).
std::string scrape(const std::string& path) {
  const int fd = raw_connect(path);
  if (fd < 0) return {};
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

class EpkdReload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epkd_reload");
    auto e = encode_gaussians(3, kRows, kCols, 200);
    ASSERT_TRUE(e) << e.error().to_string();
    encoded_ = std::move(*e);
    cfg_ = (dir_ / "epkd.toml").string();
    metrics_ = (dir_ / "metrics.sock").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `count` lattice-rans tensors "layers.I.w" (encoded_[(first + I) % 3]) and a raw "norm".
  std::string write_model(const std::string& name, int first, int count = 2) {
    const std::string path = (dir_ / name).string();
    const std::string partial = path + ".partial";
    auto w = container::Writer::create(partial, {{"source", "epkd_reload_test"}});
    EXPECT_TRUE(w);
    for (int i = 0; i < count; ++i) {
      EXPECT_TRUE(write_lattice(*w, "layers." + std::to_string(i) + ".w", encoded_[(first + i) % 3]));
    }
    const std::vector<float> norm = {0.5f, 1.0f, static_cast<float>(first)};
    EXPECT_TRUE(write_raw(*w, "norm", DType::kF32, {3}, bytes_of(norm)));
    EXPECT_TRUE(w->finish());
    fs::rename(partial, path);  // a new file (inode) under the name, as a deployment replaces a model
    return path;
  }

  void write_config(const std::vector<std::pair<std::string, std::string>>& models, const std::string& extra = "") {
    std::ofstream out(cfg_);
    out << extra;
    for (const auto& [name, path] : models) out << "[[model]]\nname = \"" << name << "\"\npath = \"" << path << "\"\n";
  }

  std::vector<std::byte> reference(int i) {
    std::vector<std::byte> out(kF32Bytes);
    EXPECT_TRUE(rans::decode(encoded_[i % 3].view(), "ref", DType::kF32, out));
    return out;
  }

  static bool same(const client::Tensor& t, const std::vector<std::byte>& want) {
    return t.bytes == want.size() && std::memcmp(t.data, want.data(), want.size()) == 0;
  }

  static bool maps_file(pid_t pid, const std::string& path) {
    return read_file("/proc/" + std::to_string(pid) + "/maps").find(path) != std::string::npos;
  }

  static std::vector<std::string> model_names(Client& c) {
    std::vector<std::string> names;
    auto m = c.models();
    EXPECT_TRUE(m) << m.error().to_string();
    if (m) {
      for (const auto& info : m->models) names.push_back(info.name);
    }
    return names;
  }

  void reload(pid_t pid) { ASSERT_EQ(::kill(pid, SIGHUP), 0); }

  fs::path dir_;
  std::string cfg_, metrics_;
  std::vector<rans::EncodedTensor> encoded_;
};

TEST_F(EpkdReload, RemovingAModelKeepsItsLeaseReadableUntilReleasedAndThenForgetsIt) {
  const std::string a = write_model("a.epk", 0), b = write_model("b.epk", 1);
  const std::string c_path = write_model("c.epk", 2, 40);  // 40 f32 slots of 34.6 KB: more than the 1 MiB budget
  write_config({{"a", a}, {"b", b}});
  Epkd d({"--config", cfg_, "--metrics-listen", metrics_}, "1");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto lease = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(lease) << lease.error().to_string();
  ASSERT_TRUE(same(*lease, reference(0)));
  auto a_id = c->open_model("a");
  ASSERT_TRUE(a_id);
  EXPECT_TRUE(maps_file(d.pid(), a));

  write_config({{"b", b}, {"c", c_path}});
  reload(d.pid());
  ASSERT_TRUE(eventually([&] { return static_cast<bool>(c->open_model("c")); }));
  EXPECT_TRUE(eventually([&] { return read_file(d.log_path()).find("model_removed model=a") != std::string::npos; }));

  // New requests naming a are refused, naming it: by name (libepk re-opens after the first refusal) and by its old id.
  auto refused = c->acquire("a", "layers.1.w", shm::Layout::kDenseF32);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNotFound);
  EXPECT_NE(refused.error().message.find("'a'"), std::string::npos) << refused.error().message;
  auto prefetched = c->prefetch("a", {"layers.1.w"}, shm::Layout::kDenseF32);
  ASSERT_FALSE(prefetched);
  EXPECT_EQ(prefetched.error().code, ErrorCode::kNotFound);
  EXPECT_NE(prefetched.error().message.find("'a'"), std::string::npos) << prefetched.error().message;
  {
    const int fd = raw_connect(d.socket());
    ASSERT_GE(fd, 0);
    raw_hello(fd);
    for (const std::string tensor : {"layers.0.w", "layers.1.w"}) {  // its cached slot too: no new pin
      std::vector<std::uint8_t> msg;
      shm::AcquireRequest req;
      req.model_id = *a_id;
      req.layout = shm::Layout::kDenseF32;
      req.tensor = tensor;
      shm::encode_acquire(7, req, &msg);
      raw_send(fd, msg);
      RawReply r = raw_read_reply(fd, 2000, false);
      ASSERT_TRUE(r.got);
      EXPECT_EQ(error_status(r), shm::WireStatus::kModelGone);
      auto e = shm::decode_error(r.payload);
      ASSERT_TRUE(e);
      EXPECT_NE(e->message.find("model 'a' is no longer served: removed from the config at a reload"),
                std::string::npos)
          << e->message;
    }
    ::close(fd);
  }

  // c serves, and its traffic evicts every unpinned slot the 1 MiB pool holds: a's pinned one stays intact.
  for (int i = 0; i < 40; ++i) {
    auto t = c->acquire("c", "layers." + std::to_string(i) + ".w", shm::Layout::kDenseF32);
    ASSERT_TRUE(t) << i << ": " << t.error().to_string();
    EXPECT_TRUE(same(*t, reference(2 + i))) << i;
    EXPECT_TRUE(c->release(t->handle));
  }
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_GT(s->evictions, 0u);
  EXPECT_EQ(s->models, 3u);  // b, c, and a until its lease goes
  EXPECT_TRUE(same(*lease, reference(0)));
  EXPECT_TRUE(maps_file(d.pid(), a));  // its file mapping lives while the lease does
  const std::string retired = "a (retired, id " + std::to_string(*a_id) + ")";
  EXPECT_EQ(model_names(*c), (std::vector<std::string>{retired, "b", "c"}));
  EXPECT_TRUE(eventually([&] { return scrape(metrics_).find("model=\"" + retired + "\"") != std::string::npos; }));

  EXPECT_TRUE(c->release(lease->handle));
  EXPECT_TRUE(eventually([&] { return !maps_file(d.pid(), a); })) << "a.epk still mapped after its last lease";
  EXPECT_EQ(model_names(*c), (std::vector<std::string>{"b", "c"}));
  s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->models, 2u);
  EXPECT_TRUE(eventually([&] {
    const std::string text = scrape(metrics_);
    return text.find("epkd_models 2") != std::string::npos && text.find("model=\"a") == std::string::npos;
  })) << scrape(metrics_);
  EXPECT_NE(read_file(d.log_path()).find("model_released model=a"), std::string::npos);
  auto b_still = c->acquire("b", "layers.0.w", shm::Layout::kDenseF32);  // untouched by the reload
  ASSERT_TRUE(b_still) << b_still.error().to_string();
  EXPECT_TRUE(same(*b_still, reference(1)));
  EXPECT_TRUE(c->release(b_still->handle));
  c->disconnect();
  EXPECT_EQ(d.terminate(), 0);  // --check-invariants: the cache stayed consistent throughout
}

TEST_F(EpkdReload, AModelWhoseFileChangedIsServedFromANewGenerationWhileTheOldLeaseKeepsItsBytes) {
  const std::string a = write_model("a.epk", 0);
  write_config({{"a", a}});
  Epkd d({"--config", cfg_}, "1");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto old_lease = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(old_lease) << old_lease.error().to_string();
  ASSERT_TRUE(same(*old_lease, reference(0)));
  auto lister = Client::connect(d.socket());  // a second client with the old generation's id cached
  ASSERT_TRUE(lister) << lister.error().to_string();
  ASSERT_TRUE(lister->open_model("a"));

  write_model("a.epk", 1, 3);  // same name and path, a new file: layers.0.w is now encoded_[1], and a third tensor
  reload(d.pid());
  ASSERT_TRUE(eventually([&] { return read_file(d.log_path()).find("model_replaced model=a") != std::string::npos; }));
  // Listing by name lists the new generation (the new file has one more tensor).
  auto listed = lister->tensors("a");
  ASSERT_TRUE(listed) << listed.error().to_string();
  EXPECT_EQ(listed->size(), 4u);
  // The same client, its cached id now the old generation's: refused once, re-opened by name, served the new bytes.
  auto fresh = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  EXPECT_TRUE(same(*fresh, reference(1)));
  EXPECT_NE(fresh->handle, old_lease->handle);
  EXPECT_TRUE(same(*old_lease, reference(0)));
  auto names = model_names(*c);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "a (retired, id 0)");
  EXPECT_EQ(names[1], "a");
  EXPECT_TRUE(c->release(fresh->handle));
  EXPECT_TRUE(c->release(old_lease->handle));
  EXPECT_TRUE(eventually([&] { return model_names(*c) == std::vector<std::string>{"a"}; }));
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->models, 1u);
  // An unchanged file is kept as it is: a second reload replaces nothing.
  reload(d.pid());
  ASSERT_TRUE(eventually([&] { return read_file(d.log_path()).find("reloaded added=0 replaced=0 removed=0") !=
                                       std::string::npos; }));
  auto hit = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->data, fresh->data);  // the same slot: nothing was re-opened
  EXPECT_TRUE(c->release(hit->handle));
  lister->disconnect();
  c->disconnect();
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdReload, ARefusedReloadNeitherRemovesNorAddsNorReplaces) {
  const std::string a = write_model("a.epk", 0), b = write_model("b.epk", 1), c_path = write_model("c.epk", 2);
  write_config({{"a", a}, {"b", b}});
  Epkd d({"--config", cfg_}, "1");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto lease = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(lease) << lease.error().to_string();
  write_model("b.epk", 2);  // b's file changed too, but the file below is refused as a whole
  write_config({{"c", c_path}}, "budgte_mb = 4\n");
  reload(d.pid());
  ASSERT_TRUE(eventually([&] { return read_file(d.log_path()).find("unknown key 'budgte_mb'") != std::string::npos; }));
  EXPECT_FALSE(c->open_model("c"));
  auto again = c->acquire("a", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->data, lease->data);
  EXPECT_TRUE(c->release(again->handle));
  auto b_old = c->acquire("b", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(b_old) << b_old.error().to_string();
  EXPECT_TRUE(same(*b_old, reference(1)));  // the generation opened at start
  EXPECT_TRUE(c->release(b_old->handle));
  EXPECT_EQ(model_names(*c), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(c->release(lease->handle));
  c->disconnect();
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
