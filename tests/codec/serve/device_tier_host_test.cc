// codec/serve/device_tier.h on the host (no GPU): which tensors the tier places in its region and where (the rule a
// client and epkd each apply to their own view of one file), and the requests it answers with the host path without
// any device call: tensors with no device form and layouts no kernel writes.
#include "codec/serve/device_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/serve/intq_device_form.h"
#include "codec/serve/intq_producer.h"
#include "codec/serve/lattice_rans_producer.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/codec/serve/serve_test_files.h"
#include "tests/support/scratch_dir.h"

namespace epk::serve {
namespace {

namespace fs = std::filesystem;

class DeviceTierHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("epk_device_tier");
    path_ = (dir_ / "m.epk").string();
    auto writer = container::Writer::create(path_, {{"source", "device_tier_host_test"}});
    ASSERT_TRUE(writer) << writer.error().to_string();
    ASSERT_TRUE(testing::add_lattice(*writer, "a", 29, 77, 1));
    const std::vector<std::uint8_t> raw(3 * 5 * 4, 0x3f);
    container::TensorSpec spec{"b", {3, 5}, DType::kF32, container::Encoding::kRaw, "{}"};
    ASSERT_TRUE(writer->add_tensor(spec, {container::BufferData{"data", raw}}));
    ASSERT_TRUE(testing::add_lattice(*writer, "c", 64, 40, 2));
    ASSERT_TRUE(writer->finish());
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r) << r.error().to_string();
    reader_ = std::move(*r);
    for (const auto& e : reader_.tensors()) {
      auto p = make_producer(reader_, e, path_);
      ASSERT_TRUE(p) << p.error().to_string();
      producers_.push_back(std::move(*p));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<const Producer*> views() const {
    std::vector<const Producer*> v;
    for (const auto& p : producers_) v.push_back(p.get());
    return v;
  }

  fs::path dir_;
  std::string path_;
  container::Reader reader_;
  std::vector<std::unique_ptr<Producer>> producers_;
};

TEST_F(DeviceTierHostTest, TheRegionHoldsTheLatticeTensorsAtTheTierLayoutsPlaces) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) { ADD_FAILURE() << "nothing is allocated"; });
  EXPECT_TRUE(tier.holds(0));
  EXPECT_FALSE(tier.holds(1));
  EXPECT_TRUE(tier.holds(2));
  EXPECT_FALSE(tier.holds(3));
  EXPECT_TRUE(in_device_region(reader_.tensors()[0]));
  EXPECT_FALSE(in_device_region(reader_.tensors()[1]));

  const rans::LatticeRansStream* streams[] = {&producers_[0]->lattice_rans()->stream(), nullptr,
                                              &producers_[2]->lattice_rans()->stream()};
  const cuda::TierLayout want = cuda::tier_layout(streams);
  EXPECT_EQ(tier.region_bytes(), want.bytes);
  ASSERT_GT(want.bytes, 0u);
  tier.bind(DeviceAddress(1 << 20));
  for (std::size_t i : {0u, 2u}) {
    const cuda::DeviceBuffers got = tier.inputs(i), at = cuda::tier_buffers(DeviceAddress(1 << 20), *want.tensors[i]);
    EXPECT_EQ(got.payload_dev, at.payload_dev) << i;
    EXPECT_EQ(got.offsets_dev, at.offsets_dev) << i;
    EXPECT_EQ(got.states_dev, at.states_dev) << i;
    EXPECT_EQ(got.scales_dev, at.scales_dev) << i;
  }
}

TEST_F(DeviceTierHostTest, AModelWithNoLatticeTensorHasNoRegion) {
  DeviceTier tier(nullptr, {producers_[1].get(), nullptr}, 0, [](std::int64_t) {});
  EXPECT_EQ(tier.region_bytes(), 0u);
  EXPECT_FALSE(tier.holds(0));
  EXPECT_FALSE(tier.holds(1));
}

