// The real epkd serving real .epk files (made here with the container Writer and codec encode) to clients over a
// real socket: lattice-rans tensors decoded on the CPU path, raw tensors as stored, a corrupt tile refused by name
// while the session and the other tensors keep serving, a corrupt model refused at open while the others serve.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "client/client.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "codec/rans/decoder.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::test_models;   // NOLINT

constexpr std::uint32_t kRows = 129, kCols = 67;

class EpkdEpk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epkd_epk");
    auto e = encode_gaussians(2, kRows, kCols, 100);
    ASSERT_TRUE(e) << e.error().to_string();
    encoded_ = std::move(*e);
    norm_ = {0.5f, 1.0f, -1.25f};
    good_ = write_model("good.epk");
    other_ = write_model("other.epk");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_model(const std::string& name) {
    std::string path = (dir_ / name).string();
    auto w = container::Writer::create(path, {{"source", "epkd_epk_test"}});
    EXPECT_TRUE(w);
    EXPECT_TRUE(write_lattice(*w, "layers.0.w", encoded_[0]));
    EXPECT_TRUE(write_lattice(*w, "layers.1.w", encoded_[1]));
    EXPECT_TRUE(write_raw(*w, "norm", DType::kF32, {3}, bytes_of(norm_)));
    EXPECT_TRUE(w->finish());
    return path;
  }

  std::vector<std::byte> reference(int i, DType dtype) {
    std::vector<std::byte> out(std::size_t(kRows) * kCols * (dtype_bits(dtype) / 8));
    EXPECT_TRUE(rans::decode(encoded_[i].view(), "ref", dtype, out));
    return out;
  }

  fs::path dir_;
  std::string good_, other_;
  std::vector<rans::EncodedTensor> encoded_;
  std::vector<float> norm_;
};

TEST_F(EpkdEpk, ServesLatticeTensorsDecodedAndRawTensorsAsStored) {
  Epkd d({"--model", "m=" + good_}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  for (int i = 0; i < 2; ++i) {
    for (auto [layout, dtype] :
         {std::pair{shm::Layout::kDenseBF16, DType::kBF16}, std::pair{shm::Layout::kDenseF32, DType::kF32}}) {
      auto t = c->acquire("m", "layers." + std::to_string(i) + ".w", layout);
      ASSERT_TRUE(t) << t.error().to_string();
      EXPECT_EQ(t->dtype, dtype);
      EXPECT_EQ(t->shape, (std::vector<std::uint64_t>{kRows, kCols}));
      auto want = reference(i, dtype);
      ASSERT_EQ(t->bytes, want.size());
      EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << i;
      EXPECT_TRUE(c->release(t->handle));
    }
  }
  auto n = c->acquire("m", "norm", shm::Layout::kStored);
  ASSERT_TRUE(n) << n.error().to_string();
  ASSERT_EQ(n->bytes, 12u);
  EXPECT_EQ(std::memcmp(n->data, norm_.data(), 12), 0);
  EXPECT_TRUE(c->release(n->handle));
  auto again = c->acquire("m", "layers.0.w", shm::Layout::kDenseBF16);  // cached: a hit, no second decode
  ASSERT_TRUE(again);
  EXPECT_TRUE(c->release(again->handle));
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->decodes, 5u);
  EXPECT_EQ(s->hits, 1u);
  EXPECT_EQ(d.terminate(), 0);
}

// A model in the native stream profile (docs/STREAM.md section 9) serves the bytes its expanded streams decode to,
// read from the file or from memory read at open, in the dense and the rowwise layouts.
TEST_F(EpkdEpk, NativeProfileTensorsServeWhatTheyDecodeTo) {
  std::vector<rans::EncodedTensor> native = encoded_;
  const std::string path = (dir_ / "native.epk").string();
  {
    auto w = container::Writer::create(path, {});
    ASSERT_TRUE(w);
    rans::EncodingInfo info;
    info.profile = rans::StreamProfile::kNative;
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(rans::round_scales_to_native(native[i].scales));
      auto f = rans::to_container_as(native[i], "layers." + std::to_string(i) + ".w", info);
      ASSERT_TRUE(f) << f.error().to_string();
      ASSERT_TRUE(w->add_tensor(f->form.spec, f->form.buffers));
    }
    ASSERT_TRUE(w->finish());
  }
  for (bool resident : {false, true}) {
    std::vector<std::string> args = {"--model", "m=" + path};
    if (resident) args.push_back("--resident-compressed");
    Epkd d(args, "4");
    auto c = d.connect();
    ASSERT_TRUE(c) << c.error().to_string();
    for (int i = 0; i < 2; ++i) {
      auto t = c->acquire("m", "layers." + std::to_string(i) + ".w", shm::Layout::kDenseBF16);
      ASSERT_TRUE(t) << t.error().to_string();
      std::vector<std::byte> want(std::size_t(kRows) * kCols * 2);
      ASSERT_TRUE(rans::decode(native[i].view(), "ref", DType::kBF16, want));
      ASSERT_EQ(t->bytes, want.size());
      EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << i << " resident " << resident;
      EXPECT_TRUE(c->release(t->handle));
    }
    auto r = c->acquire("m", "layers.1.w", shm::Layout::kRowwiseI8);
    ASSERT_TRUE(r) << r.error().to_string();
    std::vector<std::byte> values(std::size_t(kRows) * kCols);
    std::vector<float> scales(kRows);
    ASSERT_TRUE(rans::decode_rowwise(native[1].view(), "ref", rans::RowwiseType::kInt8, values, scales, 0, kRows));
    EXPECT_EQ(std::memcmp(r->data, values.data(), values.size()), 0);
    EXPECT_EQ(std::memcmp(r->row_scales, scales.data(), kRows * 4), 0);
    EXPECT_TRUE(c->release(r->handle));
    EXPECT_EQ(d.terminate(), 0);
  }
}

