// EpkSource serving intq tensors: dense layouts bit-identical to the logical tensor's dequantization (what `epk
// decompress` writes), and the packed integer layouts (gptq, gptq-v2, awq, marlin) byte-identical to the CPU
// writers' parts placed by shm::packed_parts; layouts a tensor cannot take are kUnsupported naming the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "daemon/sources/epk_source.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::daemon {
namespace {

namespace fs = std::filesystem;
using layouts::QuantTensor;
using layouts::testing::random_intq_tensor;

struct Case {
  std::string name;
  QuantTensor t;
};

// Avoids a zero point of 0, which GPTQ v1 cannot store.
void no_zero_zeros(QuantTensor& t) {
  for (auto& z : t.zeros) z = z == 0 ? 1 : z;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  QuantTensor asym = random_intq_tensor(4, 200, 77, 64, false, false, false, 11);  // odd N, K % G != 0
  asym.zeros[3] = 0;
  c.push_back({"asym4_zero0", asym});
  QuantTensor asym_ok = random_intq_tensor(4, 128, 72, 32, false, false, false, 12);
  no_zero_zeros(asym_ok);
  c.push_back({"asym4", asym_ok});
  c.push_back({"sym4", random_intq_tensor(4, 256, 128, 128, true, false, false, 13)});
  c.push_back({"act4", random_intq_tensor(4, 256, 64, 64, true, true, false, 14)});
  c.push_back({"perm8", random_intq_tensor(8, 96, 64, 32, true, false, true, 15)});
  QuantTensor q3 = random_intq_tensor(3, 100, 50, 25, false, false, false, 16);
  no_zero_zeros(q3);
  c.push_back({"asym3", q3});
  c.push_back({"rans4", random_intq_tensor(4, 192, 80, 64, true, true, false, 17)});  // codes stored rANS-coded
  return c;
}

class IntqServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = layouts::testing::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    path_ = (dir_ / "m.epk").string();
    cases_ = cases();
    auto w = container::Writer::create(path_, {{"source", "intq_serving_test"}});
    ASSERT_TRUE(w) << w.error().to_string();
    for (const Case& c : cases_) {
      const auto form = c.name == "rans4" ? layouts::intq::CodeForm::kRans : layouts::intq::CodeForm::kPacked;
      auto e = layouts::intq::encode_int(c.t, c.name, DType::kBF16, "gptq", form);
      ASSERT_TRUE(e) << e.error().to_string();
      ASSERT_TRUE(w->add_tensor(e->spec, e->buffers()));
    }
    std::vector<std::uint8_t> norm(8, 0x3F);
    ASSERT_TRUE(w->add_tensor({"norm", {4}, DType::kBF16, container::Encoding::kRaw, ""}, {{"data", norm}}));
    ASSERT_TRUE(w->finish());
    auto s = open_epk_source(path_);
    ASSERT_TRUE(s) << s.error().to_string();
    source_ = std::move(*s);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::size_t index_of(const std::string& name) const {
    for (std::size_t i = 0; i < source_->tensors().size(); ++i)
      if (source_->tensors()[i].name == name) return i;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
  }
  const QuantTensor& logical(const std::string& name) const {
    for (const Case& c : cases_)
      if (c.name == name) return c.t;
    return cases_.front().t;
  }
  Result<std::vector<std::uint8_t>> produce(const std::string& name, shm::Layout l) const {
    EPK_TRY_ASSIGN(ServedTensor st, source_->served(index_of(name), l));
    std::vector<std::uint8_t> out(st.bytes, 0xEE);  // stale bytes: the gaps must come back zeroed
    EPK_TRY(source_->produce(index_of(name), l, out));
    return out;
  }

