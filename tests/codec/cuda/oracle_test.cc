// The project's CPU decoder (codec/rans/decoder.h, the oracle) against the reference package's outputs on the committed
// vectors (runs everywhere), and the GPU decoder against the oracle bit for bit in every output format (dense and
// rowwise) and row range, on streams the project's encoder makes from seeded random weights of odd shapes at 2 to 8
// bpp (GPU, skipped without one).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codec/cuda/decode.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"
#include "tests/codec/cuda/cpu_oracle.h"
#include "tests/codec/cuda/device_buffer.h"
#include "tests/codec/cuda/device_stream.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace {

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

rans::EncodedTensor encode_random(const Shape& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> heavy(4.0f);
  std::vector<float> w(std::size_t{shape.rows} * shape.cols);
  for (float& v : w) v = 0.02f * heavy(rng);
  rate::EncodeOptions options;
  options.target_bpp = shape.bpp;
  auto enc = rate::encode(std::as_bytes(std::span(w)), shape.rows, shape.cols, DType::kF32, options, "random");
  EXPECT_TRUE(enc) << enc.error().to_string();
  return enc ? std::move(*enc) : rans::EncodedTensor{};
}

constexpr Shape kShapes[] = {{37, 520, 2.0}, {64, 1000, 4.0}, {19, 2056, 8.0}, {301, 96, 3.0}, {5, 4100, 6.5}};

// Decodes rows [r0, r1) of `s` in `format` with `options` into buffers filled with 0xAB and compares values and, for
// rowwise formats, row scales with the CPU oracle bit for bit. `what` names the case from its plan (in every
// failure message); `check_plan` may add expectations on the plan before it runs.
void expect_plan_matches_oracle(const rans::LatticeRansStream& s, const testing::DeviceStream& dev, OutputFormat format,
                                std::uint32_t r0, std::uint32_t r1, const DecodeOptions& options,
                                const std::function<std::string(const DecodePlan&)>& what,
                                const std::function<void(const DecodePlan&, const std::string&)>& check_plan = {}) {
  const testing::HostResult want = cpu_oracle(s, format, r0, r1);
  testing::DeviceBuffer out(want.values.size());
  testing::DeviceBuffer row_scales((r1 - r0) * sizeof(float));
  EPK_CUDA_CHECK(cudaMemset(out.get(), 0xAB, want.values.size()));
  EPK_CUDA_CHECK(cudaMemset(row_scales.get(), 0xAB, row_scales.bytes()));
  DecodeJob job{"random", &s, dev.buffers(), r0, r1, format, out.get(), row_scales.get<float>()};
  auto plan = DecodePlan::create({&job, 1}, options);
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
    const rans::LatticeRansStream& s, const testing::DeviceStream& dev, const DecodeOptions& options,
    const std::function<std::string(const DecodePlan&)>& what,
    const std::function<void(const DecodePlan&, const std::string&, bool whole)>& check) {
  const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 37}, {s.rows - 1, s.rows}};
  for (const auto& r : ranges) {
    const bool whole = r[0] == 0 && r[1] == s.rows;
    for (int fi = 0; fi < kOutputFormats; ++fi) {
      expect_plan_matches_oracle(s, dev, static_cast<OutputFormat>(fi), r[0], r[1], options, what,
                                 [&](const DecodePlan& plan, const std::string& name) { check(plan, name, whole); });
    }
  }
}

