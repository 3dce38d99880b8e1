// The GPU decoder's planner (codec/cuda/decode/decode_plan.cc) on the host, against a device of the test's own (the H200's
// 132 SMs and 227 KiB of shared memory per block) instead of the CUDA runtime: which kernel and table placement each
// stream and batch gets, what the overrides force and refuse, and the work split. No GPU and no nvcc needed, so CI
// checks the kernel choice; the GPU tests (decode_test.cc, oracle_test.cc) check the same choices on the device and
// the outputs of each kernel bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/decode_launch.h"
#include "codec/cuda/decode/plan_overrides.h"
#include "codec/rate/encode.h"
#include "tests/codec/cuda/plan_cases.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace detail {

// The test's device. A kernel is resident where its block's dynamic shared memory fits (the decode kernels have no
// static shared memory) and it has at most 32 warps.
constexpr std::size_t kSharedPerBlock = 232448;
Result<DeviceLimits> query_limits(int) { return DeviceLimits{132, kSharedPerBlock, 233472}; }
Result<int> blocks_per_sm(const KernelChoice& kernel, std::size_t dynamic_shared) {
  return dynamic_shared <= kSharedPerBlock && kernel.warps >= 1 && kernel.warps <= kMaxWarpsPerBlock ? 1 : 0;
}

}  // namespace detail
namespace {

using detail::PlanOverrides;
using testing::general_loop;

// Never dereferenced: planning reads only the host view of the stream.
DecodeJob job_for(const rans::LatticeRansStream& s, OutputFormat format, const std::string& name = "t") {
  DecodeJob job;
  job.name = name;
  job.stream = &s;
  testing::set_unread_device_pointers(job);
  job.row_scales_dev = reinterpret_cast<float*>(std::uintptr_t{0x6000});
  job.format = format;
  return job;
}

rans::EncodedTensor encode_random(std::uint32_t rows, std::uint32_t cols, double bpp, std::uint32_t seed,
                                  int prob_bits) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> heavy(4.0f);
  std::vector<float> w(std::size_t{rows} * cols);
  for (float& v : w) v = 0.02f * heavy(rng);
  rate::EncodeOptions options;
  options.target_bpp = bpp;
  options.prob_bits = prob_bits;
  auto enc = rate::encode(std::as_bytes(std::span(w)), rows, cols, DType::kF32, options, "random");
  EXPECT_TRUE(enc) << enc.error().to_string();
  return enc ? std::move(*enc) : rans::EncodedTensor{};
}

TEST(DecodePlanChoice, EveryProbBitsTheEncoderWritesGetsItsPlacement) {
  std::uint32_t seed = 151;
  for (const testing::ProbBitsPlan& c : testing::kProbBitsPlans) {
    const rans::EncodedTensor enc = encode_random(43, 264, 3.0, seed++, c.prob_bits);
    const rans::LatticeRansStream s = enc.view();
    ASSERT_EQ(s.prob_bits, static_cast<std::uint32_t>(c.prob_bits));
    const DecodeJob job = job_for(s, OutputFormat::kBf16);
    auto plan = DecodePlan::create({&job, 1});
    ASSERT_TRUE(plan) << plan.error().to_string();
    EXPECT_EQ(plan->lut_mode(), c.lut_mode) << "prob_bits " << c.prob_bits << ": " << plan->kernel_name();
    EXPECT_EQ(plan->lean_pb(), c.lean_pb) << "prob_bits " << c.prob_bits << ": " << plan->kernel_name();
  }
}

TEST(DecodePlanChoice, ABatchTakesTheKernelThatServesEveryTensor) {
  std::uint32_t seed = 171;
  for (const testing::MixedBatch& batch : testing::mixed_prob_bits_batches()) {
    std::vector<rans::EncodedTensor> encs;
    for (const int pb : batch.prob_bits) {
      encs.push_back(encode_random(29 + static_cast<std::uint32_t>(pb), 1000, 4.0, seed++, pb));
    }
    std::vector<rans::LatticeRansStream> views;
    for (const auto& e : encs) views.push_back(e.view());
    std::vector<DecodeJob> jobs;
    for (const auto& s : views) jobs.push_back(job_for(s, OutputFormat::kFp16));
    auto plan = DecodePlan::create(jobs);
    ASSERT_TRUE(plan) << plan.error().to_string();
    const std::string what = "prob_bits " + std::to_string(batch.prob_bits[0]) + " and " +
                             std::to_string(batch.prob_bits[1]) + ": " + plan->kernel_name();
    EXPECT_EQ(plan->lut_mode(), batch.lut_mode) << what;
    EXPECT_EQ(plan->lean_pb(), batch.lean_pb) << what;
  }
}