TEST_F(DeviceTierHostTest, TheBatchJobOfAHeldTensorIsTheServingLayersAndOthersAreRefused) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  tier.bind(DeviceAddress(1 << 20));
  auto job = tier.job(0, Layout::kRowwiseI8, DeviceAddress(4096));
  ASSERT_TRUE(job) << job.error().to_string();
  auto want = lattice_job(*producers_[0]->lattice_rans(), Layout::kRowwiseI8, tier.inputs(0), DeviceAddress(4096));
  ASSERT_TRUE(want);
  EXPECT_EQ(job->bytes, want->bytes);
  EXPECT_EQ(job->gap_at, want->gap_at);
  EXPECT_EQ(job->gap_bytes, want->gap_bytes);
  EXPECT_EQ(job->job.row_scales_dev, want->job.row_scales_dev);
  auto raw = tier.job(1, Layout::kDenseBF16, DeviceAddress(4096));
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, ErrorCode::kUnsupported);
  auto packed = tier.job(0, Layout::kGptq, DeviceAddress(4096));
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(packed.error().message.find("'a'"), std::string::npos) << packed.error().message;
}

// The region written part by part in `order` (indices into host_parts()), then its tail, over stale bytes.
std::vector<std::byte> write_parts(const DeviceTier& tier, const std::vector<std::size_t>& order, std::byte stale) {
  std::vector<std::byte> region(tier.region_bytes(), stale);
  const std::vector<DeviceTier::HostPart> parts = tier.host_parts();
  for (std::size_t k : order) DeviceTier::write_host_part(region, parts[k]);
  DeviceTier::zero_host_tail(region, parts);
  return region;
}

TEST_F(DeviceTierHostTest, TheHostTierHoldsEachBufferAtItsPlaceAndZerosElsewhere) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  const std::vector<DeviceTier::HostPart> parts = tier.host_parts();
  ASSERT_EQ(parts.size(), 2u);  // one part per held tensor, in tensor order
  EXPECT_EQ(parts[0].tensor, 0u);
  EXPECT_EQ(parts[1].tensor, 2u);
  const std::vector<std::byte> region = write_parts(tier, {0, 1}, std::byte{0xA5});  // stale: all must be written
  const rans::LatticeRansStream* streams[] = {&producers_[0]->lattice_rans()->stream(), nullptr,
                                              &producers_[2]->lattice_rans()->stream()};
  const cuda::TierLayout layout = cuda::tier_layout(streams);
  std::vector<std::byte> want(region.size(), std::byte{0});
  for (std::size_t i : {0u, 2u}) {
    for (const Upload& u : lattice_uploads(*streams[i], *layout.tensors[i])) {
      std::copy(u.host.begin(), u.host.end(), want.begin() + static_cast<std::ptrdiff_t>(u.offset));
    }
    // A tensor's span runs from its payload to the end of its scales.
    const DeviceTier::Span span = tier.span(i);
    EXPECT_EQ(span.offset, layout.tensors[i]->payload) << i;
    EXPECT_EQ(span.offset + span.bytes, layout.tensors[i]->scales + streams[i]->scales.size_bytes()) << i;
  }
  EXPECT_TRUE(region == want);
}

// epkd's fillers and decodes write the parts in whatever order they reach them: every order, and the parts on
// threads of their own, give the same bytes, since parts write disjoint bytes.
TEST_F(DeviceTierHostTest, HostPartsWrittenInAnyOrderGiveTheSameRegion) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  const std::vector<std::byte> in_order = write_parts(tier, {0, 1}, std::byte{0x5A});
  EXPECT_TRUE(write_parts(tier, {1, 0}, std::byte{0xC3}) == in_order);
  std::vector<std::byte> threaded(tier.region_bytes(), std::byte{0x3C});
  const std::vector<DeviceTier::HostPart> parts = tier.host_parts();
  {
    std::vector<std::jthread> writers;
    for (const DeviceTier::HostPart& part : parts) {
      writers.emplace_back([&threaded, &part] { DeviceTier::write_host_part(threaded, part); });
    }
  }
  DeviceTier::zero_host_tail(threaded, parts);
  EXPECT_TRUE(threaded == in_order);
  EXPECT_EQ(tier.staging_bytes(), 0u);  // every held tensor is on the device: nothing to stage
  EXPECT_FALSE(tier.staged());
}

