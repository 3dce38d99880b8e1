// codec/decode/decode_slice: every slice of raw and lattice-rans tensors equals the same slice of decode_tensor's
// whole output, bit for bit (odd shapes, slices smaller than a tile, slices starting mid-tile, the last one, column
// bands of one row and of a few rows), and bad slices are errors.
#include "codec/decode/decode_slice.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "codec/container/writer.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "tests/support/bytes.h"
#include "tests/support/scratch_dir.h"

namespace epk::decode {
namespace {

namespace fs = std::filesystem;

using test::bytes_of;

// The slice by element index, written without the production code's runs: for every element of the result, its
// multi-index in the slice, shifted along `axis`, read from the whole tensor.
std::vector<std::uint8_t> reference_slice(std::span<const std::uint8_t> whole, const std::vector<std::uint64_t>& shape,
                                          std::size_t elem, std::size_t axis, std::uint64_t b, std::uint64_t e) {
  std::vector<std::uint64_t> part = shape;
  part[axis] = e - b;
  std::uint64_t n = 1;
  for (auto d : part) n *= d;
  std::vector<std::uint8_t> out(n * elem);
  std::vector<std::uint64_t> idx(shape.size(), 0);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t rem = i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      idx[d] = rem % part[d];
      rem /= part[d];
    }
    idx[axis] += b;
    std::uint64_t src = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) src = src * shape[d] + idx[d];
    std::memcpy(out.data() + i * elem, whole.data() + src * elem, elem);
  }
  return out;
}

// Ranges along an extent: every rank's share of worlds 1..7 (ceil split), and single indices at the edges.
std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges(std::uint64_t extent) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::uint64_t w = 1; w <= 7; ++w) {
    const std::uint64_t chunk = (extent + w - 1) / w;
    for (std::uint64_t r = 0; r < w && r * chunk < extent; ++r) out.push_back({r * chunk, std::min(extent, (r + 1) * chunk)});
  }
  out.push_back({0, 1});
  out.push_back({extent - 1, extent});
  if (extent > 6) out.push_back({3, extent - 2});
  if (extent > 9) out.push_back({5, 9});
  return out;
}

class DecodeSlice : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = epk::test::test_scratch_file("epk_decode_slice", ".epk");
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 0.1f);
    weights_.resize(std::size_t(kRows) * kCols);
    for (float& v : weights_) v = d(rng);
    rate::EncodeOptions o;
    o.target_bpp = 4.0;
    auto e = rate::encode({reinterpret_cast<const std::byte*>(weights_.data()), weights_.size() * 4}, kRows, kCols,
                          DType::kF32, o, "w");
    ASSERT_TRUE(e) << e.error().to_string();
    raw3_.resize(23 * 9 * 3);
    for (float& v : raw3_) v = d(rng);
    raw_bf16_.resize(11 * 6);
    for (std::size_t i = 0; i < raw_bf16_.size(); ++i) raw_bf16_[i] = static_cast<std::uint16_t>(0x3c00 + 37 * i);
    auto w = container::Writer::create(path_, {});
    ASSERT_TRUE(w);
    auto form = rans::to_container(*e, "lin", {});
    ASSERT_TRUE(w->add_tensor(form.spec, form.buffers));
    ASSERT_TRUE(w->add_tensor({"raw3", {23, 9, 3}, DType::kF32, container::Encoding::kRaw, "{}"},
                              {{"data", bytes_of(raw3_)}}));
    ASSERT_TRUE(w->add_tensor({"rawbf", {11, 6}, DType::kBF16, container::Encoding::kRaw, "{}"},
                              {{"data", bytes_of(raw_bf16_)}}));
    ASSERT_TRUE(w->finish());
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r) << r.error().to_string();
    reader_ = std::move(*r);
    auto stored = rans::from_container(reader_, *reader_.find("lin"));
    ASSERT_TRUE(stored);
    // Shards smaller than a tile and starting mid-tile exist only if a tile spans several rows.
    ASSERT_GT(stored->stream.tile_symbols, 2 * (stored->stream.padded_cols / 8)) << "tiles must span rows";
  }
  void TearDown() override { fs::remove(path_); }

  std::vector<std::uint8_t> whole(const std::string& name, DType out) {
    const auto* e = reader_.find(name);
    std::vector<std::uint8_t> all(decoded_bytes(*e, out));
    EXPECT_TRUE(decode_tensor(reader_, *e, out, all));
    return all;
  }

  void check_all(const std::string& name, DType out, std::vector<std::uint64_t> band_list) {
    const auto* e = reader_.find(name);
    const auto all = whole(name, out);
    const std::size_t elem = dtype_bits(out) / 8;
    for (std::size_t axis = 0; axis < 2; ++axis) {
      for (auto [b, en] : ranges(e->shape[axis])) {
        const auto want = reference_slice(all, e->shape, elem, axis, b, en);
        for (std::uint64_t band : band_list) {
          std::vector<std::uint8_t> got(want.size());
          Status st = decode_tensor_slice(reader_, *e, out, {axis, b, en}, got, band);
          ASSERT_TRUE(st) << st.error().to_string();
          ASSERT_EQ(got, want) << name << " axis " << axis << " [" << b << ", " << en << ") band " << band;
        }
      }
    }
  }

  static constexpr std::uint32_t kRows = 131, kCols = 77;
  std::string path_;
  std::vector<float> weights_, raw3_;
  std::vector<std::uint16_t> raw_bf16_;
  container::Reader reader_;
};

