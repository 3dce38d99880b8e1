// Which kernel and table placement the GPU decoder's planner picks, as one table shared by the host planner test
// (plan_host_test.cc, against a device of its own, in CI) and the GPU tests (decode_test.cc, oracle_test.cc, on the
// device's real limits), so the expectations cannot drift apart.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/plan_overrides.h"

namespace epk::testing {

// The general loop, optionally with a forced table placement.
inline cuda::detail::PlanOverrides general_loop(int lut_mode = -1) {
  cuda::detail::PlanOverrides o;
  o.lut_mode = lut_mode;
  o.lean = false;
  return o;
}

// Device addresses for the stream's arrays and the output that planning and plan validation never dereference (they
// read only the host view of the stream); row_scales_dev stays as it is.
inline void set_unread_device_pointers(cuda::DecodeJob& job) {
  job.dev = {reinterpret_cast<const std::uint16_t*>(std::uintptr_t{0x1000}),
             reinterpret_cast<const std::uint32_t*>(std::uintptr_t{0x2000}),
             reinterpret_cast<const std::uint32_t*>(std::uintptr_t{0x3000}),
             reinterpret_cast<const float*>(std::uintptr_t{0x4000})};
  job.out_dev = reinterpret_cast<void*>(std::uintptr_t{0x5000});
}

// Every prob_bits the encoder writes (9..15) and the placement meant for it: packed shared tables up to 11 (the lean
// kernel at 11), two-level at 12, 64-bit entries through L1 above (no shared region holds 16 << 13 entries).
struct ProbBitsPlan {
  int prob_bits;
  int lut_mode;
  int lean_pb;
};
inline constexpr ProbBitsPlan kProbBitsPlans[] = {
    {9, cuda::detail::kPackedShared, 0},    {10, cuda::detail::kPackedShared, 0}, {11, cuda::detail::kPackedShared, 11},
    {12, cuda::detail::kTwoLevelShared, 0}, {13, cuda::detail::kWideGlobal, 0},   {14, cuda::detail::kWideGlobal, 0},
    {15, cuda::detail::kWideGlobal, 0}};

// A batch takes the one kernel that serves all of its tensors: prob_bits 10 and 11 together (either first) the
// general kernel with packed shared tables, 11 and 12 two-level tables, 11 and 13 the global tables, 11 alone the
// lean kernel.
struct MixedBatch {
  std::vector<int> prob_bits;
  int lut_mode;
  int lean_pb;
};
inline const std::vector<MixedBatch>& mixed_prob_bits_batches() {
  static const std::vector<MixedBatch> batches = {{{10, 11}, cuda::detail::kPackedShared, 0},
                                                  {{11, 10}, cuda::detail::kPackedShared, 0},
                                                  {{11, 12}, cuda::detail::kTwoLevelShared, 0},
                                                  {{11, 13}, cuda::detail::kWideGlobal, 0},
                                                  {{11, 11}, cuda::detail::kPackedShared, 11}};
  return batches;
}

// The committed reference-package vectors: the lean kernel at prob_bits 11 (its bf16 store only for bf16 rows of at
// least 32 vectors), two-level tables at 8 bpp.
struct VectorPlan {
  const char* name;
  cuda::OutputFormat format;
  int lean_pb;
  bool bf16;
  int lut_mode;
};
inline const std::vector<VectorPlan>& committed_vector_plans() {
  static const std::vector<VectorPlan> cases = {
      {"gauss_29x520_4bpp", cuda::OutputFormat::kBf16, 11, true, cuda::detail::kPackedShared},
      {"gauss_29x520_4bpp", cuda::OutputFormat::kFp16, 11, false, cuda::detail::kPackedShared},
      {"gauss_29x520_2bpp", cuda::OutputFormat::kInt8Rowwise, 11, false, cuda::detail::kPackedShared},
      {"gauss_13x100_4bpp", cuda::OutputFormat::kBf16, 11, false, cuda::detail::kPackedShared},  // cols % 8
      {"gauss_bf16_31x264_4bpp", cuda::OutputFormat::kBf16, 11, true, cuda::detail::kPackedShared},
      {"studentt_16x1024_4bpp", cuda::OutputFormat::kFp8E4M3Rowwise, 11, false, cuda::detail::kPackedShared},
      {"gauss_29x520_8bpp", cuda::OutputFormat::kBf16, 0, false, cuda::detail::kTwoLevelShared},
      {"studentt_16x1024_8bpp", cuda::OutputFormat::kFp32, 0, false, cuda::detail::kTwoLevelShared}};
  return cases;
}

// `job` plans as `c` says; the general kernel keeps the placement; the two-level and global placements can be forced
// on it, packed tables not at prob_bits 12 (256 KiB of shared memory).
inline void expect_vector_plan(const cuda::DecodeJob& job, const VectorPlan& c) {
  const std::string what = std::string(c.name) + " " + std::string(cuda::output_format_name(c.format));
  auto plan = cuda::DecodePlan::create({&job, 1});
  ASSERT_TRUE(plan) << plan.error().to_string();
  EXPECT_EQ(plan->lean_pb(), c.lean_pb) << what;
  EXPECT_EQ(plan->lean_bf16(), c.bf16) << what;
  EXPECT_EQ(plan->lut_mode(), c.lut_mode) << what;
  auto general = cuda::DecodePlan::create({&job, 1}, {}, general_loop());
  ASSERT_TRUE(general) << general.error().to_string();
  EXPECT_EQ(general->lean_pb(), 0) << what;
  EXPECT_EQ(general->lut_mode(), c.lut_mode) << what;
  for (const int mode : {cuda::detail::kTwoLevelShared, cuda::detail::kWideGlobal}) {
    auto forced = cuda::DecodePlan::create({&job, 1}, {}, general_loop(mode));
    ASSERT_TRUE(forced) << forced.error().to_string();
    EXPECT_EQ(forced->lut_mode(), mode) << what;
    EXPECT_EQ(forced->lean_pb(), 0) << what;
  }
  auto packed = cuda::DecodePlan::create({&job, 1}, {}, general_loop(cuda::detail::kPackedShared));
  if (job.stream->prob_bits == 12) {
    ASSERT_FALSE(packed) << what;
    EXPECT_EQ(packed.error().code, ErrorCode::kUnsupported) << what;
  } else {
    ASSERT_TRUE(packed) << packed.error().to_string();
    EXPECT_EQ(packed->lut_mode(), cuda::detail::kPackedShared) << what;
  }
}

}  // namespace epk::testing