// epkd's split between the device and the host tier: the tensors placed on the device are laid out compactly in
// tensor order, their footprints adding up to the device region; by default every held tensor is there and the
// device region is the whole region (what a client binds).
TEST_F(DeviceTierHostTest, APlacedSubsetTakesItsFootprintsOnTheDevice) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  EXPECT_EQ(tier.device_region_bytes(), tier.region_bytes());
  EXPECT_TRUE(tier.on_device(0));
  EXPECT_TRUE(tier.on_device(2));
  EXPECT_EQ(tier.footprint(1), 0u);
  EXPECT_EQ(tier.footprint(0) + tier.footprint(2), tier.region_bytes());
  EXPECT_EQ(tier.footprint(0) % cuda::kTierAlign, 0u);
  EXPECT_GE(tier.footprint(2), tier.span(2).bytes);

  tier.place({false, true, true});  // tensor 1 is not in the tier: asking for it places nothing
  EXPECT_FALSE(tier.on_device(0));
  EXPECT_FALSE(tier.on_device(1));
  EXPECT_TRUE(tier.on_device(2));
  EXPECT_EQ(tier.device_region_bytes(), tier.footprint(2));
  EXPECT_EQ(tier.staging_bytes(), tier.span(0).bytes);  // the one tensor decoded from the host tier
  EXPECT_EQ(tier.region_bytes(), tier.footprint(0) + tier.footprint(2));  // the host tier's region is unchanged
  tier.bind(DeviceAddress(1 << 20));
  const cuda::DeviceBuffers in = tier.inputs(2);  // first in the device region now
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(in.payload_dev), std::uintptr_t{1} << 20);

  tier.place({});
  EXPECT_EQ(tier.device_region_bytes(), 0u);
  EXPECT_EQ(tier.staging_bytes(), std::max(tier.span(0).bytes, tier.span(2).bytes));
  tier.place({true, true, true, true});
  EXPECT_EQ(tier.device_region_bytes(), tier.region_bytes());
}

TEST_F(DeviceTierHostTest, AStagedJobReadsTheCopyOfItsSpan) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  tier.bind(DeviceAddress(1 << 20));
  const DeviceTier::Span span = tier.span(2);
  auto staged = tier.job(2, Layout::kDenseBF16, DeviceAddress(4096), DeviceAddress(1 << 24));
  ASSERT_TRUE(staged) << staged.error().to_string();
  const cuda::DeviceBuffers in = tier.inputs(2);
  const auto shift = [&](const void* p) {  // where the bound region's pointer lands in a copy of the span
    return reinterpret_cast<std::uintptr_t>(p) - ((1u << 20) + span.offset) + (1u << 24);
  };
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(staged->job.dev.payload_dev), shift(in.payload_dev));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(staged->job.dev.offsets_dev), shift(in.offsets_dev));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(staged->job.dev.states_dev), shift(in.states_dev));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(staged->job.dev.scales_dev), shift(in.scales_dev));
  auto unaligned = tier.job(2, Layout::kDenseBF16, DeviceAddress(4096), DeviceAddress((1 << 24) + 16));
  ASSERT_FALSE(unaligned);
  EXPECT_EQ(unaligned.error().code, ErrorCode::kInvalidArgument);
}

