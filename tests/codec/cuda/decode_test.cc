// The GPU decoder against the project's CPU decoder (codec/rans/decoder.h, the oracle; the reference package's outputs
// stored with the vectors are checked against it too), bit for bit, for every output format (dense and rowwise), each
// kernel (lean and general) and table placement; row ranges; batches; corrupt tiles.
// Tests that need a GPU skip where none is present; plan validation tests run everywhere.
#include "codec/cuda/decode/decode.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <random>

#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/plan_overrides.h"
#include "tests/codec/cuda/cpu_oracle.h"
#include "tests/codec/cuda/device_stream.h"
#include "tests/codec/cuda/plan_cases.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace {

using testing::DeviceBuffer;
using testing::DeviceStream;
using testing::RawStream;
using testing::read_raw_stream;

#define SKIP_WITHOUT_GPU() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

RawStream load(const std::string& name) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/" + name + ".epkraw");
  EXPECT_TRUE(raw) << raw.error().to_string();
  return raw ? std::move(*raw) : RawStream{};
}

using testing::HostResult;

HostResult reference(const rans::LatticeRansStream& s, OutputFormat f, std::uint32_t b, std::uint32_t e) {
  return testing::cpu_oracle(s, f, b, e);
}

// One tensor's output on the device, poisoned before every decode so unwritten elements show.
struct DeviceOutput {
  DeviceBuffer values, row_scales;
  DeviceOutput(std::size_t bytes, std::size_t rows) : values(bytes), row_scales(rows * 4) {
    EPK_CUDA_CHECK(cudaMemset(values.get(), 0xAB, bytes));
    EPK_CUDA_CHECK(cudaMemset(row_scales.get(), 0xAB, rows * 4));
  }
  HostResult fetch() const {
    HostResult r;
    r.values.resize(values.bytes());
    r.row_scales.resize(row_scales.bytes() / 4);
    EPK_CUDA_CHECK(cudaMemcpy(r.values.data(), values.get(), values.bytes(), cudaMemcpyDeviceToHost));
    EPK_CUDA_CHECK(cudaMemcpy(r.row_scales.data(), row_scales.get(), row_scales.bytes(), cudaMemcpyDeviceToHost));
    return r;
  }
};

std::size_t first_difference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return i;
  }
  return a.size();
}

using detail::PlanOverrides;
using testing::general_loop;

// Plans, uploads, decodes and checks the status; returns the plan's status.
Status run(std::span<const DecodeJob> jobs, const PlanOverrides& overrides = {}) {
  EPK_TRY_ASSIGN(DecodePlan plan, DecodePlan::create(jobs, {}, overrides));
  DeviceBuffer scratch(plan.scratch_bytes());
  EPK_TRY(upload(plan, scratch.get(), scratch.bytes(), nullptr));
  EPK_TRY(decode(plan, scratch.get(), nullptr));
  return read_status(plan, scratch.get(), nullptr);
}

// Up to 5 tiles (all of a committed vector's) in one block of at most `warps` warps: several warps per block, and
// tiles from the block's counter after each warp's first.
PlanOverrides few_warps(PlanOverrides o, std::uint32_t warps) {
  o.max_warps_per_block = warps;
  o.min_tiles_per_block = 5;
  return o;
}
std::string describe(const PlanOverrides& o) {
  return "lut " + std::to_string(o.lut_mode) + " lean " + std::to_string(o.lean) + " max warps " +
         std::to_string(o.max_warps_per_block) + " tiles/block " + std::to_string(o.min_tiles_per_block);
}

// The kept kernels on the same stream: the default plan (the lean kernel at prob_bits 11, the general one with
// two-level tables at 8 bpp), the general kernel in each table placement, and each with a vector's tiles in one block
// of two or three warps.
const PlanOverrides kVariants[] = {
    {},
    few_warps({}, 2),
    general_loop(),
    few_warps(general_loop(), 2),
    general_loop(detail::kTwoLevelShared),
    few_warps(general_loop(detail::kTwoLevelShared), 3),
    general_loop(detail::kWideGlobal),
    few_warps(general_loop(detail::kWideGlobal), 3),
};
// The default, the general kernel and the global placement, for the tests that do not run every variant.
const PlanOverrides kDefaultGeneralWide[] = {{}, general_loop(), general_loop(detail::kWideGlobal)};

class GpuVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuVectors, EveryFormatAndVariantMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  RawStream raw = load(GetParam());
  const rans::LatticeRansStream s = raw.view();
  DeviceStream dev(s);
  for (int fi = 0; fi < kOutputFormats; ++fi) {
    const auto format = static_cast<OutputFormat>(fi);
    const HostResult want = reference(s, format, 0, 0);
    if (auto it = raw.outputs.find(static_cast<std::uint32_t>(fi)); it != raw.outputs.end()) {
      ASSERT_EQ(first_difference(want.values, it->second), want.values.size())
          << "CPU reference vs reference package, " << output_format_name(format);
    }
    for (const PlanOverrides& variant : kVariants) {
      DeviceOutput out(want.values.size(), s.rows);
      DecodeJob job{GetParam(), &s, dev.buffers(), 0, 0, format, out.values.get(), out.row_scales.get<float>()};
      const Status st = run({&job, 1}, variant);
      ASSERT_TRUE(st) << st.error().to_string();
      const HostResult got = out.fetch();
      const std::string what = std::string(output_format_name(format)) + " " + describe(variant);
      EXPECT_EQ(first_difference(got.values, want.values), want.values.size()) << what;
      if (is_rowwise(format)) {
        EXPECT_EQ(got.row_scales, want.row_scales) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, GpuVectors, ::testing::ValuesIn(testing::cuda_vector_names()));

// A committed vector on the device with an output buffer for `format`, and the job that decodes all of it (for the
// plan tests). Members in construction order: each one points into those before it, so it neither copies nor moves.
struct VectorJob {
  VectorJob(const char* name, OutputFormat format)
      : raw(load(name)),
        s(raw.view()),
        dev(s),
        out(std::size_t{s.rows} * s.cols * output_element_bytes(format), s.rows),
        job{name, &s, dev.buffers(), 0, 0, format, out.values.get(), out.row_scales.get<float>()} {}
  VectorJob(const VectorJob&) = delete;
  VectorJob& operator=(const VectorJob&) = delete;
  RawStream raw;
  rans::LatticeRansStream s;
  DeviceStream dev;
  DeviceOutput out;
  DecodeJob job;
};

// The variant lists above pass silently through the general kernel if the plan never takes the lean one: pin which
// kernel each committed vector gets (prob_bits 11 -> lean; bf16 with cols % 8 == 0 and cols >= 256 -> its bf16 store;
// 8 bpp, prob_bits 12 -> the general kernel with two-level tables), and what each override forces.
TEST(GpuLean, PlanTakesTheLeanKernelWhereItApplies) {
  SKIP_WITHOUT_GPU();
  for (const testing::VectorPlan& c : testing::committed_vector_plans()) {
    const VectorJob v(c.name, c.format);
    testing::expect_vector_plan(v.job, c);
  }
}

// The bf16 store multiplies by scale * 2^-11 and has no clamp: a row scale below 2^-115 (subnormal product factor)
// or one large enough that a value can reach the bf16 clamp must send the plan to the lean loop's general store, and
// every case must stay bit-exact.
TEST(GpuLean, TinyHugeAndSpecialRowScalesStayBitExact) {
  SKIP_WITHOUT_GPU();
  RawStream raw = load("gauss_29x520_4bpp");
  rans::LatticeRansStream s = raw.view();
  const std::vector<float> original(s.scales.begin(), s.scales.end());
  enum class Case { kEdge, kTiny, kHuge };
  for (const Case c : {Case::kEdge, Case::kTiny, Case::kHuge}) {
    // Row scales are finite and positive (the CPU decoder refuses others).
    std::vector<float> scales = original;
    scales[0] = 0x1p-115f;  // the smallest the bf16 store takes: products near and below the normal range
    scales[2] = 1.0f;
    scales[3] = 1.0e30f;  // large, but no value reaches the bf16 limit
    if (c == Case::kTiny) {
      scales[4] = 0x1p-120f;
      scales[5] = 1.0e-44f;  // subnormal
    }
    if (c == Case::kHuge) scales[1] = 3.0e38f;  // large products: the bf16 clamp path
    s.scales = scales;
    DeviceStream dev(s);
    const HostResult want = reference(s, OutputFormat::kBf16, 0, 0);
    DeviceOutput out(want.values.size(), s.rows);
    DecodeJob job{"scales", &s, dev.buffers(), 0, 0, OutputFormat::kBf16, out.values.get(), nullptr};
    auto plan = DecodePlan::create({&job, 1});
    ASSERT_TRUE(plan) << plan.error().to_string();
    EXPECT_EQ(plan->lean_pb(), 11);
    EXPECT_EQ(plan->lean_bf16(), c == Case::kEdge);
    ASSERT_TRUE(run({&job, 1}));
    EXPECT_EQ(first_difference(out.fetch().values, want.values), want.values.size()) << "case " << int(c);
    // The general kernel's store (its clamp where the huge scale needs it) on the same scales.
    DeviceOutput general_out(want.values.size(), s.rows);
    job.out_dev = general_out.values.get();
    ASSERT_TRUE(run({&job, 1}, general_loop()));
    EXPECT_EQ(first_difference(general_out.fetch().values, want.values), want.values.size())
        << "general, case " << int(c);
  }
}

TEST(GpuRowRange, EachRangeMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"gauss_29x520_8bpp", "gauss_29x520_4bpp", "gauss_13x100_4bpp"}) {
    RawStream raw = load(name);
    const rans::LatticeRansStream s = raw.view();
    DeviceStream dev(s);
    const std::pair<std::uint32_t, std::uint32_t> ranges[] = {{0, 1}, {5, 12}, {s.rows - 1, s.rows}, {3, s.rows}};
    for (auto [b, e] : ranges) {
      const HostResult want = reference(s, OutputFormat::kBf16, b, e);
      for (const PlanOverrides& variant : kDefaultGeneralWide) {
        DeviceOutput out(want.values.size(), e - b);
        DecodeJob job{name, &s, dev.buffers(), b, e, OutputFormat::kBf16, out.values.get(), nullptr};
        ASSERT_TRUE(run({&job, 1}, variant));
        EXPECT_EQ(first_difference(out.fetch().values, want.values), want.values.size())
            << name << " rows [" << b << ", " << e << ") " << describe(variant);
      }
    }
  }
}