TEST_F(EpkdEpk, ResidentCompressedServesFromMemoryReadAtOpen) {
  Epkd d({"--model", "m=" + good_, "--resident-compressed"}, "4");
  ASSERT_TRUE(d.running());
  // The file changes after epkd read it: what it serves is what it read and checked at open.
  xor_byte(good_, buffer_offset(good_, "layers.1.w", "payload") + 3, 0x22);
  xor_byte(good_, buffer_offset(good_, "norm", "data") + 1, 0x01);
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c) << c.error().to_string();
  for (int i = 0; i < 2; ++i) {
    auto t = c->acquire("m", "layers." + std::to_string(i) + ".w", shm::Layout::kDenseF32);
    ASSERT_TRUE(t) << t.error().to_string();
    auto want = reference(i, DType::kF32);
    ASSERT_EQ(t->bytes, want.size());
    EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << i;
    EXPECT_TRUE(c->release(t->handle));
  }
  auto n = c->acquire("m", "norm", shm::Layout::kStored);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(std::memcmp(n->data, norm_.data(), 12), 0);
  EXPECT_TRUE(c->release(n->handle));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdEpk, ResidentCompressedRefusesACorruptModelAtOpenAndServesTheOthers) {
  xor_byte(other_, buffer_offset(other_, "norm", "data") + 2, 0x04);  // a checksum the map path checks only later
  Epkd d({"--model", "bad=" + other_, "--model", "m=" + good_, "--resident-compressed"}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto bad = c->acquire("bad", "norm", shm::Layout::kStored);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kNotFound);
  auto t = c->acquire("m", "norm", shm::Layout::kStored);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_TRUE(c->release(t->handle));
  EXPECT_EQ(d.terminate(), 0);
}