TEST(GpuOracle, FreshlyEncodedStreamsDecodeBitExactInEveryFormatRowRangeAndLoop) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& shapes = kShapes;
  std::uint32_t seed = 11;
  for (const Shape& shape : shapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 2}, {s.rows - 1, s.rows}};
    // The default (the lean loop where it applies), the fast group loop, the run-2 loop and the warp-specialised one.
    DecodeOptions fast_loop;
    fast_loop.lean = false;
    DecodeOptions run2_loop = fast_loop;
    run2_loop.fast_groups = 0;
    DecodeOptions ws_loop;
    ws_loop.warp_specialised = true;
    const DecodeOptions loops[] = {DecodeOptions{}, fast_loop, run2_loop, ws_loop};
    for (const auto& r : ranges) {
      for (int k = 0; k < 4 * kOutputFormats; ++k) {
        const auto format = static_cast<OutputFormat>(k % kOutputFormats);
        const DecodeOptions options = loops[k / kOutputFormats];
        expect_plan_matches_oracle(s, dev, format, r[0], r[1], options, [&](const DecodePlan& plan) {
          return std::to_string(shape.bpp) + " bpp, fast_groups " + std::to_string(options.fast_groups) + " lean " +
                 std::to_string(plan.lean_pb()) + (plan.lean_bf16() ? " bf16" : "") + " ws " +
                 std::to_string(plan.ws_recon_warps());
        });
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

// The lean kernel with many warps per block: each warp starts its first tile while the block's tables arrive and
// joins the block's barrier from inside it; warps without a tile join from the kernel (22 tiles at 21 per block
// leave 20 idle warps in the second block); later tiles come from the block's counter (3 warps for 7 tiles per
// block); 30 warps take the 64-register form. Every format and three row ranges.
TEST(GpuOracle, LeanKernelIsBitExactWithManyWarpsPerBlock) {
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
  std::uint32_t seed = 131;
  for (const Case& c : cases) {
    const rans::EncodedTensor enc = encode_random(c.shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    for (const Split& split : c.splits) {
      DecodeOptions options;
      options.min_tiles_per_block = split.min_tiles;
      options.max_warps_per_block = split.max_warps;
      expect_every_format_and_range(
          s, dev, options,
          [&](const DecodePlan& plan) {
            return std::to_string(c.shape.bpp) + " bpp, " + std::to_string(plan.warps_per_block()) +
                   " warps per block" + (plan.lean_bf16() ? ", bf16 store" : "");
          },
          [&](const DecodePlan& plan, const std::string& what, bool whole) {
            EXPECT_EQ(plan.lean_pb(), 11) << what;
            if (whole) {
              EXPECT_EQ(plan.warps_per_block(), split.warps) << what;
            }
          });
    }
  }
}

// The warp-specialised lean kernel on tensors of tens of tiles, so that blocks hold many decode warps: as the plan
// splits them (one tile per block), 7 tiles per block with 3 reconstruction warps (each serving up to 3 decode
// warps), and 21 tiles per block (21 decode + 11 reconstruction warps, the 10240x3840 layout, where some decode warps
// get no tile). Every format, three row ranges, cols a multiple of 8 (bf16 store) and not (general store).
TEST(GpuOracle, WarpSpecialisedKernelIsBitExactWithManyWarpsPerBlock) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr Shape kWsShapes[] = {{301, 1024, 4.0}, {611, 1004, 2.0}};  // 22 tiles each
  struct Split {
    std::uint32_t min_tiles, max_recon, decode_warps, recon_warps;
  };
  constexpr Split kSplits[] = {{1, 0, 1, 1}, {7, 3, 7, 3}, {21, 0, 21, 11}};
  std::uint32_t seed = 101;
  for (const Shape& shape : kWsShapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    for (const Split& split : kSplits) {
      DecodeOptions options;
      options.warp_specialised = true;
      options.min_tiles_per_block = split.min_tiles;
      options.ws_max_recon_warps = split.max_recon;
      expect_every_format_and_range(
          s, dev, options,
          [&](const DecodePlan& plan) {
            return std::to_string(shape.bpp) + " bpp, " + std::to_string(plan.warps_per_block()) + " decode + " +
                   std::to_string(plan.ws_recon_warps()) + " reconstruction warps" +
                   (plan.lean_bf16() ? ", bf16 store" : "");
          },
          [&](const DecodePlan& plan, const std::string& what, bool whole) {
            // Tiles within the row range decide the split; the full range must get the one asked for.
            if (whole) {
              EXPECT_EQ(plan.warps_per_block(), split.decode_warps) << what;
              EXPECT_EQ(plan.ws_recon_warps(), split.recon_warps) << what;
            }
            EXPECT_NE(plan.ws_recon_warps(), 0u) << what;
          });
    }
  }
}

}  // namespace
}  // namespace epk::cuda