// Several jobs per committed vector in one launch, with different formats and row ranges; `keep` picks the vectors.
// With every vector the batch mixes prob_bits 11 and 12 (the general kernel, two-level tables); with the prob_bits 11
// ones only, the default plan takes the lean kernel for the whole batch.
void expect_batch_matches(const std::function<bool(const rans::LatticeRansStream&)>& keep, int default_lean_pb) {
  std::vector<RawStream> raws;
  std::vector<std::string> names;
  for (const std::string& n : testing::cuda_vector_names()) {
    RawStream r = load(n);
    if (!keep(r.view())) continue;
    raws.push_back(std::move(r));
    names.push_back(n);
  }
  ASSERT_GE(raws.size(), 2u);
  std::vector<rans::LatticeRansStream> views;
  for (const RawStream& r : raws) views.push_back(r.view());
  std::vector<std::unique_ptr<DeviceStream>> devs;
  std::vector<std::unique_ptr<DeviceOutput>> outs;
  std::vector<HostResult> wants;
  std::vector<DecodeJob> jobs;
  std::mt19937 rng(7);
  for (std::size_t i = 0; i < views.size(); ++i) {
    for (int copy = 0; copy < 3; ++copy) {  // several jobs per stream, with different formats and ranges
      const auto format = static_cast<OutputFormat>((i + copy) % kOutputFormats);
      const std::uint32_t b = copy == 0 ? 0 : rng() % views[i].rows;
      const std::uint32_t e = copy == 0 ? views[i].rows : b + 1 + rng() % (views[i].rows - b);
      devs.push_back(std::make_unique<DeviceStream>(views[i]));
      wants.push_back(reference(views[i], format, b, e));
      outs.push_back(std::make_unique<DeviceOutput>(wants.back().values.size(), e - b));
      jobs.push_back({names[i] + "#" + std::to_string(copy), &views[i], devs.back()->buffers(), b, e, format,
                      outs.back()->values.get(), outs.back()->row_scales.get<float>()});
    }
  }
  auto plan = DecodePlan::create(jobs);
  ASSERT_TRUE(plan) << plan.error().to_string();
  EXPECT_EQ(plan->lean_pb(), default_lean_pb) << plan->kernel_name();
  for (const PlanOverrides& variant : kDefaultGeneralWide) {
    for (auto& out : outs) {
      EPK_CUDA_CHECK(cudaMemset(out->values.get(), 0xAB, out->values.bytes()));
      EPK_CUDA_CHECK(cudaMemset(out->row_scales.get(), 0xAB, out->row_scales.bytes()));
    }
    const Status st = run(jobs, variant);
    ASSERT_TRUE(st) << st.error().to_string();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const HostResult got = outs[j]->fetch();
      EXPECT_EQ(first_difference(got.values, wants[j].values), wants[j].values.size())
          << jobs[j].name << " " << describe(variant);
      if (is_rowwise(jobs[j].format)) {
        EXPECT_EQ(got.row_scales, wants[j].row_scales) << jobs[j].name << " " << describe(variant);
      }
    }
  }
}