// The committed reference-package vectors: the lean kernel at prob_bits 11 (its bf16 store only for bf16 rows of at
// least 32 vectors), two-level tables at 8 bpp; the general kernel keeps the placement; the two-level and global
// placements can be forced on any of them, packed tables not on prob_bits 12 (256 KiB).
TEST(DecodePlanChoice, CommittedVectorsGetTheLeanKernelAtProbBits11AndOverridesForceTheRest) {
  for (const testing::VectorPlan& c : testing::committed_vector_plans()) {
    auto raw = testing::read_raw_stream(testing::cuda_data_dir() + "/" + c.name + ".epkraw");
    ASSERT_TRUE(raw) << raw.error().to_string();
    const rans::LatticeRansStream s = raw->view();
    testing::expect_vector_plan(job_for(s, c.format), c);
  }
}

// The bf16 store steps its placement across at most one row per group and multiplies by scale * 2^-11: the plan
// gives it rows of at least 32 vectors and row scales of 0, NaN or at least 2^-115 only, and nothing that can reach
// the bf16 clamp.
TEST(DecodePlanChoice, LeanBf16StoreOnlyWhereItIsExact) {
  std::uint32_t seed = 71;
  for (const auto& [cols, bf16_store] : {std::pair{200u, false}, {256u, true}, {264u, true}}) {
    const rans::EncodedTensor enc = encode_random(45, cols, 4.0, seed++, 0);
    rans::LatticeRansStream s = enc.view();
    const DecodeJob job = job_for(s, OutputFormat::kBf16);
    auto plan = DecodePlan::create({&job, 1});
    ASSERT_TRUE(plan) << plan.error().to_string();
    EXPECT_EQ(plan->lean_pb(), 11) << cols;
    EXPECT_EQ(plan->lean_bf16(), bf16_store) << cols;
    if (!bf16_store) continue;
    std::vector<float> scales(s.scales.begin(), s.scales.end());
    s.scales = scales;
    for (const float edge : {0x1p-115f, 0x1p-116f, 3.0e38f}) {
      scales[1] = edge;
      auto p = DecodePlan::create({&job, 1});
      ASSERT_TRUE(p) << p.error().to_string();
      EXPECT_EQ(p->lean_pb(), 11) << edge;
      EXPECT_EQ(p->lean_bf16(), edge == 0x1p-115f) << edge;
    }
  }
}

// 64x2048 Gaussian weights at 8 bpp, prob_bits 12 (37 tiles), with eight spikes a row of up to 8 * spike sigma:
// the larger the spikes, the wider the alphabets, so the larger the two-level tables.
rans::EncodedTensor encode_spiked(float spike) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.02f);
  const std::uint32_t rows = 64, cols = 2048;
  std::vector<float> w(std::size_t{rows} * cols);
  for (float& v : w) v = g(rng);
  for (std::uint32_t r = 0; r < rows; ++r) {
    for (std::uint32_t k = 0; k < 8; ++k) {
      w[r * cols + (r * 131 + k * 257) % cols] = spike * 0.02f * float(k + 1) * (k % 2 ? 1.0f : -1.0f);
    }
  }
  rate::EncodeOptions options;
  options.target_bpp = 8.0;
  options.prob_bits = 12;
  auto enc = rate::encode(std::as_bytes(std::span(w)), rows, cols, DType::kF32, options, "spiked");
  EXPECT_TRUE(enc) << enc.error().to_string();
  return enc ? std::move(*enc) : rans::EncodedTensor{};
}