  // Every part written by the CPU writer sits at packed_parts' offset; the gaps between parts are zero.
  void expect_parts(const std::string& name, shm::Layout l, layouts::Layout target) {
    SCOPED_TRACE(name + " " + std::string(shm::layout_name(l)));
    auto st = source_->served(index_of(name), l);
    ASSERT_TRUE(st) << st.error().to_string();
    const QuantTensor& t = logical(name);
    EXPECT_EQ(st->dtype, t.scale_dtype);
    ASSERT_EQ(st->shape.size(), 8u);
    EXPECT_EQ(st->strides, std::vector<std::int64_t>(8, 0));
    auto g = shm::packed_geometry_from_shape(st->shape.span());
    ASSERT_TRUE(g);
    EXPECT_EQ(g->rows, std::uint64_t(t.rows));
    EXPECT_EQ(g->cols, std::uint64_t(t.cols));
    EXPECT_EQ(g->bits, std::uint64_t(t.bits));
    EXPECT_EQ(g->group_size, std::uint64_t(t.group_size));
    auto conv = layouts::write_layout(t, target);
    ASSERT_TRUE(conv) << conv.error().to_string();
    EXPECT_EQ(g->padded_rows, std::uint64_t(conv->padded_rows));
    EXPECT_EQ(g->padded_cols, std::uint64_t(conv->padded_cols));
    std::array<shm::PackedPart, shm::kMaxPackedParts> parts{};
    std::uint64_t total = 0;
    const std::size_t n = shm::packed_parts(l, *g, st->dtype, &parts, &total);
    ASSERT_EQ(n, conv->tensors.size());
    EXPECT_EQ(total, st->bytes);
    auto bytes = produce(name, l);
    ASSERT_TRUE(bytes) << bytes.error().to_string();
    std::vector<bool> covered(bytes->size(), false);
    for (std::size_t i = 0; i < n; ++i) {
      const layouts::Tensor& w = conv->tensors[i];
      EXPECT_EQ(parts[i].name, w.name);
      EXPECT_EQ(parts[i].offset % shm::kPackedPartAlign, 0u);
      std::vector<std::int64_t> shape;
      for (std::uint32_t d = 0; d < parts[i].ndim; ++d) shape.push_back(std::int64_t(parts[i].shape[d]));
      EXPECT_EQ(shape, w.shape) << w.name;
      ASSERT_EQ(parts[i].bytes, w.bytes.size()) << w.name;
      ASSERT_LE(parts[i].offset + parts[i].bytes, bytes->size());
      EXPECT_EQ(std::memcmp(bytes->data() + parts[i].offset, w.bytes.data(), w.bytes.size()), 0) << w.name;
      std::fill(covered.begin() + std::ptrdiff_t(parts[i].offset),
                covered.begin() + std::ptrdiff_t(parts[i].offset + parts[i].bytes), true);
    }
    for (std::size_t i = 0; i < bytes->size(); ++i) {
      if (!covered[i]) {
        ASSERT_EQ((*bytes)[i], 0) << "gap byte " << i;
      }
    }
  }

  void expect_unsupported(const std::string& name, shm::Layout l, bool at_served) {
    SCOPED_TRACE(name + " " + std::string(shm::layout_name(l)));
    auto st = source_->served(index_of(name), l);
    if (at_served) {
      ASSERT_FALSE(st);
      EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
      EXPECT_NE(st.error().message.find("'" + name + "'"), std::string::npos) << st.error().message;
      return;
    }
    ASSERT_TRUE(st) << st.error().to_string();
    auto p = produce(name, l);
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error().code, ErrorCode::kUnsupported);
    EXPECT_NE(p.error().message.find("'" + name + "'"), std::string::npos) << p.error().message;
  }

  fs::path dir_;
  std::string path_;
  std::vector<Case> cases_;
  std::unique_ptr<ModelSource> source_;
};

