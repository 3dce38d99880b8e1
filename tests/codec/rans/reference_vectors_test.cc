// Bit-exact interop with the reference package, on the vectors scripts/testdata/make_entropack_vectors.py made:
// our decoder reproduces its output for every dtype, our quantizer its fields, our encoder its buffers, and our
// writer its quant_state blob byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "codec/common/float_convert.h"
#include "codec/lattice/quantize.h"
#include "codec/rans/decoder.h"
#include "codec/rans/encoder.h"
#include "codec/rans/reference_format.h"
#include "tests/codec/testing/vector_file.h"

namespace epk::rans {
namespace {

std::vector<std::string> vector_names() {
  std::vector<std::string> names;
  const std::filesystem::path dir = std::filesystem::path(EPK_SOURCE_DIR) / "tests/data/entropack";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string path_of(const std::string& name) {
  return std::string(EPK_SOURCE_DIR) + "/tests/data/entropack/" + name + ".safetensors";
}

std::vector<float> input_as_float(const testing::VectorTensor& t) {
  std::vector<float> out;
  if (t.dtype == "F32") return t.as<float>();
  if (t.dtype == "BF16") {
    for (std::uint16_t b : t.as<std::uint16_t>()) out.push_back(float_from_bf16(b));
  } else if (t.dtype == "F16") {
    for (std::uint16_t b : t.as<std::uint16_t>()) out.push_back(float_from_f16(b));
  } else if (t.dtype == "I8") {
    for (std::int8_t b : t.as<std::int8_t>()) out.push_back(float(b));
  }
  return out;
}

class ReferenceVectors : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    file_ = testing::read_vector_file(path_of(GetParam()));
    ASSERT_TRUE(file_.ok) << file_.error;
    const auto& blob = file_.at("entropack_quant_state").data;
    auto parsed = parse_reference_quant_state(blob, GetParam());
    ASSERT_TRUE(parsed.has_value()) << parsed.error().to_string();
    tensor_ = std::move(parsed).value();
  }
  testing::VectorFile file_;
  EncodedTensor tensor_;
};

TEST_P(ReferenceVectors, DecodesEveryDtypeBitExact) {
  const struct {
    const char* key;
    DType t;
  } outs[] = {{"decoded.float32", DType::kF32},      {"decoded.bfloat16", DType::kBF16},
              {"decoded.float16", DType::kF16},      {"decoded.float8_e4m3fn", DType::kF8E4M3},
              {"decoded.float8_e5m2", DType::kF8E5M2}, {"decoded.int8", DType::kI8}};
  for (const auto& o : outs) {
    ASSERT_TRUE(file_.has(o.key)) << o.key;
    const auto& want = file_.at(o.key).data;
    std::vector<std::byte> got(want.size());
    auto st = decode(tensor_.view(), GetParam(), o.t, got);
    ASSERT_TRUE(st.has_value()) << st.error().to_string();
    std::size_t diffs = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diffs += got[i] != want[i];
    EXPECT_EQ(diffs, 0u) << o.key;
  }
}

TEST_P(ReferenceVectors, DecodesRowRangesLikeTheWhole) {
  const auto& want = file_.at("decoded.float32").data;
  const std::uint32_t rows = tensor_.rows;
  const std::size_t row_bytes = std::size_t(tensor_.cols) * 4;
  for (std::uint32_t r0 : {0u, rows / 3, rows - 1}) {
    const std::uint32_t r1 = std::min(rows, r0 + 1 + rows / 2);
    std::vector<std::byte> got((r1 - r0) * row_bytes);
    auto st = decode_rows(tensor_.view(), GetParam(), DType::kF32, got, r0, r1);
    ASSERT_TRUE(st.has_value()) << st.error().to_string();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data() + r0 * row_bytes, got.size())) << r0 << ".." << r1;
  }
}

TEST_P(ReferenceVectors, WriterReproducesTheBlob) {
  auto blob = write_reference_quant_state(tensor_);
  ASSERT_TRUE(blob.has_value()) << blob.error().to_string();
  const auto& want = file_.at("entropack_quant_state").data;
  ASSERT_EQ(blob->size(), want.size());
  EXPECT_EQ(0, std::memcmp(blob->data(), want.data(), want.size()));
  EXPECT_EQ(reference_quant_state_bytes(tensor_), want.size());
}

TEST_P(ReferenceVectors, EncoderReproducesBuffersFromTheirFields) {
  auto fields = decode_fields(tensor_.view(), GetParam());
  ASSERT_TRUE(fields.has_value()) << fields.error().to_string();
  EncodeGeometry g{tensor_.rows, tensor_.cols, tensor_.prob_bits, tensor_.tile_symbols, tensor_.dtype};
  auto ours = encode_fields(*fields, tensor_.scales, g, 2);
  ASSERT_TRUE(ours.has_value()) << ours.error().to_string();
  EXPECT_EQ(ours->payload, tensor_.payload);
  EXPECT_EQ(ours->offsets, tensor_.offsets);
  EXPECT_EQ(ours->states, tensor_.states);
  EXPECT_EQ(ours->freq_tables, tensor_.freq_tables);
  ASSERT_EQ(ours->tables.size(), tensor_.tables.size());
  EXPECT_EQ(0, std::memcmp(ours->tables.data(), tensor_.tables.data(), tensor_.tables.size() * sizeof(TableMeta)));
}

TEST_P(ReferenceVectors, QuantizerReproducesTheirFields) {
  auto fields = decode_fields(tensor_.view(), GetParam());
  ASSERT_TRUE(fields.has_value()) << fields.error().to_string();
  const std::vector<float> x = input_as_float(file_.at("input"));
  ASSERT_EQ(x.size(), std::size_t(tensor_.rows) * tensor_.cols);
  const std::vector<float> rms = file_.at("ref.rms").as<float>();
  const std::vector<double> scale = file_.at("ref.scale").as<double>();
  ASSERT_EQ(rms.size(), tensor_.rows);
  ASSERT_EQ(scale.size(), 1u);
  std::vector<float> normalized(std::size_t(tensor_.rows) * tensor_.padded_cols, 0.0f);
  for (std::uint32_t r = 0; r < tensor_.rows; ++r) {
    for (std::uint32_t c = 0; c < tensor_.padded_cols; ++c) {
      const float v = c < tensor_.cols ? x[std::size_t(r) * tensor_.cols + c] : 0.0f;
      normalized[std::size_t(r) * tensor_.padded_cols + c] = v / rms[r];
    }
  }
  lattice::QuantizedFields q;
  q.resize(fields->vectors());
  lattice::quantize_vectors(normalized.data(), q.vectors(), float(scale[0]), q.coset.data(), q.fields.data());
  EXPECT_EQ(q.coset, fields->coset);
  EXPECT_EQ(q.fields, fields->fields);
}

INSTANTIATE_TEST_SUITE_P(Entropack, ReferenceVectors, ::testing::ValuesIn(vector_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(ReferenceVectorSet, IsPresent) { EXPECT_GE(vector_names().size(), 10u); }

}  // namespace
}  // namespace epk::rans
