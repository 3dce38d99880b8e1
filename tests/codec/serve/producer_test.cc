// codec/serve/producer.h: which producer each encoding gets and the layouts it serves; every served layout produced
// into a slot of exactly its size; every shard of every served layout equal to the same shard cut out of the whole
// tensor's bytes (shard_slice.h's reference); refusals naming the tensor and the reason.
#include "codec/serve/producer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/serve/intq_producer.h"
#include "codec/serve/lattice_rans_producer.h"
#include "codec/serve/shard_slice.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/codec/serve/serve_test_files.h"
#include "tests/support/bytes.h"
#include "tests/support/scratch_dir.h"

namespace epk::serve {
namespace {

namespace fs = std::filesystem;
using test::bytes_of;

constexpr std::uint32_t kRows = 37, kCols = 203;  // a partial tile, padded columns, rows no world divides

constexpr LayoutSet kDense = layout_bit(Layout::kStored) | layout_bit(Layout::kDenseBF16) |
                             layout_bit(Layout::kDenseF16) | layout_bit(Layout::kDenseF32);
constexpr LayoutSet kRowwise = layout_bit(Layout::kRowwiseI8) | layout_bit(Layout::kRowwiseF8E4M3);
constexpr LayoutSet kPacked = layout_bit(Layout::kGptq) | layout_bit(Layout::kGptqV2) | layout_bit(Layout::kAwq) |
                              layout_bit(Layout::kMarlin);

class ProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::test_scratch_dir("epk_producer");
    path_ = (dir_ / "m.epk").string();
    auto writer = container::Writer::create(path_, {{"source", "producer_test"}});
    ASSERT_TRUE(writer) << writer.error().to_string();
    ASSERT_TRUE(testing::add_lattice(*writer, "lattice", kRows, kCols, 5));
    std::vector<float> raw(std::size_t{6} * 7);
    for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = 0.5f * static_cast<float>(i) - 3.0f;
    ASSERT_TRUE(writer->add_tensor({"raw", {6, 7}, DType::kF32, container::Encoding::kRaw, "{}"},
                                   {{"data", bytes_of(raw)}}));
    std::vector<std::int32_t> ids = {1, -2, 3};
    ASSERT_TRUE(writer->add_tensor({"ids", {3}, DType::kI32, container::Encoding::kRaw, "{}"},
                                   {{"data", bytes_of(ids)}}));
    // 4-bit symmetric static groups: every packed layout takes it.
    const layouts::QuantTensor q = layouts::testing::random_intq_tensor(4, 256, 64, 64, true, false, false, 9);
    auto e = layouts::intq::encode_int(q, "intq", DType::kBF16, "gptq", layouts::intq::CodeForm::kPacked);
    ASSERT_TRUE(e) << e.error().to_string();
    ASSERT_TRUE(writer->add_tensor(e->spec, e->buffers()));
    ASSERT_TRUE(writer->finish());
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r) << r.error().to_string();
    reader_ = std::move(*r);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Producer> make(const std::string& name) {
    const container::TensorEntry* e = reader_.find(name);
    EXPECT_NE(e, nullptr) << name;
    auto p = make_producer(reader_, *e, path_);
    EXPECT_TRUE(p) << p.error().to_string();
    return p ? std::move(*p) : nullptr;
  }

  fs::path dir_;
  std::string path_;
  container::Reader reader_;
};

TEST_F(ProducerTest, EachEncodingGetsItsProducerAndItsLayouts) {
  auto lattice = make("lattice"), raw = make("raw"), ids = make("ids"), intq = make("intq");
  ASSERT_TRUE(lattice && raw && ids && intq);
  EXPECT_NE(lattice->lattice_rans(), nullptr);
  EXPECT_EQ(lattice->intq(), nullptr);
  EXPECT_EQ(lattice->layouts(), kDense | kRowwise);
  EXPECT_EQ(raw->lattice_rans(), nullptr);
  EXPECT_EQ(raw->intq(), nullptr);
  EXPECT_EQ(raw->layouts(), kDense);
  EXPECT_EQ(ids->layouts(), layout_bit(Layout::kStored));  // integers convert to no float layout
  ASSERT_NE(intq->intq(), nullptr);
  ASSERT_NE(intq->intq()->header(), nullptr);
  EXPECT_EQ(intq->layouts(), kDense | kPacked);
  EXPECT_EQ(lattice->lattice_rans()->source_dtype(), DType::kF32);
  EXPECT_EQ(lattice->lattice_rans()->stream().rows, kRows);
}

