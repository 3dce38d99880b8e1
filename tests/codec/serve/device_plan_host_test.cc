// codec/serve/device_plan.h on the host (no GPU): the device writes exactly the slot the host producer sizes, for
// every layout it writes, whole and sharded; the batch job points the row scales where the slot keeps them; the
// uploads are the stream's buffers at the tier's places.
#include "codec/serve/device_plan.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "codec/container/writer.h"
#include "codec/serve/producer.h"
#include "tests/codec/serve/serve_test_files.h"
#include "tests/support/scratch_dir.h"

namespace epk::serve {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kRows = 29, kCols = 77;  // rows * cols not a multiple of 64: the rowwise gap is not empty

class DevicePlanHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("epk_device_plan");
    path_ = (dir_ / "m.epk").string();
    auto writer = container::Writer::create(path_, {{"source", "device_plan_host_test"}});
    ASSERT_TRUE(writer) << writer.error().to_string();
    ASSERT_TRUE(testing::add_lattice(*writer, "w", kRows, kCols, 3));
    ASSERT_TRUE(writer->finish());
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r) << r.error().to_string();
    reader_ = std::move(*r);
    auto p = make_producer(reader_, reader_.tensors()[0], path_);
    ASSERT_TRUE(p) << p.error().to_string();
    producer_ = std::move(*p);
    ASSERT_NE(producer_->lattice_rans(), nullptr);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string path_;
  container::Reader reader_;
  std::unique_ptr<Producer> producer_;
};

TEST(DeviceFormat, EachLayoutItsFormatAndNoneForTheRest) {
  EXPECT_EQ(device_format(Layout::kDenseBF16, DType::kF32), cuda::OutputFormat::kBf16);
  EXPECT_EQ(device_format(Layout::kDenseF16, DType::kBF16), cuda::OutputFormat::kFp16);
  EXPECT_EQ(device_format(Layout::kDenseF32, DType::kBF16), cuda::OutputFormat::kFp32);
  EXPECT_EQ(device_format(Layout::kRowwiseI8, DType::kBF16), cuda::OutputFormat::kInt8Rowwise);
  EXPECT_EQ(device_format(Layout::kRowwiseF8E4M3, DType::kBF16), cuda::OutputFormat::kFp8E4M3Rowwise);
  EXPECT_EQ(device_format(Layout::kStored, DType::kF16), cuda::OutputFormat::kFp16);
  EXPECT_EQ(device_format(Layout::kStored, DType::kF8E5M2), cuda::OutputFormat::kFp8E5M2);
  EXPECT_FALSE(device_format(Layout::kStored, DType::kI8));  // the CPU path
  for (Layout l : {Layout::kGptq, Layout::kGptqV2, Layout::kAwq, Layout::kMarlin}) {
    EXPECT_FALSE(device_format(l, DType::kBF16)) << layout_name(l);
  }
}

TEST_F(DevicePlanHostTest, TheDeviceWritesTheSlotTheHostSizes) {
  const LatticeRansProducer& p = *producer_->lattice_rans();
  int formats = 0;
  for (std::uint32_t code = 0; code < kLayoutCount; ++code) {
    const auto l = static_cast<Layout>(code);
    const auto f = device_format(l, p.source_dtype());
    if (!f) continue;
    ++formats;
    auto whole = p.slot(l);
    ASSERT_TRUE(whole) << layout_name(l);
    EXPECT_EQ(device_output_bytes(*f, kRows, kCols), whole->bytes) << layout_name(l);
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
      for (ShardDim dim : {ShardDim::kRows, ShardDim::kCols}) {
        auto range = resolve_shard(ShardSpec::split(dim, rank, 3), p.entry().shape, "w");
        ASSERT_TRUE(range);
        auto slot = p.shard_slot(l, *range);
        ASSERT_TRUE(slot) << layout_name(l) << " " << describe(*range);
        const std::uint64_t device = dim == ShardDim::kRows
                                         ? device_output_bytes(*f, range->extent(), kCols)
                                         : LatticeDevicePlan::column_shard_bytes(*f, kRows, *range);
        EXPECT_EQ(device, slot->bytes) << layout_name(l) << " " << describe(*range);
      }
    }
  }
  EXPECT_EQ(formats, 6);  // stored (the source dtype), three dense, two rowwise
}

TEST_F(DevicePlanHostTest, BatchJobsPutTheRowScalesWhereTheSlotKeepsThem) {
  const LatticeRansProducer& p = *producer_->lattice_rans();
  const std::uint64_t out = 1 << 20;
  auto job = lattice_job(p, Layout::kRowwiseI8, {}, DeviceAddress(out));
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_EQ(job->job.format, cuda::OutputFormat::kInt8Rowwise);
  EXPECT_EQ(job->job.row_end, kRows);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(job->job.out_dev), out);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(job->job.row_scales_dev), out + rowwise_scales_offset(kRows, kCols));
  EXPECT_EQ(job->gap_at.value, out + std::uint64_t{kRows} * kCols);
  EXPECT_EQ((job->gap_at + job->gap_bytes).value, out + rowwise_scales_offset(kRows, kCols));
  EXPECT_GT(job->gap_bytes, 0u);
  EXPECT_EQ(job->bytes, p.slot(Layout::kRowwiseI8)->bytes);
  auto dense = lattice_job(p, Layout::kDenseBF16, {}, DeviceAddress(out));
  ASSERT_TRUE(dense);
  EXPECT_EQ(dense->job.row_scales_dev, nullptr);
  EXPECT_EQ(dense->gap_bytes, 0u);
  auto packed = lattice_job(p, Layout::kGptq, {}, DeviceAddress(out));
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(packed.error().message.find("tensor 'w'"), std::string::npos) << packed.error().message;
}

TEST_F(DevicePlanHostTest, UploadsAreTheStoredBuffersAtTheTierPlaces) {
  const rans::LatticeRansStream& s = producer_->lattice_rans()->stream();
  const rans::LatticeRansStream* views[1] = {&s};
  const cuda::TierLayout at = cuda::tier_layout(views);
  ASSERT_TRUE(at.tensors[0]);
  const auto ups = lattice_uploads(s, *at.tensors[0]);
  EXPECT_EQ(ups[0].offset, at.tensors[0]->payload);
  EXPECT_EQ(ups[0].host.size(), s.payload.size_bytes());
  EXPECT_EQ(ups[1].offset, at.tensors[0]->offsets);
  EXPECT_EQ(ups[1].host.size(), s.offsets.size_bytes());
  EXPECT_EQ(ups[2].offset, at.tensors[0]->states);
  EXPECT_EQ(ups[2].host.size(), s.states.size_bytes());
  EXPECT_EQ(ups[3].offset, at.tensors[0]->scales);
  EXPECT_EQ(ups[3].host.size(), s.scales.size_bytes());
  for (const Upload& u : ups) EXPECT_LE(u.offset + u.host.size(), at.bytes);
  // The decoder reads the payload past its end: the region holds the pad after it.
  EXPECT_LE(ups[0].offset + ups[0].host.size() + cuda::kTierPayloadPad, at.bytes);
}

}  // namespace
}  // namespace epk::serve
