// Our encoder's streams decoded by the reference package itself (live: needs /opt/refvenv/bin/python with
// entropack; skips cleanly without it), calibrated ones among them (the calibrated encoder writes the same stream
// format). Label: reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>

#include "codec/rans/decoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/calibration.h"
#include "codec/rate/encode.h"
#include "tests/codec/testing/vector_file.h"

namespace epk::rans {
namespace {

constexpr const char* kPython = "/opt/refvenv/bin/python";

testing::VectorTensor tensor_of(const std::string& dtype, std::vector<std::uint64_t> shape, const void* p,
                                std::size_t n) {
  testing::VectorTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(n);
  std::memcpy(t.data.data(), p, n);
  return t;
}

// H = X^T X of `samples` input rows whose columns have unequal scales and are correlated with their neighbour: the
// calibrated encoder's feedback then moves most points away from the plain encoder's.
std::vector<float> correlated_h(std::uint32_t cols, std::uint32_t samples, std::mt19937& rng) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> h(std::size_t(cols) * cols, 0.0), x(cols);
  for (std::uint32_t s = 0; s < samples; ++s) {
    double prev = 0.0;
    for (std::uint32_t j = 0; j < cols; ++j) {
      prev = 0.8 * prev + g(rng);
      x[j] = prev * (1.0 + double(j % 7));
    }
    for (std::uint32_t i = 0; i < cols; ++i)
      for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(i) * cols + j] += x[i] * x[j];
  }
  return std::vector<float>(h.begin(), h.end());
}

TEST(ReferenceLive, ReferenceDecodesOurStreamsBitExact) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " missing";
  const struct {
    const char* name;
    std::uint32_t rows, cols;
    double bpp;
    int rdo;
    bool ecvq = false;  // the entropy-constrained point choice with table pruning and the fine rate step
    bool calibrated = false;  // encoded with input statistics (correlated_h)
  } cases[] = {{"a", 40, 96, 4.0, 0},        {"b", 33, 101, 2.5, 0},       {"c", 64, 64, 8.0, 0},
               {"d", 1, 13, 6.0, 0},         {"e", 50, 200, 3.0, 2},       {"f", 24, 200, 10.0, 0},
               {"g", 37, 203, 4.0, 0, true}, {"h", 29, 99, 2.0, 1, true},  {"i", 1, 8, 5.0, 0, true},
               {"j", 48, 96, 4.0, 0, false, true},   {"k", 31, 101, 3.0, 0, false, true},
               {"l", 20, 203, 2.5, 0, false, true},  {"m", 6, 41, 6.0, 0, false, true}};
  const struct {
    const char* torch;
    const char* st;
    DType t;
  } outs[] = {{"float32", "F32", DType::kF32},       {"bfloat16", "BF16", DType::kBF16},
              {"float16", "F16", DType::kF16},       {"float8_e4m3fn", "F8_E4M3", DType::kF8E4M3},
              {"float8_e5m2", "F8_E5M2", DType::kF8E5M2}, {"int8", "I8", DType::kI8}};
  std::map<std::string, testing::VectorTensor> file;
  std::mt19937 rng(17);
  std::student_t_distribution<float> dist(4.0f);
  for (const auto& c : cases) {
    std::vector<float> w(std::size_t(c.rows) * c.cols);
    for (float& v : w) v = dist(rng) * 20.0f;
    rate::EncodeOptions o;
    o.target_bpp = c.bpp;
    o.rdo_sweeps = c.rdo;
    o.ecvq = o.prune_tables = o.fine_rate = c.ecvq;
    const std::vector<float> h = c.calibrated ? correlated_h(c.cols, c.cols + 64, rng) : std::vector<float>();
    const rate::HessianView hv{h, c.cols, double(c.cols + 64)};
    if (c.calibrated) o.calibration = &hv;
    auto enc = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, c.rows, c.cols,
                            DType::kF32, o, c.name);
    ASSERT_TRUE(enc.has_value()) << enc.error().to_string();
    if (c.calibrated) {  // the statistics moved the points: this case is not a plain stream again
      rate::EncodeOptions plain_options = o;
      plain_options.calibration = nullptr;
      auto plain = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, c.rows, c.cols,
                                DType::kF32, plain_options, c.name);
      ASSERT_TRUE(plain.has_value());
      EXPECT_FALSE(plain->payload == enc->payload && plain->scales == enc->scales) << c.name;
    }
    auto blob = write_reference_quant_state(*enc);
    ASSERT_TRUE(blob.has_value());
    file[std::string(c.name) + ".quant_state"] = tensor_of("U8", {blob->size()}, blob->data(), blob->size());
    for (const auto& o2 : outs) {
      const std::size_t bytes = w.size() * std::size_t(dtype_bits(o2.t) / 8);
      std::vector<std::byte> out(bytes);
      ASSERT_TRUE(decode(enc->view(), c.name, o2.t, out).has_value());
      file[std::string(c.name) + ".decoded." + o2.torch] = tensor_of(o2.st, {c.rows, c.cols}, out.data(), bytes);
    }
  }
  const std::string path = ::testing::TempDir() + "epk_live_" + std::to_string(::getpid()) + ".safetensors";
  ASSERT_TRUE(testing::write_vector_file(path, file));
  const std::string cmd = std::string(kPython) + " " + EPK_SOURCE_DIR + "/scripts/testdata/check_epk_streams.py " + path;
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0) << cmd;
}

}  // namespace
}  // namespace epk::rans
