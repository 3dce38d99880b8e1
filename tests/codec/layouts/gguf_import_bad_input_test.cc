// What `epk import` refuses in a GGUF file, and how: a block with a NaN or infinite scale is bad input naming the
// tensor, the block and the field (for the integer-grid types, which become kind `int`, and for kind `gguf`); a block
// type without a dequantizer is unsupported (the file still parses, the error names the tensor). And the reader of a
// stored kind `gguf` entry answers the same way, so a crafted .epk cannot carry what import refuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "codec/common/half.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_source.h"
#include "tests/codec/layouts/gguf_builder.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::layouts {
namespace {

using testing::GgufBuilder;

// Blocks of `type` with every scale field 0.5 (their offsets given), codes 0x11.
std::string blocks(gguf::GgmlType type, int n, std::initializer_list<int> scale_offsets) {
  const auto traits = *gguf::type_traits(static_cast<std::uint32_t>(type));
  std::string out(static_cast<std::size_t>(n) * traits.type_size, '\x11');
  for (int b = 0; b < n; ++b)
    for (int off : scale_offsets) store_le<std::uint16_t>(out.data() + b * traits.type_size + off, f32_to_f16(0.5f));
  return out;
}

std::filesystem::path write_gguf(const std::string& name, const GgufBuilder& b) {
  const auto dir = testing::scratch_dir("gguf_import_" + name);
  const auto path = dir / (name + ".gguf");
  const auto bytes = b.build();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (f) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  return path;
}

// Runs import's per-item step (as cmd_import does) on the item called `name`.
Status import_item(const std::filesystem::path& path, const std::string& name) {
  EPK_TRY_ASSIGN(auto src, QuantSource::open(path.string()));
  for (const auto& item : src->items()) {
    if (item.name != name) continue;
    if (item.kind == SourceItem::Kind::kInt) {
      EPK_TRY_ASSIGN(auto t, item.load_int());
      EPK_TRY(intq::encode_int(t, item.name, item.dtype, item.source));
      return {};
    }
    if (item.kind == SourceItem::Kind::kGguf) {
      EPK_TRY(intq::encode_gguf(item.gguf_info, item.bytes, item.name));
      return {};
    }
    return {};
  }
  return make_error(ErrorCode::kNotFound, name);
}

void expect_in(const Status& st, ErrorCode code, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, code) << st.error().message;
  for (const char* p : parts) EXPECT_NE(st.error().message.find(p), std::string::npos) << st.error().message;
}

TEST(GgufImportBadInput, Q8_0BlockWithNaNScaleIsRefusedNamingTensorBlockAndField) {
  GgufBuilder b;
  std::string q8 = blocks(gguf::GgmlType::kQ8_0, 4, {0});  // 2 rows of 2 blocks: kind int
  store_le<std::uint16_t>(q8.data() + 3 * 34, 0x7E00);
  b.tensor("blk.0.ffn_up.weight", {64, 2}, static_cast<std::uint32_t>(gguf::GgmlType::kQ8_0), q8);
  const auto path = write_gguf("q8_nan", b);
  expect_in(import_item(path, "blk.0.ffn_up.weight"), ErrorCode::kBadInput,
            {"blk.0.ffn_up.weight", "block 3", "field d", "NaN"});
  std::filesystem::remove_all(path.parent_path());
}

TEST(GgufImportBadInput, InfiniteScaleOrMinOfOtherTypesIsRefused) {
  struct Row {
    gguf::GgmlType type;
    std::initializer_list<int> offsets;
    int bad_offset;
    const char* field;
  };
  for (const Row& r : {Row{gguf::GgmlType::kQ4_0, {0}, 0, "field d"}, Row{gguf::GgmlType::kQ5_1, {0, 2}, 2, "field m"},
                       Row{gguf::GgmlType::kQ4_K, {0, 2}, 2, "field dmin"},
                       Row{gguf::GgmlType::kQ3_K, {108}, 108, "field d"},
                       Row{gguf::GgmlType::kIQ4_XS, {0}, 0, "field d"}}) {
    const auto traits = *gguf::type_traits(static_cast<std::uint32_t>(r.type));
    std::string data = blocks(r.type, 2, r.offsets);
    store_le<std::uint16_t>(data.data() + traits.type_size + r.bad_offset, 0x7C00);  // +inf in block 1
    GgufBuilder b;
    b.tensor("t", {2 * traits.block_size}, static_cast<std::uint32_t>(r.type), data);
    const auto path = write_gguf(std::string("inf_") + traits.name, b);
    expect_in(import_item(path, "t"), ErrorCode::kBadInput, {"'t'", "block 1", r.field, "infinite"});
    std::filesystem::remove_all(path.parent_path());
  }
}

