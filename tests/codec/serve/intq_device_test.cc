// codec/serve/intq_device.h: the kernels' padding is the slot's (packed_plan's geometry), the kernels never take a
// packed layout the CPU writers refuse for the tensor, they take the cases they cover, and the dense layouts they
// write are bf16 and fp16 only.
#include "codec/serve/intq_device.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "codec/serve/intq_producer.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/codec/serve/serve_test_files.h"

namespace epk::serve {
namespace {

namespace fs = std::filesystem;
using layouts::QuantTensor;
using layouts::testing::random_intq_tensor;

// Zero point 0, static groups, act-order groups, a row perm, 3-bit codes.
std::vector<std::pair<std::string, QuantTensor>> cases() {
  std::vector<std::pair<std::string, QuantTensor>> c;
  QuantTensor zero0 = random_intq_tensor(4, 200, 77, 64, false, false, false, 21);  // odd N, K % G != 0
  zero0.zeros[3] = 0;
  c.push_back({"asym4_zero0", zero0});
  c.push_back({"sym4", random_intq_tensor(4, 256, 128, 128, true, false, false, 22)});
  c.push_back({"act4", random_intq_tensor(4, 256, 64, 64, true, true, false, 23)});
  c.push_back({"perm8", random_intq_tensor(8, 96, 64, 32, true, false, true, 24)});
  QuantTensor q3 = random_intq_tensor(3, 100, 50, 25, false, false, false, 25);
  for (auto& z : q3.zeros) z = z == 0 ? 1 : z;
  c.push_back({"asym3", q3});
  return c;
}

class IntqDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = layouts::testing::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    path_ = (dir_ / "m.epk").string();
    ASSERT_TRUE(testing::write_intq_file(path_, cases()));
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r) << r.error().to_string();
    reader_ = std::move(*r);
    for (const container::TensorEntry& e : reader_.tensors()) {
      auto p = make_producer(reader_, e, path_);
      ASSERT_TRUE(p) << p.error().to_string();
      ASSERT_NE((*p)->intq(), nullptr);
      producers_.push_back(std::move(*p));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  const IntqProducer& producer(const std::string& name) const {
    for (const auto& p : producers_)
      if (p->entry().name == name) return *p->intq();
    ADD_FAILURE() << "no tensor " << name;
    return *producers_[0]->intq();
  }
  // Whether the kernels write `layout` of the tensor, as epkd's device path decides it (nullopt: no slot).
  std::optional<bool> kernels_write(const IntqProducer& p, Layout layout) const {
    auto plan = p.packed_plan(layout);
    if (!plan) return std::nullopt;
    auto q = p.read();
    EXPECT_TRUE(q) << q.error().to_string();
    EXPECT_TRUE(pad_for_layout(*q, layout));
    return intq_kernels_write(intq_kernel_traits(*q), layout, plan->geometry);
  }

  fs::path dir_;
  std::string path_;
  container::Reader reader_;
  std::vector<std::unique_ptr<Producer>> producers_;
};

constexpr Layout kPacked[] = {Layout::kGptq, Layout::kGptqV2, Layout::kAwq, Layout::kMarlin};

TEST_F(IntqDeviceTest, TheKernelsPaddingIsTheSlotsGeometry) {
  int planned = 0;
  for (const auto& pp : producers_) {
    const IntqProducer& p = *pp->intq();
    for (Layout l : kPacked) {
      auto plan = p.packed_plan(l);
      if (!plan) continue;
      ++planned;
      auto q = p.read();
      ASSERT_TRUE(q);
      ASSERT_TRUE(pad_for_layout(*q, l));
      EXPECT_EQ(static_cast<std::uint64_t>(q->padded_rows), plan->geometry.padded_rows)
          << p.entry().name << " " << layout_name(l);
      EXPECT_EQ(static_cast<std::uint64_t>(q->padded_cols), plan->geometry.padded_cols)
          << p.entry().name << " " << layout_name(l);
    }
  }
  EXPECT_GE(planned, 12);
}

TEST_F(IntqDeviceTest, TheKernelsNeverTakeALayoutTheCpuWritersRefuse) {
  int taken = 0;
  for (const auto& pp : producers_) {
    const IntqProducer& p = *pp->intq();
    for (Layout l : kPacked) {
      const std::optional<bool> kernels = kernels_write(p, l);
      if (!kernels || !*kernels) continue;
      ++taken;
      auto slot = p.slot(l);
      ASSERT_TRUE(slot);
      std::vector<std::uint8_t> out(slot->bytes);
      EXPECT_TRUE(p.produce(l, out)) << p.entry().name << " " << layout_name(l)
                                     << ": the kernels would serve what the CPU path refuses";
    }
  }
  EXPECT_GE(taken, 8);
}

TEST_F(IntqDeviceTest, TheCasesTheKernelsCoverAndTheOnesTheyLeave) {
  const IntqProducer& zero0 = producer("asym4_zero0");
  EXPECT_EQ(kernels_write(zero0, Layout::kGptq), false);  // v1 cannot store a zero point of 0: the CPU's refusal
  EXPECT_EQ(kernels_write(zero0, Layout::kGptqV2), true);
  std::vector<std::uint8_t> out(zero0.slot(Layout::kGptq)->bytes);
  EXPECT_FALSE(zero0.produce(Layout::kGptq, out));
  const IntqProducer& sym = producer("sym4");
  for (Layout l : kPacked) EXPECT_EQ(kernels_write(sym, l), true) << layout_name(l);
  const IntqProducer& act = producer("act4");
  EXPECT_EQ(kernels_write(act, Layout::kGptq), true);
  EXPECT_EQ(kernels_write(act, Layout::kMarlin), true);
  EXPECT_EQ(kernels_write(act, Layout::kAwq), std::nullopt);  // no slot: AWQ refuses act-order groups
  const IntqProducer& perm = producer("perm8");
  EXPECT_EQ(kernels_write(perm, Layout::kMarlin), true);
  EXPECT_EQ(kernels_write(perm, Layout::kGptqV2), true);
}

TEST(IntqKernelDense, Bf16AndFp16Only) {
  EXPECT_EQ(intq_kernel_dense(Layout::kDenseBF16, DType::kF32), DType::kBF16);
  EXPECT_EQ(intq_kernel_dense(Layout::kDenseF16, DType::kF32), DType::kF16);
  EXPECT_EQ(intq_kernel_dense(Layout::kStored, DType::kBF16), DType::kBF16);
  EXPECT_EQ(intq_kernel_dense(Layout::kStored, DType::kF16), DType::kF16);
  EXPECT_FALSE(intq_kernel_dense(Layout::kStored, DType::kF32));
  EXPECT_FALSE(intq_kernel_dense(Layout::kDenseF32, DType::kBF16));
  EXPECT_FALSE(intq_kernel_dense(Layout::kGptq, DType::kBF16));
}

}  // namespace
}  // namespace epk::serve
