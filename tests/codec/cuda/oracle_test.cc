// The project's CPU decoder (codec/rans/decoder.h, the oracle) against the reference package's outputs on the committed
// vectors (runs everywhere), and the GPU decoder's kernels against the oracle bit for bit in every output format
// (dense and rowwise) and row range, on streams the project's encoder makes from seeded random weights of odd shapes
// at 2 to 8 bpp and at every prob_bits it can write (GPU, skipped without one).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/plan_overrides.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"
#include "tests/codec/cuda/cpu_oracle.h"
#include "tests/codec/cuda/device_buffer.h"
#include "tests/codec/cuda/device_stream.h"
#include "tests/codec/cuda/plan_cases.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace {

using detail::PlanOverrides;
using testing::general_loop;
using testing::cpu_oracle;

class OracleVectors : public ::testing::TestWithParam<std::string> {};

// The committed vectors carry the reference package's own decode in the dense formats: the oracle must reproduce it.
TEST_P(OracleVectors, OracleMatchesTheReferencePackageOutputs) {
  auto raw = testing::read_raw_stream(testing::cuda_data_dir() + "/" + GetParam() + ".epkraw");
  ASSERT_TRUE(raw) << raw.error().to_string();
  ASSERT_FALSE(raw->outputs.empty());
  const rans::LatticeRansStream s = raw->view();
  for (const auto& [fmt, expected] : raw->outputs) {
    const auto format = static_cast<OutputFormat>(fmt);
    ASSERT_FALSE(is_rowwise(format));
    EXPECT_EQ(cpu_oracle(s, format, 0, s.rows).values, expected) << output_format_name(format);
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, OracleVectors, ::testing::ValuesIn(testing::cuda_vector_names()));

struct Shape {
  std::uint32_t rows, cols;
  double bpp;
};

rans::EncodedTensor encode_random(const Shape& shape, std::uint32_t seed, int prob_bits = 0) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> heavy(4.0f);
  std::vector<float> w(std::size_t{shape.rows} * shape.cols);
  for (float& v : w) v = 0.02f * heavy(rng);
  rate::EncodeOptions options;
  options.target_bpp = shape.bpp;
  options.prob_bits = prob_bits;
  auto enc = rate::encode(std::as_bytes(std::span(w)), shape.rows, shape.cols, DType::kF32, options, "random");
  EXPECT_TRUE(enc) << enc.error().to_string();
  return enc ? std::move(*enc) : rans::EncodedTensor{};
}

constexpr Shape kShapes[] = {{37, 520, 2.0}, {64, 1000, 4.0}, {19, 2056, 8.0}, {301, 96, 3.0}, {5, 4100, 6.5}};

// Decodes rows [r0, r1) of `s` in `format`, with the plan choices `overrides` force, into buffers filled with 0xAB
// and compares values and, for rowwise formats, row scales with the CPU oracle bit for bit. `what` names the case
// from its plan (in every failure message); `check_plan` may add expectations on the plan before it runs.
void expect_plan_matches_oracle(const rans::LatticeRansStream& s, const testing::DeviceStream& dev, OutputFormat format,
                                std::uint32_t r0, std::uint32_t r1, const PlanOverrides& overrides,
                                const std::function<std::string(const DecodePlan&)>& what,
                                const std::function<void(const DecodePlan&, const std::string&)>& check_plan = {}) {
  const testing::HostResult want = cpu_oracle(s, format, r0, r1);
  testing::DeviceBuffer out(want.values.size());
  testing::DeviceBuffer row_scales((r1 - r0) * sizeof(float));
  EPK_CUDA_CHECK(cudaMemset(out.get(), 0xAB, want.values.size()));
  EPK_CUDA_CHECK(cudaMemset(row_scales.get(), 0xAB, row_scales.bytes()));
  DecodeJob job{"random", &s, dev.buffers(), r0, r1, format, out.get(), row_scales.get<float>()};
  auto plan = DecodePlan::create({&job, 1}, {}, overrides);
  ASSERT_TRUE(plan) << plan.error().to_string();
  const std::string name = std::to_string(s.rows) + "x" + std::to_string(s.cols) + ", " +
                           std::string(output_format_name(format)) + ", rows [" + std::to_string(r0) + ", " +
                           std::to_string(r1) + "), " + what(*plan);
  if (check_plan) check_plan(*plan, name);
  testing::DeviceBuffer scratch(plan->scratch_bytes());
  ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
  ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
  const Status st = read_status(*plan, scratch.get(), nullptr);
  ASSERT_TRUE(st) << st.error().to_string();
  std::vector<std::uint8_t> got(want.values.size());
  EPK_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want.values) << name;
  if (is_rowwise(format)) {
    std::vector<float> got_scales(r1 - r0);
    EPK_CUDA_CHECK(cudaMemcpy(got_scales.data(), row_scales.get(), row_scales.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_scales, want.row_scales) << name;
  }
}

