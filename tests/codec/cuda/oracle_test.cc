// The GPU decoder and its CPU reference against the project's scalar decoder (codec/rans/decoder.h, the oracle), bit
// for bit: on the committed reference-package vectors (CPU only, runs everywhere) and on streams the project's encoder
// makes from seeded random weights of odd shapes at 2, 4 and 8 bpp (GPU, skipped without one).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "codec/cuda/decode.h"
#include "codec/cuda/decode_reference.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"
#include "tests/codec/cuda/device_stream.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace {

struct FormatPair {
  OutputFormat gpu;
  DType oracle;
};
constexpr FormatPair kPairs[] = {
    {OutputFormat::kBf16, DType::kBF16},     {OutputFormat::kFp16, DType::kF16},
    {OutputFormat::kFp32, DType::kF32},      {OutputFormat::kFp8E4M3, DType::kF8E4M3},
    {OutputFormat::kFp8E5M2, DType::kF8E5M2},
};

std::vector<std::uint8_t> oracle(const rans::LatticeRansStream& s, DType t, std::uint32_t b, std::uint32_t e) {
  std::vector<std::uint8_t> out(std::size_t{e - b} * s.cols * static_cast<std::size_t>(dtype_bits(t) / 8), 0);
  const Status st = rans::decode_rows(s, "oracle", t, std::as_writable_bytes(std::span(out)), b, e);
  EXPECT_TRUE(st) << st.error().to_string();
  return out;
}

std::vector<std::uint8_t> cpu_reference(const rans::LatticeRansStream& s, OutputFormat f, std::uint32_t b,
                                        std::uint32_t e) {
  std::vector<std::uint8_t> out(std::size_t{e - b} * s.cols * output_element_bytes(f), 0);
  EXPECT_TRUE(decode_reference(s, f, b, e, out, {}, nullptr));
  return out;
}

class OracleVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleVectors, CpuReferenceEqualsTheOracleInEveryFormat) {
  auto raw = testing::read_raw_stream(testing::cuda_data_dir() + "/" + GetParam() + ".epkraw");
  ASSERT_TRUE(raw) << raw.error().to_string();
  const rans::LatticeRansStream s = raw->view();
  for (const FormatPair& p : kPairs) {
    EXPECT_EQ(cpu_reference(s, p.gpu, 0, s.rows), oracle(s, p.oracle, 0, s.rows)) << output_format_name(p.gpu);
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

TEST(CpuOracle, FreshlyEncodedStreamsMatchTheCpuReference) {
  std::uint32_t seed = 11;
  for (const Shape& shape : kShapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    for (const FormatPair& p : kPairs) {
      EXPECT_EQ(cpu_reference(s, p.gpu, 1, s.rows), oracle(s, p.oracle, 1, s.rows))
          << shape.rows << "x" << shape.cols << " " << output_format_name(p.gpu);
    }
  }
}

TEST(GpuOracle, FreshlyEncodedStreamsDecodeBitExactInEveryFormatAndRowRange) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& shapes = kShapes;
  std::uint32_t seed = 11;
  for (const Shape& shape : shapes) {
    const rans::EncodedTensor enc = encode_random(shape, seed++);
    const rans::LatticeRansStream s = enc.view();
    testing::DeviceStream dev(s);
    const std::uint32_t ranges[][2] = {{0, s.rows}, {s.rows / 3, s.rows / 3 + 2}, {s.rows - 1, s.rows}};
    for (const auto& r : ranges) {
      for (const FormatPair& p : kPairs) {
        const std::vector<std::uint8_t> want = oracle(s, p.oracle, r[0], r[1]);
        testing::DeviceBuffer out(want.size());
        EPK_CUDA_CHECK(cudaMemset(out.get(), 0xAB, want.size()));
        DecodeJob job{"random", &s, dev.buffers(), r[0], r[1], p.gpu, out.get(), nullptr};
        auto plan = DecodePlan::create({&job, 1});
        ASSERT_TRUE(plan) << plan.error().to_string();
        testing::DeviceBuffer scratch(plan->scratch_bytes());
        ASSERT_TRUE(upload(*plan, scratch.get(), scratch.bytes(), nullptr));
        ASSERT_TRUE(decode(*plan, scratch.get(), nullptr));
        const Status st = read_status(*plan, scratch.get(), nullptr);
        ASSERT_TRUE(st) << st.error().to_string();
        std::vector<std::uint8_t> got(want.size());
        EPK_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size(), cudaMemcpyDeviceToHost));
        EXPECT_EQ(got, want) << shape.rows << "x" << shape.cols << " @" << shape.bpp << " bpp, "
                             << output_format_name(p.gpu) << ", rows [" << r[0] << ", " << r[1] << ")";
      }
    }
  }
}

}  // namespace
}  // namespace epk::cuda