TEST(GgufImportBadInput, TypeWithoutDequantizerIsUnsupportedNamingTheTensor) {
  GgufBuilder b;
  b.tensor("ok", {32}, static_cast<std::uint32_t>(gguf::GgmlType::kQ5_0), blocks(gguf::GgmlType::kQ5_0, 1, {0}));
  b.tensor("iq2", {256}, static_cast<std::uint32_t>(gguf::GgmlType::kIQ2_XXS), std::string(66, '\0'));
  const auto path = write_gguf("iq2", b);
  EXPECT_TRUE(import_item(path, "ok"));  // the file parses; the other tensor is what fails
  expect_in(import_item(path, "iq2"), ErrorCode::kUnsupported, {"'iq2'", "IQ2_XXS", "not supported"});
  std::filesystem::remove_all(path.parent_path());
}

// A kind `gguf` entry written past import (a crafted file or a newer writer) is read with the same rules.
TEST(GgufImportBadInput, StoredEntriesOfUnsupportedTypesOrNaNScalesAreRefusedOnRead) {
  gguf::TensorInfo info;
  info.name = "w";
  info.ne = {32};
  info.type = static_cast<std::uint32_t>(gguf::GgmlType::kQ5_0);
  info.n_elements = 32;
  info.n_bytes = 22;
  const std::string q5 = blocks(gguf::GgmlType::kQ5_0, 1, {0});
  auto good = intq::encode_gguf(info, std::span(reinterpret_cast<const std::uint8_t*>(q5.data()), q5.size()), "w");
  ASSERT_TRUE(good) << good.error().message;

  intq::Encoded q8k = *good;  // Q8_K: known size, no dequantizer
  q8k.spec.name = "q8k";
  q8k.spec.shape = {256};
  q8k.spec.params_json = nlohmann::json{{"version", 1}, {"kind", "gguf"}, {"ggml_type", 15}, {"ggml_name", "Q8_K"}}.dump();
  q8k.storage[0].assign(292, 0);
  intq::Encoded nan = *good;
  nan.spec.name = "nan";
  store_le<std::uint16_t>(nan.storage[0].data(), 0xFE00);
  std::vector<intq::Encoded> all{q8k, nan};
  const auto dir = testing::scratch_dir("gguf_read_bad");
  auto r = testing::write_and_open((dir / "x.epk").string(), all);
  ASSERT_TRUE(r) << r.error().message;

  std::vector<std::uint8_t> out256(256 * 4), out32(32 * 4);
  auto st = intq::dequantize_intq(*r, *r->find("q8k"), DType::kF32, out256);
  expect_in(st, ErrorCode::kUnsupported, {"'q8k'", "Q8_K"});
  st = intq::dequantize_intq(*r, *r->find("nan"), DType::kF32, out32);
  expect_in(st, ErrorCode::kBadInput, {"'nan'", "buffers.blocks", "block 0", "field d is NaN"});
  std::filesystem::remove_all(dir);
}

// Every integer-grid import (GPTQ, AWQ, compressed-tensors, GGUF Q4_0/Q8_0) goes through encode_int, which refuses a
// scale that read_int would refuse later: non-finite as stored, including a finite f32 that overflows f16.
TEST(IntqEncodeBadInput, NonFiniteScaleIsRefusedNamingTheEntry) {
  QuantTensor t = testing::random_intq_tensor(4, 64, 8, 32, false, false, false, 7);
  ASSERT_EQ(t.scale_dtype, DType::kF16);
  ASSERT_TRUE(intq::encode_int(t, "ok", DType::kF16, "gptq"));
  QuantTensor nan = t;
  nan.scales[11] = std::numeric_limits<float>::quiet_NaN();
  auto e = intq::encode_int(nan, "w", DType::kF16, "gptq");
  ASSERT_FALSE(e);
  expect_in(std::move(e).error(), ErrorCode::kBadInput, {"'w'", "scales entry 11 (group 1, column 3)", "F16"});
  QuantTensor big = t;
  big.scales[0] = 1e6f;  // finite in f32, infinite in the f16 it is stored as
  e = intq::encode_int(big, "w", DType::kF16, "gptq");
  ASSERT_FALSE(e);
  expect_in(std::move(e).error(), ErrorCode::kBadInput, {"scales entry 0 (group 0, column 0)"});
}

}  // namespace
}  // namespace epk::layouts