// Two-level tables that do not fit beside every warp's word ring take fewer warps a block (more rounds), down to
// kMinTwoLevelWarps; tables too wide for that take the global placement with the usual warps. On the test's device
// (227 KiB a block), with 32 tiles a block (32 warps, one round), two-level tables fit up to ~8,100 symbols, and up
// to ~16,300 at 16 warps (two rounds).
TEST(DecodePlanChoice, TwoLevelTablesTakeFewerWarpsBeforeTheGlobalOnes) {
  struct Case {
    float spike;
    std::uint32_t min_symbols, max_symbols;  // the window the case is meant for (tables 1..16)
    int lut_mode;
    std::uint32_t warps;
  };
  ASSERT_EQ(detail::kMinTwoLevelWarps, 16u);
  for (const Case& c : {Case{0.0f, 0, 8000, detail::kTwoLevelShared, 32},
                        Case{4.0f, 8300, 16000, detail::kTwoLevelShared, 16},
                        Case{8.0f, 16600, 65534, detail::kWideGlobal, 32}}) {
    const rans::EncodedTensor enc = encode_spiked(c.spike);
    const rans::LatticeRansStream s = enc.view();
    std::uint32_t symbols = 0;
    for (std::size_t t = 1; t < s.tables.size(); ++t) symbols += static_cast<std::uint32_t>(s.tables[t].alphabet);
    ASSERT_GE(symbols, c.min_symbols) << c.spike;
    ASSERT_LE(symbols, c.max_symbols) << c.spike;
    ASSERT_EQ(s.offsets.size(), 38u);
    const DecodeJob job = job_for(s, OutputFormat::kBf16);
    PlanOverrides full_blocks;
    full_blocks.min_tiles_per_block = 32;
    auto plan = DecodePlan::create({&job, 1}, {}, full_blocks);
    ASSERT_TRUE(plan) << plan.error().to_string();
    EXPECT_EQ(plan->lut_mode(), c.lut_mode) << c.spike << ": " << plan->kernel_name();
    EXPECT_EQ(plan->warps_per_block(), c.warps) << c.spike;
    EXPECT_EQ(plan->blocks(), 2u);
    if (c.lut_mode == detail::kTwoLevelShared && c.warps < 32) {
      // At 32 warps the two-level placement does not fit: forcing it there is refused.
      PlanOverrides forced = full_blocks;
      forced.lut_mode = detail::kTwoLevelShared;
      EXPECT_FALSE(DecodePlan::create({&job, 1}, {}, forced)) << c.spike;
    }
  }
}

// The work split the GPU tests rely on: tiles per block at least min_tiles_per_block, warps per block dividing them
// into whole rounds of at most max_warps_per_block.
TEST(DecodePlanChoice, WorkSplitFollowsTheOverrides) {
  const rans::EncodedTensor enc = encode_random(301, 1024, 4.0, 131, 0);  // 22 tiles
  const rans::LatticeRansStream s = enc.view();
  ASSERT_EQ(s.offsets.size(), 23u);
  const DecodeJob job = job_for(s, OutputFormat::kBf16);
  struct Split {
    std::uint32_t min_tiles, max_warps, warps;
    std::size_t blocks;
  };
  for (const Split& split : {Split{1, 32, 1, 22}, Split{7, 32, 7, 4}, Split{21, 32, 21, 2}, Split{7, 3, 3, 4}}) {
    for (const PlanOverrides& kernel : {PlanOverrides{}, general_loop(), general_loop(detail::kWideGlobal)}) {
      PlanOverrides o = kernel;
      o.min_tiles_per_block = split.min_tiles;
      o.max_warps_per_block = split.max_warps;
      auto plan = DecodePlan::create({&job, 1}, {}, o);
      ASSERT_TRUE(plan) << plan.error().to_string();
      EXPECT_EQ(plan->warps_per_block(), split.warps) << split.min_tiles << "/" << split.max_warps;
      EXPECT_EQ(plan->blocks(), split.blocks) << split.min_tiles << "/" << split.max_warps;
      EXPECT_EQ(plan->tiles(), 22u);
    }
  }
}

}  // namespace
}  // namespace epk::cuda