// expect_plan_matches_oracle for every output format over the whole tensor, a 37-row range and the last row; `check`
// learns whether the range is the whole tensor.
void expect_every_format_and_range(
    const rans::LatticeRansStream& s, const testing::DeviceStream& dev, const PlanOverrides& overrides,
    const std::function<std::string(const DecodePlan&)>& what,
    const std::function<void(const DecodePlan&, const std::string&, bool whole)>& check) {
  const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 37}, {s.rows - 1, s.rows}};
  for (const auto& r : ranges) {
    const bool whole = r[0] == 0 && r[1] == s.rows;
    for (int fi = 0; fi < kOutputFormats; ++fi) {
      expect_plan_matches_oracle(s, dev, static_cast<OutputFormat>(fi), r[0], r[1], overrides, what,
                                 [&](const DecodePlan& plan, const std::string& name) { check(plan, name, whole); });
    }
  }
}

TEST(GpuOracle, FreshlyEncodedStreamsDecodeBitExactInEveryFormatRowRangeAndKernel) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::uint32_t seed = 11;
  for (const Shape& shape : kShapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 2}, {s.rows - 1, s.rows}};
    // The default (the lean kernel where it applies), the general kernel in its placement and in the two that hold
    // any stream.
    const PlanOverrides kernels[] = {{}, general_loop(), general_loop(detail::kTwoLevelShared),
                                     general_loop(detail::kWideGlobal)};
    for (const auto& r : ranges) {
      for (const PlanOverrides& kernel : kernels) {
        for (int fi = 0; fi < kOutputFormats; ++fi) {
          expect_plan_matches_oracle(s, dev, static_cast<OutputFormat>(fi), r[0], r[1], kernel,
                                     [&](const DecodePlan& plan) {
                                       return std::to_string(shape.bpp) + " bpp, " + plan.kernel_name();
                                     });
        }
      }
    }
  }
}

// Every prob_bits the encoder writes (9..15) decodes with the default plan, and each gets the kernel and table
// placement meant for it: packed shared tables up to 11 (the lean kernel at 11), two-level at 12, 64-bit entries
// through L1 above (no shared region holds 16 << 13 entries). Every format, the whole tensor and a row range.
TEST(GpuOracle, EveryProbBitsTheEncoderWritesTakesItsKernelAndDecodesBitExact) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::uint32_t seed = 151;
  for (const testing::ProbBitsPlan& c : testing::kProbBitsPlans) {
    const Shape shape{43, 264, 3.0};
    const rans::EncodedTensor enc = encode_random(shape, seed++, c.prob_bits);
    const rans::LatticeRansStream s = enc.view();
    ASSERT_EQ(s.prob_bits, static_cast<std::uint32_t>(c.prob_bits));
    testing::DeviceStream dev(s);
    for (const auto& r : {std::pair{0u, s.rows}, std::pair{5u, 38u}}) {
      for (int fi = 0; fi < kOutputFormats; ++fi) {
        expect_plan_matches_oracle(
            s, dev, static_cast<OutputFormat>(fi), r.first, r.second, {},
            [&](const DecodePlan& plan) {
              return "prob_bits " + std::to_string(c.prob_bits) + ", " + plan.kernel_name();
            },
            [&](const DecodePlan& plan, const std::string& name) {
              EXPECT_EQ(plan.lut_mode(), c.lut_mode) << name;
              EXPECT_EQ(plan.lean_pb(), c.lean_pb) << name;
            });
      }
    }
  }
}

// A batch takes the one kernel that serves all of its tensors: prob_bits 10 and 11 together (either first) the
// general kernel with packed shared tables, 11 and 12 two-level tables, 11 and 13 the global tables, 11 alone the
// lean kernel. Every tensor of each batch bit-exact, in a different format each.
TEST(GpuOracle, MixedProbBitsBatchesTakeTheKernelThatServesEveryTensor) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::uint32_t seed = 171;
  for (const testing::MixedBatch& batch : testing::mixed_prob_bits_batches()) {
    std::vector<rans::EncodedTensor> encs;
    for (const int pb : batch.prob_bits) {
      encs.push_back(encode_random({29 + static_cast<std::uint32_t>(pb), 1000, 4.0}, seed++, pb));
    }
    std::vector<rans::LatticeRansStream> views;
    for (const auto& e : encs) views.push_back(e.view());
    std::vector<std::unique_ptr<testing::DeviceStream>> devs;
    std::vector<testing::DeviceBuffer> outs, row_scales;
    std::vector<testing::HostResult> wants;
    std::vector<DecodeJob> jobs;
    for (std::size_t t = 0; t < views.size(); ++t) {
      const auto format = static_cast<OutputFormat>((t * 3 + batch.prob_bits[0]) % kOutputFormats);
      const auto& s = views[t];
      devs.push_back(std::make_unique<testing::DeviceStream>(s));
      wants.push_back(cpu_oracle(s, format, 0, s.rows));
      outs.emplace_back(wants.back().values.size());
      row_scales.emplace_back(s.rows * sizeof(float));
      EPK_CUDA_CHECK(cudaMemset(outs.back().get(), 0xAB, outs.back().bytes()));
      jobs.push_back({"pb" + std::to_string(batch.prob_bits[t]) + "#" + std::to_string(t), &s, devs.back()->buffers(),
                      0, 0, format, outs.back().get(), row_scales.back().get<float>()});
    }
    auto plan = DecodePlan::create(jobs);
    ASSERT_TRUE(plan) << plan.error().to_string();
    EXPECT_EQ(plan->lut_mode(), batch.lut_mode) << plan->kernel_name();
    EXPECT_EQ(plan->lean_pb(), batch.lean_pb) << plan->kernel_name();
    testing::DeviceBuffer scratch(plan->scratch_bytes());
    ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
    ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
    const Status st = read_status(*plan, scratch.get(), nullptr);
    ASSERT_TRUE(st) << st.error().to_string();
    for (std::size_t t = 0; t < jobs.size(); ++t) {
      std::vector<std::uint8_t> got(wants[t].values.size());
      EPK_CUDA_CHECK(cudaMemcpy(got.data(), outs[t].get(), got.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, wants[t].values) << jobs[t].name << " " << output_format_name(jobs[t].format) << ", "
                                      << plan->kernel_name();
      if (is_rowwise(jobs[t].format)) {
        std::vector<float> got_scales(views[t].rows);
        EPK_CUDA_CHECK(
            cudaMemcpy(got_scales.data(), row_scales[t].get(), row_scales[t].bytes(), cudaMemcpyDeviceToHost));
        EXPECT_EQ(got_scales, wants[t].row_scales) << jobs[t].name;
      }
    }
  }
}