TEST_F(ProducerTest, EveryServedLayoutFillsExactlyItsSlot) {
  for (const char* name : {"lattice", "raw", "ids", "intq"}) {
    auto p = make(name);
    ASSERT_TRUE(p);
    for (std::uint32_t code = 0; code < kLayoutCount; ++code) {
      const auto l = static_cast<Layout>(code);
      if (!p->serves(l)) continue;
      auto slot = p->slot(l);
      ASSERT_TRUE(slot) << name << " " << layout_name(l);
      std::vector<std::uint8_t> out(slot->bytes, 0xA5);
      ASSERT_TRUE(p->produce(l, out)) << name << " " << layout_name(l);
      std::vector<std::uint8_t> again(slot->bytes, 0x5A);  // a different fill: no byte is left unwritten
      ASSERT_TRUE(p->produce(l, again));
      EXPECT_EQ(out, again) << name << " " << layout_name(l);
    }
  }
}

TEST_F(ProducerTest, ShardsEqualTheSameCutOfTheWholeTensor) {
  for (const char* name : {"lattice", "raw", "intq"}) {
    auto p = make(name);
    ASSERT_TRUE(p);
    const auto& shape = p->entry().shape;
    for (Layout l : {Layout::kStored, Layout::kDenseBF16, Layout::kDenseF16, Layout::kRowwiseI8,
                     Layout::kRowwiseF8E4M3}) {
      if (!p->serves(l)) continue;
      auto whole = p->slot(l);
      ASSERT_TRUE(whole);
      std::vector<std::uint8_t> all(whole->bytes);
      ASSERT_TRUE(p->produce(l, all));
      for (ShardDim dim : {ShardDim::kRows, ShardDim::kCols}) {
        for (std::uint64_t world : {2u, 3u}) {
          for (std::uint64_t rank = 0; rank < world; ++rank) {
            auto range = resolve_shard(ShardSpec::split(dim, rank, world), shape, name);
            ASSERT_TRUE(range) << range.error().to_string();
            auto slot = p->shard_slot(l, *range);
            ASSERT_TRUE(slot) << name << " " << layout_name(l) << " " << describe(*range);
            std::vector<std::uint8_t> got(slot->bytes, 0xA5), want(slot->bytes, 0x5A);
            ASSERT_TRUE(p->produce_shard(l, *range, got)) << name << " " << describe(*range);
            ASSERT_TRUE(slice_served(*whole, l, *range, all, want));
            EXPECT_EQ(got, want) << name << " " << layout_name(l) << " " << describe(*range);
          }
        }
      }
    }
  }
}

TEST_F(ProducerTest, RefusalsNameTheTensorAndTheReason) {
  auto raw = make("raw"), lattice = make("lattice");
  ASSERT_TRUE(raw && lattice);
  auto packed = raw->slot(Layout::kGptq);
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(packed.error().message.find("tensor 'raw'"), std::string::npos) << packed.error().message;
  EXPECT_NE(packed.error().message.find("served only from intq tensors of kind int"), std::string::npos);
  EXPECT_NE(packed.error().message.find("not raw"), std::string::npos) << packed.error().message;
  auto rowwise = raw->slot(Layout::kRowwiseI8);
  ASSERT_FALSE(rowwise);
  EXPECT_NE(rowwise.error().message.find("layout rowwise:int8 is not served for raw F32"), std::string::npos)
      << rowwise.error().message;
  auto lattice_packed = lattice->slot(Layout::kMarlin);
  ASSERT_FALSE(lattice_packed);
  EXPECT_NE(lattice_packed.error().message.find("not lattice-rans"), std::string::npos)
      << lattice_packed.error().message;
  std::vector<std::uint8_t> out(3);
  EXPECT_FALSE(raw->produce(Layout::kAwq, out));
}

}  // namespace
}  // namespace epk::serve
