// The project's CPU decoder (codec/rans/decoder.h, the oracle) against the reference package's outputs on the committed
// vectors (runs everywhere), and the GPU decoder against the oracle bit for bit in every output format (dense and
// rowwise) and row range, on streams the project's encoder makes from seeded random weights of odd shapes at 2 to 8
// bpp (GPU, skipped without one).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

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

TEST(GpuOracle, FreshlyEncodedStreamsDecodeBitExactInEveryFormatRowRangeAndLoop) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& shapes = kShapes;
  std::uint32_t seed = 11;
  for (const Shape& shape : shapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 2}, {s.rows - 1, s.rows}};
    DecodeOptions run2_loop;  // the default is the fast group loop; also check the run-2 loop
    run2_loop.fast_groups = 0;
    for (const auto& r : ranges) {
      for (int k = 0; k < 2 * kOutputFormats; ++k) {
        const auto format = static_cast<OutputFormat>(k % kOutputFormats);
        const DecodeOptions options = k < kOutputFormats ? DecodeOptions{} : run2_loop;
        const testing::HostResult want = cpu_oracle(s, format, r[0], r[1]);
        testing::DeviceBuffer out(want.values.size());
        testing::DeviceBuffer row_scales((r[1] - r[0]) * sizeof(float));
        EPK_CUDA_CHECK(cudaMemset(out.get(), 0xAB, want.values.size()));
        EPK_CUDA_CHECK(cudaMemset(row_scales.get(), 0xAB, row_scales.bytes()));
        DecodeJob job{"random", &s, dev.buffers(), r[0], r[1], format, out.get(), row_scales.get<float>()};
        auto plan = DecodePlan::create({&job, 1}, options);
        ASSERT_TRUE(plan) << plan.error().to_string();
        testing::DeviceBuffer scratch(plan->scratch_bytes());
        ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
        ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
        const Status st = read_status(*plan, scratch.get(), nullptr);
        ASSERT_TRUE(st) << st.error().to_string();
        std::vector<std::uint8_t> got(want.values.size());
        EPK_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size(), cudaMemcpyDeviceToHost));
        const std::string what = std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + " @" +
                                 std::to_string(shape.bpp) + " bpp, " + std::string(output_format_name(format)) +
                                 ", rows [" + std::to_string(r[0]) + ", " + std::to_string(r[1]) + ")" +
                                 " fast_groups " + std::to_string(options.fast_groups);
        EXPECT_EQ(got, want.values) << what;
        if (is_rowwise(format)) {
          std::vector<float> got_scales(r[1] - r[0]);
          EPK_CUDA_CHECK(cudaMemcpy(got_scales.data(), row_scales.get(), row_scales.bytes(), cudaMemcpyDeviceToHost));
          EXPECT_EQ(got_scales, want.row_scales) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace epk::cuda