// The lean loop's bf16 store steps its placement across at most one row per group, so the plan gives it rows of at
// least 32 vectors only: 200 columns take the general store, 256 (a row boundary in every group) and 264 (one in
// most groups, at a different lane each time) the bf16 store. Both bit-exact, whole tensor and a row range.
TEST(GpuOracle, LeanBf16StoreOnlyWhereRowsHaveThirtyTwoVectors) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::uint32_t seed = 71;
  for (const auto& [shape, bf16_store] :
       {std::pair{Shape{45, 200, 4.0}, false}, {Shape{45, 256, 4.0}, true}, {Shape{45, 264, 2.0}, true}}) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    for (const auto& r : {std::pair{0u, s.rows}, std::pair{7u, 30u}}) {
      expect_plan_matches_oracle(
          s, dev, OutputFormat::kBf16, r.first, r.second, {}, [](const DecodePlan&) { return std::string("default"); },
          [&](const DecodePlan& plan, const std::string& name) {
            EXPECT_EQ(plan.lean_pb(), 11) << name;
            EXPECT_EQ(plan.lean_bf16(), bf16_store) << name;
          });
    }
  }
}

// Each kernel with many warps per block. The lean kernel: each warp starts its first tile while the block's tables
// arrive and joins the block's barrier from inside it; warps without a tile join from the kernel (22 tiles at 21 per
// block leave 20 idle warps in the second block). Every kernel: later tiles come from the block's counter (3 warps
// for 7 tiles per block); 30 warps take the 32-warp block shape (64 registers), the others the 24-warp one. Every
// format and three row ranges.
TEST(GpuOracle, EveryKernelIsBitExactWithManyWarpsPerBlock) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  struct Split {
    std::uint32_t min_tiles, max_warps, warps;
  };
  struct Case {
    Shape shape;
    std::vector<Split> splits;
  };
  const Case cases[] = {{{301, 1024, 4.0}, {{1, 32, 1}, {7, 32, 7}, {21, 32, 21}, {7, 3, 3}}},  // 22 tiles
                        {{611, 1004, 2.0}, {{21, 32, 21}}},                                  // 22 tiles, general store
                        {{420, 1024, 4.0}, {{30, 32, 30}}}};                                 // 30 tiles
  const PlanOverrides kernels[] = {{}, general_loop(), general_loop(detail::kTwoLevelShared),
                                   general_loop(detail::kWideGlobal)};
  std::uint32_t seed = 131;
  for (const Case& c : cases) {
    const rans::EncodedTensor enc = encode_random(c.shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    for (const Split& split : c.splits) {
      for (const PlanOverrides& kernel : kernels) {
        PlanOverrides overrides = kernel;
        overrides.min_tiles_per_block = split.min_tiles;
        overrides.max_warps_per_block = split.max_warps;
        expect_every_format_and_range(
            s, dev, overrides,
            [&](const DecodePlan& plan) {
              return std::to_string(c.shape.bpp) + " bpp, " + plan.kernel_name() + ", " +
                     std::to_string(plan.warps_per_block()) + " warps per block";
            },
            [&](const DecodePlan& plan, const std::string& what, bool whole) {
              EXPECT_EQ(plan.lean_pb(), kernel.lean ? 11 : 0) << what;
              if (whole) {
                EXPECT_EQ(plan.warps_per_block(), split.warps) << what;
              }
            });
      }
    }
  }
}

}  // namespace
}  // namespace epk::cuda