// An intq model through the real daemon: packed integer layouts arrive as the CPU writers' parts, where the client's
// part table (shm::packed_parts) says; a layout the tensor cannot take is refused by name and the session goes on.
TEST_F(EpkdEpk, IntqTensorsServedInGptqAndMarlinAreTheCpuWritersBytes) {
  const layouts::QuantTensor act = layouts::testing::random_intq_tensor(4, 256, 192, 64, true, true, false, 21);
  const std::string path = (dir_ / "intq.epk").string();
  {
    auto e = layouts::intq::encode_int(act, "layers.0.q", DType::kF16, "gptq");
    ASSERT_TRUE(e) << e.error().to_string();
    auto w = container::Writer::create(path, {});
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->add_tensor(e->spec, e->buffers()));
    ASSERT_TRUE(w->finish());
  }
  Epkd d({"--model", "q=" + path}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  for (auto [layout, target] : {std::pair{shm::Layout::kGptq, layouts::Layout::kGptqV1},
                                std::pair{shm::Layout::kMarlin, layouts::Layout::kMarlin}}) {
    SCOPED_TRACE(std::string(shm::layout_name(layout)));
    auto want = layouts::write_layout(act, target);
    ASSERT_TRUE(want) << want.error().to_string();
    auto t = c->acquire("q", "layers.0.q", layout);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ(t->dtype, DType::kF16);
    ASSERT_EQ(t->parts.size(), want->tensors.size());
    for (std::size_t i = 0; i < t->parts.size(); ++i) {
      const auto& w = want->tensors[i];
      EXPECT_EQ(t->parts[i].name, w.name);
      EXPECT_EQ(t->parts[i].dtype, w.dtype);
      EXPECT_EQ(t->parts[i].shape, std::vector<std::uint64_t>(w.shape.begin(), w.shape.end()));
      ASSERT_EQ(t->parts[i].bytes, w.bytes.size());
      EXPECT_EQ(std::memcmp(t->parts[i].data, w.bytes.data(), w.bytes.size()), 0) << w.name;
    }
    EXPECT_TRUE(c->release(t->handle));
  }
  auto awq = c->acquire("q", "layers.0.q", shm::Layout::kAwq);  // act-order: AWQ cannot carry the permutation
  ASSERT_FALSE(awq);
  EXPECT_EQ(awq.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(awq.error().message.find("layers.0.q"), std::string::npos) << awq.error().message;
  auto dense = c->acquire("q", "layers.0.q", shm::Layout::kDenseF16);
  ASSERT_TRUE(dense) << dense.error().to_string();
  auto reader = container::Reader::open(path);
  ASSERT_TRUE(reader);
  std::vector<std::uint8_t> want(dense->bytes);
  ASSERT_TRUE(layouts::intq::dequantize_intq(*reader, reader->tensors()[0], DType::kF16, want));
  EXPECT_EQ(std::memcmp(dense->data, want.data(), want.size()), 0);
  EXPECT_TRUE(c->release(dense->handle));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdEpk, RowwiseInt8ComesWithItsRowScales) {
  Epkd d({"--model", "m=" + good_}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c);
  auto t = c->acquire("m", "layers.1.w", shm::Layout::kRowwiseI8);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->dtype, DType::kI8);
  ASSERT_NE(t->row_scales, nullptr);
  std::vector<std::byte> values(std::size_t(kRows) * kCols);
  std::vector<float> scales(kRows);
  ASSERT_TRUE(rans::decode_rowwise(encoded_[1].view(), "ref", rans::RowwiseType::kInt8, values, scales, 0, kRows));
  EXPECT_EQ(std::memcmp(t->data, values.data(), values.size()), 0);
  EXPECT_EQ(std::memcmp(t->row_scales, scales.data(), kRows * 4), 0);
  EXPECT_TRUE(c->release(t->handle));
  auto raw = c->acquire("m", "norm", shm::Layout::kRowwiseI8);  // raw tensors have no rowwise form
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdEpk, CorruptTileFailsTheAcquireNamingTensorAndTileAndTheRestServes) {
  xor_byte(good_, buffer_offset(good_, "layers.1.w", "payload") + encoded_[1].payload.size(), 0x5A);
  Epkd d({"--model", "m=" + good_}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c);
  for (int attempt = 0; attempt < 2; ++attempt) {  // never cached as if it were good
    auto bad = c->acquire("m", "layers.1.w", shm::Layout::kDenseBF16);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, ErrorCode::kCorruptTile);
    EXPECT_NE(bad.error().message.find("'layers.1.w'"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("tile "), std::string::npos) << bad.error().message;
  }
  auto ok = c->acquire("m", "layers.0.w", shm::Layout::kDenseBF16);  // same session
  ASSERT_TRUE(ok) << ok.error().to_string();
  auto want = reference(0, DType::kBF16);
  EXPECT_EQ(std::memcmp(ok->data, want.data(), want.size()), 0);
  EXPECT_TRUE(c->release(ok->handle));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdEpk, CorruptModelIsRefusedAtOpenWhileTheOthersServe) {
  auto size = fs::file_size(other_);
  xor_byte(other_, size - 20, 0xFF);  // inside the hashed index / metadata
  std::string truncated = (dir_ / "truncated.epk").string();
  fs::copy_file(good_, truncated);
  fs::resize_file(truncated, 100);
  Epkd d({"--model", "bad=" + other_, "--model", "m=" + good_, "--model", "short=" + truncated}, "4");
  auto c = d.connect();
  ASSERT_TRUE(c);
  for (const char* refused : {"bad", "short"}) {
    auto r = c->open_model(refused);
    ASSERT_FALSE(r) << refused;
    EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  }
  auto ok = c->acquire("m", "layers.0.w", shm::Layout::kDenseF32);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_TRUE(c->release(ok->handle));
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->models, 1u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdEpk, OnlyCorruptModelsMeansEpkdDoesNotStart) {
  fs::resize_file(other_, 100);
  std::string log = (dir_ / "epkd.log").string();
  Child ch = spawn(
      {EPKD_PATH, "--socket", (dir_ / "s.sock").string(), "--budget-mb", "1", "--cpu", "--model", "bad=" + other_},
      false, log);
  EXPECT_EQ(wait_exit(ch.pid, 5000), 1);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(other_), std::string::npos) << text;  // the log names the refused file
}

}  // namespace
}  // namespace epk