TEST_F(IntqServingTest, DenseLayoutsAreTheLogicalDequantizationInNnLinearOrder) {
  for (const Case& c : cases_) {
    SCOPED_TRACE(c.name);
    const QuantTensor& t = c.t;
    const std::vector<float> w = layouts::dequantize_f32(t);  // [rows, cols], stored row order
    const std::vector<std::uint16_t> wb = layouts::dequantize_bf16(t);
    auto st = source_->served(index_of(c.name), shm::Layout::kDenseBF16);
    ASSERT_TRUE(st) << st.error().to_string();
    EXPECT_EQ(st->shape, (std::vector<std::uint64_t>{std::uint64_t(t.cols), std::uint64_t(t.rows)}));
    auto bf = produce(c.name, shm::Layout::kDenseBF16);
    auto f32 = produce(c.name, shm::Layout::kDenseF32);
    ASSERT_TRUE(bf) << bf.error().to_string();
    ASSERT_TRUE(f32) << f32.error().to_string();
    std::size_t bad = 0;
    for (std::int64_t k = 0; k < t.rows; ++k) {
      const std::int64_t feature = t.perm.empty() ? k : t.perm[std::size_t(k)];
      for (std::int64_t n = 0; n < t.cols; ++n) {
        const std::size_t at = std::size_t(n * t.rows + feature), src = std::size_t(k * t.cols + n);
        std::uint16_t b;
        float f;
        std::memcpy(&b, bf->data() + 2 * at, 2);
        std::memcpy(&f, f32->data() + 4 * at, 4);
        bad += b != wb[src] || std::memcmp(&f, &w[src], 4) != 0;
      }
    }
    EXPECT_EQ(bad, 0u);
  }
}

TEST_F(IntqServingTest, DenseIsWhatEpkDecompressWrites) {
  auto reader = container::Reader::open(path_);
  ASSERT_TRUE(reader);
  for (const Case& c : cases_) {
    for (auto [layout, dtype] : {std::pair{shm::Layout::kDenseF16, DType::kF16},
                                 std::pair{shm::Layout::kStored, DType::kBF16}}) {
      const container::TensorEntry* e = reader->find(c.name);
      ASSERT_NE(e, nullptr);
      std::vector<std::uint8_t> want(e->element_count() * std::size_t(dtype_bits(dtype) / 8));
      ASSERT_TRUE(layouts::intq::dequantize_intq(*reader, *e, dtype, want));
      auto got = produce(c.name, layout);
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_EQ(*got, want) << c.name;
    }
  }
}

TEST_F(IntqServingTest, GptqV2PartsAreTheWritersBytes) {
  for (const Case& c : cases_) expect_parts(c.name, shm::Layout::kGptqV2, layouts::Layout::kGptqV2);
}

TEST_F(IntqServingTest, GptqV1PartsAreTheWritersBytes) {
  for (const char* n : {"asym4", "sym4", "act4", "perm8", "asym3"}) {
    expect_parts(n, shm::Layout::kGptq, layouts::Layout::kGptqV1);
  }
}

TEST_F(IntqServingTest, RansCodedCodesAreServedLikePackedOnes) {
  auto reader = container::Reader::open(path_);
  ASSERT_TRUE(reader);
  auto info = layouts::intq::code_info(*reader, *reader->find("rans4"));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->form, "rans");
  expect_parts("rans4", shm::Layout::kGptqV2, layouts::Layout::kGptqV2);
  expect_parts("rans4", shm::Layout::kMarlin, layouts::Layout::kMarlin);
}

TEST_F(IntqServingTest, GptqV1OfAZeroPointZeroIsUnsupportedNamingTheTensor) {
  expect_unsupported("asym4_zero0", shm::Layout::kGptq, /*at_served=*/false);
}

TEST_F(IntqServingTest, AwqPartsAreTheWritersBytes) {
  for (const char* n : {"asym4_zero0", "asym4", "sym4"}) expect_parts(n, shm::Layout::kAwq, layouts::Layout::kAwq);
}