TEST(GpuBatch, ManyTensorsInOneLaunchMatchTheirReferences) {
  SKIP_WITHOUT_GPU();
  expect_batch_matches([](const rans::LatticeRansStream&) { return true; }, 0);
}

TEST(GpuBatch, PlanOfProbBits11TensorsTakesTheLeanKernelAndMatches) {
  SKIP_WITHOUT_GPU();
  expect_batch_matches([](const rans::LatticeRansStream& s) { return s.prob_bits == 11; }, 11);
}

TEST(GpuCorruption, AFlippedWordIsReportedWithTensorAndTileAndOthersStayCorrect) {
  SKIP_WITHOUT_GPU();
  RawStream good = load("gauss_29x520_4bpp");
  RawStream broken = load("gauss_29x520_8bpp");
  const std::uint32_t tile = 3;
  broken.payload[(broken.offsets[tile] + broken.offsets[tile + 1]) / 2] ^= 0x1234;
  const rans::LatticeRansStream gs = good.view(), bs = broken.view();
  DeviceStream gd(gs), bd(bs);
  const HostResult want = reference(gs, OutputFormat::kBf16, 0, 0);
  DeviceOutput go(want.values.size(), gs.rows), bo(std::size_t{bs.rows} * bs.cols * 2, bs.rows);
  const DecodeJob jobs[] = {
      {"good", &gs, gd.buffers(), 0, 0, OutputFormat::kBf16, go.values.get(), nullptr},
      {"model.layers.0.mlp.up_proj", &bs, bd.buffers(), 0, 0, OutputFormat::kBf16, bo.values.get(), nullptr},
  };
  for (const PlanOverrides& variant : kVariants) {
    auto plan = DecodePlan::create(jobs, {}, variant);
    ASSERT_TRUE(plan);
    DeviceBuffer scratch(plan->scratch_bytes());
    ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
    ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
    const Status st = read_status(*plan, scratch.get(), nullptr);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kCorruptTile);
    EXPECT_NE(st.error().message.find("model.layers.0.mlp.up_proj"), std::string::npos) << st.error().message;
    EXPECT_NE(st.error().message.find("tile 3 "), std::string::npos) << st.error().message;
    auto faults = read_tile_faults(*plan, scratch.get(), nullptr);
    ASSERT_TRUE(faults);
    ASSERT_EQ(faults->size(), 1u);
    EXPECT_EQ((*faults)[0].tensor, 1u);
    EXPECT_EQ((*faults)[0].tile, tile);
    EXPECT_EQ(first_difference(go.fetch().values, want.values), want.values.size());
  }
}

