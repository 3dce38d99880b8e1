// GGUF block types against gguf-py's own dequantization (tests/data/gguf/gguf_types.gguf, written by
// scripts/testdata/make_gguf_vectors.py: every tensor NAME has NAME.ref, F32, gguf.quants.dequantize of its bytes):
// gguf::dequantize bit for bit, and the same through `epk import`'s path (QuantSource, the intq encoding, an .epk,
// dequantize_intq) so what import accepts is what later steps read.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>

#include "codec/layouts/gguf.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_source.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::layouts {
namespace {

std::string types_path() { return std::string(EPK_SOURCE_DIR) + "/tests/data/gguf/gguf_types.gguf"; }

struct Case {
  const char* name;
  gguf::GgmlType type;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GgufTypes : public ::testing::TestWithParam<Case> {};

std::vector<float> ref_values(const gguf::File& f, const gguf::TensorInfo& t) {
  const gguf::TensorInfo* r = f.find_tensor(std::string(t.name) + ".ref");
  EXPECT_NE(r, nullptr) << t.name;
  if (!r) return {};
  EXPECT_EQ(r->type, static_cast<std::uint32_t>(gguf::GgmlType::kF32));
  EXPECT_EQ(r->ne, t.ne);
  std::vector<float> out(r->n_elements);
  const auto bytes = f.tensor_bytes(*r);
  EXPECT_EQ(bytes.size(), out.size() * 4);
  std::memcpy(out.data(), bytes.data(), std::min<std::size_t>(bytes.size(), out.size() * 4));
  return out;
}

TEST_P(GgufTypes, DequantizesBitIdenticallyToGgufPy) {
  auto f = gguf::File::open(types_path());
  ASSERT_TRUE(f) << f.error().to_string();
  const gguf::TensorInfo* t = f->find_tensor(GetParam().name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, static_cast<std::uint32_t>(GetParam().type));
  EXPECT_TRUE(gguf::dequantize_supported(t->type));
  auto y = gguf::dequantize(t->type, f->tensor_bytes(*t), t->n_elements);
  ASSERT_TRUE(y) << y.error().to_string();
  const auto want = ref_values(*f, *t);
  ASSERT_EQ(y->size(), want.size());
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>((*y)[i]), std::bit_cast<std::uint32_t>(want[i])) << GetParam().name << " " << i;
    nonzero += want[i] != 0.0f;
  }
  EXPECT_GT(nonzero, want.size() / 2);  // the vectors exercise the codes, not only zero scales
}

TEST_P(GgufTypes, ImportStoresTheBlocksAndDequantizesLikeGgufPy) {
  auto src = QuantSource::open(types_path());
  ASSERT_TRUE(src) << src.error().message;
  const SourceItem* item = nullptr;
  for (const auto& it : (*src)->items())
    if (it.name == GetParam().name) item = &it;
  ASSERT_NE(item, nullptr);
  ASSERT_EQ(item->kind, SourceItem::Kind::kGguf);
  auto e = intq::encode_gguf(item->gguf_info, item->bytes, item->name);
  ASSERT_TRUE(e) << e.error().message;
  std::vector<intq::Encoded> encoded{std::move(*e)};
  const auto dir = testing::scratch_dir(std::string("gguf_types_") + GetParam().name);
  auto r = testing::write_and_open((dir / "out.epk").string(), encoded);
  ASSERT_TRUE(r) << r.error().message;
  const auto& entry = r->tensors().at(0);
  auto kind = intq::kind_of(*r, entry);
  ASSERT_TRUE(kind);
  EXPECT_EQ(*kind, intq::Kind::kGguf);
  std::vector<float> got(entry.element_count());
  auto st = intq::dequantize_intq(*r, entry, DType::kF32,
                                  std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(got.data()), got.size() * 4));
  ASSERT_TRUE(st) << st.error().message;
  auto f = gguf::File::open(types_path());
  ASSERT_TRUE(f);
  const auto want = ref_values(*f, *f->find_tensor(GetParam().name));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  auto fp = intq::footprint_of_entry(*r, entry);
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->code_bytes + fp->scale_bytes + fp->zero_bytes + fp->index_bytes, item->bytes.size());
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Reference, GgufTypes,
                         ::testing::Values(Case{"q5_0", gguf::GgmlType::kQ5_0}, Case{"q5_1", gguf::GgmlType::kQ5_1},
                                           Case{"q5_0.rand", gguf::GgmlType::kQ5_0},
                                           Case{"q5_1.rand", gguf::GgmlType::kQ5_1},
                                           Case{"q2_k", gguf::GgmlType::kQ2_K}, Case{"q3_k", gguf::GgmlType::kQ3_K},
                                           Case{"iq4_nl", gguf::GgmlType::kIQ4_NL},
                                           Case{"iq4_xs", gguf::GgmlType::kIQ4_XS}),
                         [](const auto& param_info) {
                           std::string n = param_info.param.name;
                           for (auto& c : n)
                             if (c == '.') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace epk::layouts
