// FORMAT.md's dimension rules through the real binary: a lattice-rans tensor whose shape[1] is 2^32 (rule 10.1) is
// refused by every command that opens the file, naming the tensor and the field, before anything is sized by it
// (decompress once tried a 2 TiB allocation and printed only "epk: std::bad_alloc").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/format.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "tests/tools/run_command.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

std::string tool() { return EPK_TOOL; }

// A valid file holding one lattice-rans tensor 'w' [2, 8], then its index's shape[1] set to `cols` with the index
// and header checksums recomputed, so only the shape rule can refuse it.
Bytes lattice_file_with_cols(const fs::path& dir, std::uint64_t cols) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(16);
  for (float& v : w) v = d(rng);
  rate::EncodeOptions o;
  o.target_bpp = 4.0;
  auto t = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, 2, 8, DType::kF32, o, "w");
  EXPECT_TRUE(t);
  const auto path = (dir / "valid.epk").string();
  auto writer = container::Writer::create(path, {});
  EXPECT_TRUE(writer);
  auto form = rans::to_container(*t, "w", {});
  EXPECT_TRUE(writer->add_tensor(form.spec, form.buffers));
  EXPECT_TRUE(writer->finish());
  std::ifstream in(path, std::ios::binary);
  Bytes f{std::istreambuf_iterator<char>(in), {}};

  namespace h = container::header;
  const std::uint64_t index = load_le<std::uint64_t>(f.data() + h::kIndexOffsetAt);
  const std::uint64_t index_size = load_le<std::uint64_t>(f.data() + h::kIndexSizeAt);
  // u64 tensor_count, str32 name "w", rank/dtype/encoding/reserved, shape[0], shape[1]
  const std::size_t shape1 = index + 8 + 4 + 1 + 4 + 8;
  EXPECT_EQ(load_le<std::uint64_t>(f.data() + shape1), 8u);
  store_le<std::uint64_t>(f.data() + shape1, cols);
  store_le<std::uint64_t>(f.data() + h::kIndexChecksumAt, xxh3_64({f.data() + index, index_size}));
  store_le<std::uint64_t>(f.data() + h::kHeaderChecksumAt, xxh3_64({f.data(), h::kHeaderChecksumAt}));
  return f;
}

class EpkShapeLimits : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("epk_shape_limits"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const Bytes& b) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    return p;
  }
  fs::path dir_;
};

TEST_F(EpkShapeLimits, UnpatchedFileIsAccepted) {  // the patch below is what makes the difference
  const auto p = write("ok.epk", lattice_file_with_cols(dir_, 8));
  EXPECT_EQ(test::run_command(tool() + " inspect " + p).status, 0);
  EXPECT_EQ(test::run_command(tool() + " decompress " + p + " --device cpu -o " + (dir_ / "ok.safetensors").string())
                .status,
            0);
}

TEST_F(EpkShapeLimits, LatticeColsOf2To32AreRefusedByEveryCommandNamingTheField) {
  const auto p = write("cols.epk", lattice_file_with_cols(dir_, std::uint64_t(1) << 32));
  const std::string out = (dir_ / "out.safetensors").string();
  for (const std::string& cmd : {tool() + " inspect " + p, tool() + " inspect --json " + p, tool() + " verify " + p,
                                tool() + " decompress " + p + " --device cpu -o " + out}) {
    SCOPED_TRACE(cmd);
    auto r = test::run_command(cmd);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("tensor[0] 'w' shape[1]: 4294967296 outside [1, 2^32)"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(EpkShapeLimits, LatticeRowsOfZeroAreRefused) {
  Bytes f = lattice_file_with_cols(dir_, 8);
  namespace h = container::header;
  const std::uint64_t index = load_le<std::uint64_t>(f.data() + h::kIndexOffsetAt);
  const std::uint64_t index_size = load_le<std::uint64_t>(f.data() + h::kIndexSizeAt);
  store_le<std::uint64_t>(f.data() + index + 8 + 4 + 1 + 4, 0);  // shape[0]
  store_le<std::uint64_t>(f.data() + h::kIndexChecksumAt, xxh3_64({f.data() + index, index_size}));
  store_le<std::uint64_t>(f.data() + h::kHeaderChecksumAt, xxh3_64({f.data(), h::kHeaderChecksumAt}));
  auto r = test::run_command(tool() + " inspect " + write("rows.epk", f));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("'w' shape[0]: 0 outside [1, 2^32)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace epk