TEST(GpuCorruption, TruncatedTileIsReported) {
  SKIP_WITHOUT_GPU();
  RawStream raw = load("gauss_29x520_8bpp");
  // Move tile 1's start forward: its stream now lacks words (tile 0 gains them and ends up not drained).
  raw.offsets[1] += 3;
  const rans::LatticeRansStream s = raw.view();
  DeviceStream dev(s);
  DeviceOutput out(std::size_t{s.rows} * s.cols * 2, s.rows);
  DecodeJob job{"w", &s, dev.buffers(), 0, 0, OutputFormat::kBf16, out.values.get(), nullptr};
  auto plan = DecodePlan::create({&job, 1});
  ASSERT_TRUE(plan);
  DeviceBuffer scratch(plan->scratch_bytes());
  ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
  ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
  auto faults = read_tile_faults(*plan, scratch.get(), nullptr);
  ASSERT_TRUE(faults);
  ASSERT_EQ(faults->size(), 2u);
  EXPECT_EQ((*faults)[0].tile, 0u);
  EXPECT_EQ((*faults)[1].tile, 1u);
  std::vector<rans::TileFaultRecord> ref_faults;
  testing::cpu_oracle(s, OutputFormat::kBf16, 0, 0, &ref_faults);
  ASSERT_EQ(ref_faults.size(), 2u);
  // The same tiles, for the same reason.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ref_faults[i].tile, (*faults)[i].tile);
    EXPECT_EQ((*faults)[i].fault, ref_faults[i].fault)
        << "tile " << i << ": " << rans::tile_fault_name((*faults)[i].fault) << " vs "
        << rans::tile_fault_name(ref_faults[i].fault);
  }
}

// The same corruptions through the lean loop (prob_bits 11; the two tests above use 8 bpp streams, which it does not
// take), one warp per block and one block of two warps: a flipped word, a tile whose position runs below its start
// (the refill must then load nothing outside the tile: run under memcheck), and offsets corrupted in device memory
// after the plan checked them (every warp must still join its block's barrier).
TEST(GpuLean, CorruptTilesAreReportedLikeTheCpuDecoder) {
  SKIP_WITHOUT_GPU();
  enum class Damage { kFlippedWord, kShortFirstTile, kBadDeviceOffsets };
  for (const Damage damage : {Damage::kFlippedWord, Damage::kShortFirstTile, Damage::kBadDeviceOffsets}) {
    for (const std::uint32_t tiles_per_block : {1u, 2u}) {
      RawStream raw = load("gauss_29x520_4bpp");
      ASSERT_EQ(raw.offsets.size(), 3u);  // two tiles
      if (damage == Damage::kFlippedWord) raw.payload[raw.offsets[1] / 2] ^= 0x0f0f;
      if (damage == Damage::kShortFirstTile) raw.offsets[1] -= 40;  // tile 1 gains words it never reads
      const rans::LatticeRansStream s = raw.view();
      DeviceStream dev(s);
      DeviceOutput out(std::size_t{s.rows} * s.cols * 2, s.rows);
      DecodeJob job{"w", &s, dev.buffers(), 0, 0, OutputFormat::kBf16, out.values.get(), nullptr};
      PlanOverrides split;
      split.min_tiles_per_block = tiles_per_block;
      auto plan = DecodePlan::create({&job, 1}, {}, split);
      ASSERT_TRUE(plan) << plan.error().to_string();
      ASSERT_EQ(plan->lean_pb(), 11);
      ASSERT_EQ(plan->warps_per_block(), tiles_per_block);
      if (damage == Damage::kBadDeviceOffsets) {
        const std::uint32_t past_end = static_cast<std::uint32_t>(s.payload.size()) + 1;
        EPK_CUDA_CHECK(cudaMemcpy(const_cast<std::uint32_t*>(job.dev.offsets_dev) + 1, &past_end, sizeof(past_end),
                                  cudaMemcpyHostToDevice));
      }
      DeviceBuffer scratch(plan->scratch_bytes());
      ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
      ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
      auto faults = read_tile_faults(*plan, scratch.get(), nullptr);
      ASSERT_TRUE(faults);
      const std::string what = "damage " + std::to_string(int(damage)) + ", tiles per block " +
                               std::to_string(tiles_per_block);
      if (damage == Damage::kBadDeviceOffsets) {
        ASSERT_EQ(faults->size(), 2u) << what;  // tile 0 ends past the payload, tile 1 starts after its end
        for (const auto& f : *faults) EXPECT_EQ(f.fault, rans::TileFault::kBadOffsets) << what;
        continue;
      }
      std::vector<rans::TileFaultRecord> ref_faults;
      testing::cpu_oracle(s, OutputFormat::kBf16, 0, 0, &ref_faults);
      ASSERT_FALSE(ref_faults.empty()) << what;
      ASSERT_EQ(faults->size(), ref_faults.size()) << what;
      for (std::size_t i = 0; i < ref_faults.size(); ++i) {
        EXPECT_EQ((*faults)[i].tile, ref_faults[i].tile) << what;
        EXPECT_EQ((*faults)[i].fault, ref_faults[i].fault)
            << what << ", tile " << i << ": " << rans::tile_fault_name((*faults)[i].fault) << " vs "
            << rans::tile_fault_name(ref_faults[i].fault);
      }
    }
  }
}