TEST_F(IntqServingTest, AwqOfActOrderOrPermutedRowsIsUnsupported) {
  expect_unsupported("act4", shm::Layout::kAwq, true);
  expect_unsupported("perm8", shm::Layout::kAwq, true);
  expect_unsupported("asym3", shm::Layout::kAwq, true);  // 3-bit
}

TEST_F(IntqServingTest, MarlinPartsAreTheWritersBytesWithGIdxAndPermForActOrder) {
  expect_parts("sym4", shm::Layout::kMarlin, layouts::Layout::kMarlin);
  expect_parts("act4", shm::Layout::kMarlin, layouts::Layout::kMarlin);
  expect_parts("perm8", shm::Layout::kMarlin, layouts::Layout::kMarlin);
  auto st = source_->served(index_of("act4"), shm::Layout::kMarlin);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->shape[7], shm::kPackedGIdx | shm::kPackedPerm);
}

TEST_F(IntqServingTest, MarlinOfAsymmetricTensorsIsUnsupported) {
  expect_unsupported("asym4", shm::Layout::kMarlin, true);
  expect_unsupported("asym3", shm::Layout::kMarlin, true);
}

TEST_F(IntqServingTest, PackedLayoutsOfRawTensorsAreUnsupported) {
  expect_unsupported("norm", shm::Layout::kGptq, true);
  expect_unsupported("norm", shm::Layout::kMarlin, true);
}

TEST_F(IntqServingTest, AModelWithMalformedIntqParamsIsRefusedAtOpen) {
  const std::string bad = (dir_ / "bad.epk").string();
  auto e = layouts::intq::encode_int(cases_[0].t, "w", DType::kBF16, "gptq");
  ASSERT_TRUE(e);
  e->spec.params_json.replace(e->spec.params_json.find("\"bits\":4"), 8, "\"bits\":9");
  auto w = container::Writer::create(bad, {});
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->add_tensor(e->spec, e->buffers()));
  ASSERT_TRUE(w->finish());
  auto s = open_epk_source(bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("params.bits"), std::string::npos) << s.error().message;
}

TEST(PackedParts, RefusesGeometriesThatDoNotFitTheLayout) {
  std::array<shm::PackedPart, shm::kMaxPackedParts> parts{};
  std::uint64_t total = 0;
  shm::PackedGeometry g{64, 128, 64, 128, 4, 128, 1, shm::kPackedGIdx};
  EXPECT_EQ(shm::packed_parts(shm::Layout::kGptq, g, DType::kF16, &parts, &total), 4u);
  EXPECT_EQ(parts[1].offset, 4096u);  // qweight [16, 64] I32 = 4096 bytes
  EXPECT_EQ(parts[2].offset, 4096u + 64u);  // qzeros [1, 8] = 32 bytes, rounded up to 64
  EXPECT_EQ(total, 4096u + 64u + 128u + 512u);
  EXPECT_EQ(shm::packed_parts(shm::Layout::kAwq, g, DType::kF16, &parts, &total), 0u);  // AWQ has no g_idx
  g.flags = 0;
  EXPECT_EQ(shm::packed_parts(shm::Layout::kMarlin, g, DType::kF16, &parts, &total), 2u);
  g.bits = 3;
  EXPECT_EQ(shm::packed_parts(shm::Layout::kMarlin, g, DType::kF16, &parts, &total), 0u);
  g.bits = 4;
  g.padded_rows = std::uint64_t{1} << 40;  // past the extent bound
  EXPECT_EQ(shm::packed_parts(shm::Layout::kAwq, g, DType::kF16, &parts, &total), 0u);
  g.padded_rows = 128;
  g.rows = 129;  // logical past padded
  EXPECT_EQ(shm::packed_parts(shm::Layout::kAwq, g, DType::kF16, &parts, &total), 0u);
  g.rows = 128;
  EXPECT_EQ(shm::packed_parts(shm::Layout::kAwq, g, DType::kI8, &parts, &total), 0u);  // not a scale dtype
}

}  // namespace
}  // namespace epk::daemon