// intq "int" tensors are placed like held ones, by their device form's stored padding: codes, float32 scales and
// (act-order) g_idx with its group order, each rounded to 256 bytes; a tensor place() leaves off the device is
// counted in tier_bytes() only.
TEST(DeviceTierIntq, AnIntqTensorIsPlacedByItsFormsStoredBytes) {
  const fs::path dir = test::scratch_dir("epk_device_tier_intq");
  const std::string path = (dir / "m.epk").string();
  {
    auto writer = container::Writer::create(path, {{"source", "device_tier_host_test"}});
    ASSERT_TRUE(writer) << writer.error().to_string();
    ASSERT_TRUE(testing::add_lattice(*writer, "a", 29, 77, 1));
    // 4-bit, 256 in x 64 out, groups of 64, symmetric, act-order (g_idx), no perm.
    const layouts::QuantTensor q = layouts::testing::random_intq_tensor(4, 256, 64, 64, true, true, false, 5);
    auto e = layouts::intq::encode_int(q, "q", DType::kBF16, "gptq", layouts::intq::CodeForm::kPacked);
    ASSERT_TRUE(e) << e.error().to_string();
    ASSERT_TRUE(writer->add_tensor(e->spec, e->buffers()));
    ASSERT_TRUE(writer->finish());
  }
  auto reader = container::Reader::open(path);
  ASSERT_TRUE(reader) << reader.error().to_string();
  std::vector<std::unique_ptr<Producer>> producers;
  std::vector<const Producer*> views;
  for (const auto& e : reader->tensors()) {
    auto p = make_producer(*reader, e, path);
    ASSERT_TRUE(p) << p.error().to_string();
    views.push_back(p->get());
    producers.push_back(std::move(*p));
  }
  DeviceTier tier(nullptr, views, 0, [](std::int64_t) {});
  EXPECT_FALSE(tier.holds(1));
  const std::uint64_t codes = 256 * 64 / 2, scales = 4 * 64 * 4, g_idx = 256 * 4, order = 256 * 4;
  EXPECT_EQ(tier.footprint(1), codes + scales + g_idx + order);  // each a multiple of 256 already
  EXPECT_EQ(tier.tier_bytes(), tier.footprint(0) + tier.footprint(1));
  EXPECT_EQ(tier.device_tier_bytes(), tier.tier_bytes());
  EXPECT_TRUE(tier.intq_on_device(1));
  EXPECT_FALSE(tier.intq_on_device(0));

  tier.place({true, false});
  EXPECT_FALSE(tier.intq_on_device(1));
  EXPECT_EQ(tier.device_tier_bytes(), tier.footprint(0));
  EXPECT_EQ(tier.tier_bytes(), tier.footprint(0) + tier.footprint(1));
  EXPECT_EQ(tier.staging_bytes(), 0u);  // the lattice tensor stays: nothing of the region in host memory
  tier.place({false, true});
  EXPECT_TRUE(tier.intq_on_device(1));
  EXPECT_EQ(tier.device_tier_bytes(), tier.footprint(1));

  // A form is made only for a layout the kernels may write (fp32 dense is the host path's), and a shard of it goes
  // to the host path (the kernels write whole tensors) while naming the form the tensor has.
  const IntqProducer& iq = *producers[1]->intq();
  EXPECT_TRUE(IntqDeviceForm::may_cover(iq, Layout::kDenseBF16));
  EXPECT_TRUE(IntqDeviceForm::may_cover(iq, Layout::kGptq));
  EXPECT_FALSE(IntqDeviceForm::may_cover(iq, Layout::kDenseF32));
  ColumnWork work(0, [](std::int64_t) { ADD_FAILURE() << "no work buffer"; });
  auto shard = tier.enqueue(1, Layout::kDenseBF16, ShardRange{ShardDim::kRows, 0, 128}, DeviceAddress(4096),
                            128 * 64 * 2, work, nullptr);
  ASSERT_TRUE(shard) << shard.error().to_string();
  EXPECT_EQ(shard->path, DevicePath::kHost);
  EXPECT_EQ(shard->form, DevicePath::kIntqKernels);
  fs::remove_all(dir);
}

// Requests no device path covers return kHost before anything touches a device (this machine may have none).
TEST_F(DeviceTierHostTest, RequestsNoKernelWritesAreLeftToTheHostPath) {
  DeviceTier tier(nullptr, views(), 0, [](std::int64_t) {});
  ColumnWork work(0, [](std::int64_t) { ADD_FAILURE() << "no work buffer"; });
  auto raw = tier.enqueue(1, Layout::kDenseBF16, ShardRange{}, DeviceAddress(4096), 3 * 5 * 2, work, nullptr);
  ASSERT_TRUE(raw) << raw.error().to_string();
  EXPECT_EQ(raw->path, DevicePath::kHost);
  EXPECT_EQ(raw->form, DevicePath::kHost);
  auto packed = tier.enqueue(0, Layout::kGptq, ShardRange{}, DeviceAddress(4096), 1024, work, nullptr);
  ASSERT_TRUE(packed) << packed.error().to_string();
  EXPECT_EQ(packed->path, DevicePath::kHost);
  EXPECT_EQ(packed->form, DevicePath::kLatticeDecode);
  EXPECT_TRUE(packed->note.empty());
  auto missing = tier.enqueue(7, Layout::kDenseBF16, ShardRange{}, DeviceAddress(4096), 64, work, nullptr);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace epk::serve