// Plan validation: runs without a GPU (no device call happens before a bad stream is refused).
class PlanValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    raw_ = load("gauss_29x520_4bpp");
    view_ = raw_.view();
    job_.name = "blk.0.attn_q";
    job_.stream = &view_;
    testing::set_unread_device_pointers(job_);  // validation fails first
  }
  Error expect_refused(ErrorCode code) {
    auto plan = DecodePlan::create({&job_, 1});
    EXPECT_FALSE(plan);
    if (plan) return {};
    EXPECT_EQ(plan.error().code, code) << plan.error().to_string();
    EXPECT_NE(plan.error().message.find("blk.0.attn_q"), std::string::npos) << plan.error().message;
    return plan.error();
  }
  RawStream raw_;
  rans::LatticeRansStream view_;
  DecodeJob job_;
};

TEST_F(PlanValidation, DecreasingOffsetsAreRefused) {
  std::swap(raw_.offsets[1], raw_.offsets[2]);
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("offsets"), std::string::npos);
}

TEST_F(PlanValidation, OffsetsPastThePayloadAreRefused) {
  view_.payload = view_.payload.first(view_.payload.size() - 1);
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("payload"), std::string::npos);
}

TEST_F(PlanValidation, MissingStatesAreRefused) {
  view_.states = view_.states.first(view_.states.size() - 1);
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("states"), std::string::npos);
}

TEST_F(PlanValidation, FrequenciesThatDoNotSumToTheTableSizeAreRefused) {
  raw_.freq_tables[raw_.tables[3].freq_offset] += 1;
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("stream_meta[3]"), std::string::npos);
}

TEST_F(PlanValidation, TableRunningPastFreqTablesIsRefused) {
  raw_.tables[16].alphabet = 1000;
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("stream_meta[16]"), std::string::npos);
}

TEST_F(PlanValidation, BadProbBitsAreRefused) {
  view_.prob_bits = 17;
  EXPECT_NE(expect_refused(ErrorCode::kBadInput).message.find("prob_bits"), std::string::npos);
}

TEST_F(PlanValidation, RowRangeOutsideTheTensorIsRefused) {
  job_.row_begin = 10;
  job_.row_end = 30;
  expect_refused(ErrorCode::kInvalidArgument);
}

TEST_F(PlanValidation, UnalignedPayloadIsRefused) {
  job_.dev.payload_dev = reinterpret_cast<const std::uint16_t*>(std::uintptr_t{0x1002});
  expect_refused(ErrorCode::kInvalidArgument);
}

TEST_F(PlanValidation, Int8RowwiseWithoutRowScalesIsRefused) {
  job_.format = OutputFormat::kInt8Rowwise;
  expect_refused(ErrorCode::kInvalidArgument);
}

TEST_F(PlanValidation, Fp8RowwiseWithoutRowScalesIsRefused) {
  job_.format = OutputFormat::kFp8E4M3Rowwise;
  EXPECT_NE(expect_refused(ErrorCode::kInvalidArgument).message.find("fp8_e4m3_rowwise"), std::string::npos);
}

TEST_F(PlanValidation, UnknownFormatIsRefused) {
  job_.format = static_cast<OutputFormat>(kOutputFormats);
  expect_refused(ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace epk::cuda
