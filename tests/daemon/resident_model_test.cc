// The resident tier: an EpkSource opened with `resident` serves the same bytes as one over the file's map, from
// memory read at open (io_uring or pread, identical), checksummed there, and unaffected by later changes to the file.
#include "daemon/sources/resident_model.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/sources/epk_source.h"
#include "shm/unique_fd.h"
#include "tests/daemon/epk_test_models.h"

namespace epk::daemon {
namespace {

using shm::Layout;

class ResidentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::current_path() / ("resident_model_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "m.epk").string();
    auto w = container::Writer::create(path_, {{"source", "resident_model_test"}});
    ASSERT_TRUE(w) << w.error().to_string();
    auto weights = test_models::gaussian(40, 72, 11);
    auto enc = test_models::encode_f32(weights, 40, 72, 4.0);
    ASSERT_TRUE(enc) << enc.error().to_string();
    ASSERT_TRUE(test_models::write_lattice(*w, "layers.0.w", *enc));
    std::vector<float> norm(33, 0.25f);
    ASSERT_TRUE(test_models::write_raw(*w, "layers.0.norm", DType::kF32, {33}, test_models::bytes_of(norm)));
    // Over 1 MiB: a 4096-aligned section, read with O_DIRECT.
    big_ = test_models::gaussian(301, 1001, 12);
    ASSERT_TRUE(test_models::write_raw(*w, "embed", DType::kF32, {301, 1001}, test_models::bytes_of(big_)));
    ASSERT_TRUE(test_models::write_lattice(*w, "layers.1.w", *enc));
    ASSERT_TRUE(w->finish());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Every tensor in every layout the source serves, produced into fresh memory.
  static std::vector<std::vector<std::uint8_t>> produce_all(const ModelSource& src) {
    std::vector<std::vector<std::uint8_t>> out;
    for (std::size_t t = 0; t < src.tensors().size(); ++t) {
      for (std::uint32_t l = 0; l < shm::kLayoutCount; ++l) {
        auto served = src.served(t, static_cast<Layout>(l));
        if (!served) continue;
        std::vector<std::uint8_t> dst(served->bytes, 0xAA);
        Status st = src.produce(t, static_cast<Layout>(l), dst);
        EXPECT_TRUE(st) << src.tensors()[t].name << " " << l << ": " << st.error().to_string();
        out.push_back(std::move(dst));
      }
    }
    return out;
  }

  // Every buffer of the memory reader holds what the file holds.
  static void expect_same_buffers(const container::Reader& file, const container::Reader& memory) {
    ASSERT_EQ(file.tensors().size(), memory.tensors().size());
    for (std::size_t t = 0; t < file.tensors().size(); ++t) {
      for (std::size_t i = 0; i < file.tensors()[t].buffers.size(); ++i) {
        auto want = file.buffer(file.tensors()[t], i);
        auto got = memory.buffer(memory.tensors()[t], i);
        ASSERT_EQ(want.size(), got.size());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << file.tensors()[t].name;
      }
    }
  }

  std::filesystem::path dir_;
  std::string path_;
  std::vector<float> big_;
};

TEST_F(ResidentTest, ServesTheSameBytesAsTheMap) {
  auto mapped = open_epk_source(path_);
  ASSERT_TRUE(mapped) << mapped.error().to_string();
  auto resident = open_epk_source(path_, {.resident = true});
  ASSERT_TRUE(resident) << resident.error().to_string();
  auto a = produce_all(**mapped);
  auto b = produce_all(**resident);
  ASSERT_GE(a.size(), 10u);  // raw: stored and dense; lattice-rans: dense and rowwise
  EXPECT_EQ(a, b);
}

TEST_F(ResidentTest, IoUringAndPreadFillTheSameMemory) {
  shm::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto file = container::Reader::open_fd(fd.get(), path_);
  ASSERT_TRUE(file) << file.error().to_string();
  auto u = ResidentModel::load(*file, fd.get(), {.method = ResidentRead::kIoUring});
  ASSERT_TRUE(u) << u.error().to_string();
  auto p = ResidentModel::load(*file, fd.get(), {.method = ResidentRead::kPread});
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_FALSE((*p)->stats().io_uring);
  ASSERT_EQ((*u)->memory().size(), (*p)->memory().size());
  EXPECT_TRUE(std::equal((*u)->memory().begin(), (*u)->memory().end(), (*p)->memory().begin()));
  EXPECT_EQ((*u)->stats().sections, 4u);
  if ((*u)->stats().io_uring) {
    EXPECT_GT((*u)->stats().reads.direct_bytes, 301u * 1001 * 4 / 2);  // the embedding
  }
  expect_same_buffers(*file, (*u)->reader());
}

// The path renamed over by another model between the index read and the section reads (an update landing while
// epkd opens the model): the sections still come from the file the index describes, whichever way they are read, and
// the checksums agree. Opened O_NONBLOCK as epkd opens models, which the ring's reads must not inherit.
TEST_F(ResidentTest, ReadsTheFileItsIndexCameFromWhenThePathIsReplaced) {
  shm::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  ASSERT_TRUE(fd.valid());
  auto file = container::Reader::open_fd(fd.get(), path_);
  ASSERT_TRUE(file) << file.error().to_string();
  const std::string other = (dir_ / "other.epk").string();
  {
    auto w = container::Writer::create(other, {{"source", "another model"}});
    ASSERT_TRUE(w);
    auto big = test_models::gaussian(301, 1001, 99);
    ASSERT_TRUE(test_models::write_raw(*w, "embed", DType::kF32, {301, 1001}, test_models::bytes_of(big)));
    ASSERT_TRUE(w->finish());
  }
  std::filesystem::rename(other, path_);
  for (ResidentRead method : {ResidentRead::kIoUring, ResidentRead::kPread}) {
    auto m = ResidentModel::load(*file, fd.get(), {.method = method});
    ASSERT_TRUE(m) << m.error().to_string();
    expect_same_buffers(*file, (*m)->reader());
  }
}

TEST_F(ResidentTest, ALaterChangeToTheFileIsNotServed) {
  std::vector<std::vector<std::uint8_t>> before;
  {
    auto mapped = open_epk_source(path_);
    ASSERT_TRUE(mapped);
    before = produce_all(**mapped);
  }  // unmapped before the file changes under it
  auto resident = open_epk_source(path_, {.resident = true});
  ASSERT_TRUE(resident) << resident.error().to_string();
  auto mapped = open_epk_source(path_);
  ASSERT_TRUE(mapped);
  // Change a payload byte and a raw byte in place: the mapped source now fails (the tile or the checksum), the
  // resident one still serves what it read and checked at open.
  test_models::xor_byte(path_, test_models::buffer_offset(path_, "layers.0.w", "payload") + 5, 0x40);
  test_models::xor_byte(path_, test_models::buffer_offset(path_, "embed", "data") + 4000, 0x01);
  EXPECT_EQ(produce_all(**resident), before);
  for (const char* name : {"layers.0.w", "embed"}) {
    std::size_t t = 0;
    while ((*mapped)->tensors()[t].name != name) ++t;
    auto served = (*mapped)->served(t, Layout::kDenseF32);
    ASSERT_TRUE(served);
    std::vector<std::uint8_t> dst(served->bytes);
    EXPECT_FALSE((*mapped)->produce(t, Layout::kDenseF32, dst)) << name;
  }
  mapped = make_error(ErrorCode::kIo, "closed");  // unmap before the file shrinks (the map would fault)
  std::filesystem::resize_file(path_, 4096);
  EXPECT_EQ(produce_all(**resident), before);
}

TEST_F(ResidentTest, ACorruptBufferRefusesTheModelAtOpen) {
  test_models::xor_byte(path_, test_models::buffer_offset(path_, "layers.0.norm", "data") + 7, 0x10);
  auto mapped = open_epk_source(path_);  // the map path hashes buffers only when a tensor is produced
  EXPECT_TRUE(mapped);
  auto resident = open_epk_source(path_, {.resident = true});
  ASSERT_FALSE(resident);
  EXPECT_EQ(resident.error().code, ErrorCode::kChecksum);
  EXPECT_NE(resident.error().message.find(path_), std::string::npos) << resident.error().message;
  EXPECT_NE(resident.error().message.find("layers.0.norm"), std::string::npos) << resident.error().message;
}

}  // namespace
}  // namespace epk::daemon