TEST_F(DecodeSlice, LatticeSlicesEqualTheWholeDecodesSlices) {
  for (DType out : {DType::kBF16, DType::kF32, DType::kF16}) {
    // Bands of one row, of three rows, and the default (the whole tensor in one band).
    const std::uint64_t row = std::uint64_t{kCols} * (dtype_bits(out) / 8);
    check_all("lin", out, {1, 3 * row, kSliceBandBytes});
  }
}

TEST_F(DecodeSlice, RawSlicesEqualTheWholeTensorsSlicesWithConversions) {
  check_all("raw3", DType::kF32, {kSliceBandBytes});
  check_all("raw3", DType::kBF16, {kSliceBandBytes});
  check_all("rawbf", DType::kBF16, {kSliceBandBytes});
  check_all("rawbf", DType::kF32, {kSliceBandBytes});
}

TEST_F(DecodeSlice, RowwiseSlicesEqualTheWholeRowwiseDecodesSlices) {
  const auto* e = reader_.find("lin");
  for (auto type : {rans::RowwiseType::kInt8, rans::RowwiseType::kF8E4M3}) {
    std::vector<std::uint8_t> values(std::size_t(kRows) * kCols);
    std::vector<float> scales(kRows);
    ASSERT_TRUE(decode_tensor_rowwise(reader_, *e, type, values, scales));
    for (std::size_t axis = 0; axis < 2; ++axis) {
      for (auto [b, en] : ranges(e->shape[axis])) {
        const auto want = reference_slice(values, e->shape, 1, axis, b, en);
        const std::uint64_t rows = axis == 0 ? en - b : kRows;
        std::vector<float> want_scales(scales.begin() + (axis == 0 ? b : 0), scales.begin() + (axis == 0 ? en : kRows));
        for (std::uint64_t band : {std::uint64_t{1}, std::uint64_t{5} * kCols, kSliceBandBytes}) {
          std::vector<std::uint8_t> got(want.size());
          std::vector<float> got_scales(rows);
          Status st = decode_tensor_rowwise_slice(reader_, *e, type, {axis, b, en}, got, got_scales, band);
          ASSERT_TRUE(st) << st.error().to_string();
          ASSERT_EQ(got, want) << "axis " << axis << " [" << b << ", " << en << ")";
          ASSERT_EQ(0, std::memcmp(got_scales.data(), want_scales.data(), rows * 4));
        }
      }
    }
  }
}

TEST_F(DecodeSlice, BadSlicesAreErrorsNamingTheTensor) {
  const auto* e = reader_.find("lin");
  std::vector<std::uint8_t> buf(std::size_t(kRows) * kCols * 4);
  for (Slice s : {Slice{0, 5, 5}, Slice{0, 6, 5}, Slice{0, 0, kRows + 1}, Slice{1, 0, kCols + 1}, Slice{2, 0, 1}}) {
    Status st = decode_tensor_slice(reader_, *e, DType::kF32, s, buf);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(st.error().message.find("'lin'"), std::string::npos) << st.error().message;
  }
  Status st = decode_tensor_slice(reader_, *e, DType::kF32, {0, 0, 2}, std::span<std::uint8_t>(buf.data(), 7));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace epk::decode
