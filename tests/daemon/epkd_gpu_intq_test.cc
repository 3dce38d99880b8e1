// The real epkd on a CUDA device: intq "int" tensors served by the device kernels (codec/serve/intq_device_form.h)
// against a --cpu epkd's bytes, and a refused packed layout that uploads nothing. Every test skips without a usable
// device (CI); they compile everywhere.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "codec/common/half.h"
#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "shm/cuda_event.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/daemon/epkd_device_harness.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT

// Every serving layout of intq "int" tensors, fetched from the device pool and from a --cpu epkd, byte for byte, for
// plain, asymmetric, act-order (g_idx), permuted, rANS-coded and odd-sized tensors; both fail together where the
// layout cannot hold a tensor. The model is written before the device check, so the
// cases themselves are checked on machines without a GPU too.
struct IntqCase {
  std::string name;
  layouts::QuantTensor t;
  DType dense = DType::kBF16;  // the index dtype: what "stored" dequantizes to
  layouts::intq::CodeForm form = layouts::intq::CodeForm::kPacked;
};

std::vector<IntqCase> intq_cases() {
  using layouts::testing::random_intq_tensor;
  auto no_zero_zeros = [](layouts::QuantTensor& t) {
    for (auto& z : t.zeros) z = z == 0 ? 1 : z;
  };
  std::vector<IntqCase> c;
  layouts::QuantTensor zero0 = random_intq_tensor(4, 200, 77, 64, false, false, false, 31);  // odd N, K % G != 0
  zero0.zeros[3] = 0;  // gptq (v1) refuses it on both paths
  c.push_back({"asym4_zero0", zero0});
  layouts::QuantTensor asym = random_intq_tensor(4, 128, 72, 32, false, false, false, 32);
  no_zero_zeros(asym);
  c.push_back({"asym4", asym});
  c.push_back({"sym4_f16", random_intq_tensor(4, 256, 128, 128, true, false, false, 33), DType::kF16});
  c.push_back({"act4", random_intq_tensor(4, 256, 64, 64, true, true, false, 34)});
  c.push_back({"perm8", random_intq_tensor(8, 96, 64, 32, true, false, true, 35)});
  layouts::QuantTensor q3 = random_intq_tensor(3, 100, 50, 25, false, false, false, 36);
  no_zero_zeros(q3);
  c.push_back({"asym3_odd", q3});
  c.push_back({"rans_act4", random_intq_tensor(4, 192, 80, 64, true, true, false, 37), DType::kBF16,
               layouts::intq::CodeForm::kRans});
  c.push_back({"actperm4_odd", random_intq_tensor(4, 200, 100, 50, true, true, true, 38)});  // Marlin pads both
  layouts::QuantTensor bf = random_intq_tensor(4, 136, 96, 32, false, false, false, 39);
  no_zero_zeros(bf);
  bf.scale_dtype = DType::kBF16;
  for (auto& s : bf.scales) s = bf16_to_f32(f32_to_bf16(s));
  c.push_back({"asym4_bf16_scales", bf});
  layouts::QuantTensor f32 = random_intq_tensor(4, 64, 64, 32, true, false, false, 40);
  f32.scale_dtype = DType::kF32;  // packed layouts: the CPU path (the kernels write bf16/fp16 scales)
  c.push_back({"sym4_f32", f32, DType::kF32});
  return c;
}

class EpkdGpuIntq : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("epkd_gpu_intq");
    path_ = (dir_ / "q.epk").string();
    cases_ = intq_cases();
    auto w = container::Writer::create(path_, {{"source", "epkd_gpu_test intq"}});
    ASSERT_TRUE(w) << w.error().to_string();
    for (const IntqCase& c : cases_) {
      auto e = layouts::intq::encode_int(c.t, c.name, c.dense, "gptq", c.form);
      ASSERT_TRUE(e) << c.name << ": " << e.error().to_string();
      ASSERT_TRUE(w->add_tensor(e->spec, e->buffers())) << c.name;
    }
    ASSERT_TRUE(w->finish());
    if (!shm::cuda_device_available(0)) GTEST_SKIP() << "no CUDA device (or driver): the device path is not tested";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string path_;
  std::vector<IntqCase> cases_;
};

// Every layout of every case from the device epkd started with `device_args` against the --cpu epkd's bytes; the
// slots the kernels wrote counted as epkd's exit line says.
void every_layout_is_the_cpu_paths(const std::vector<IntqCase>& cases, const std::string& path,
                                   std::vector<std::string> device_args, bool staged) {
  device_args.insert(device_args.end(), {"--model", "q=" + path, "--devices", "0"});
  DeviceAndHost both(device_args, "q=" + path, "64");
  ASSERT_TRUE(both.connect());
  std::optional<Client>& g = both.on_device;
  std::optional<Client>& h = both.on_host;
  using shm::Layout;
  int compared = 0, by_kernels = 0, packed = 0;
  for (const IntqCase& c : cases) {
    for (Layout l : {Layout::kStored, Layout::kDenseBF16, Layout::kDenseF16, Layout::kDenseF32, Layout::kGptq,
                     Layout::kGptqV2, Layout::kAwq, Layout::kMarlin}) {
      const std::string what = c.name + " " + std::string(shm::layout_name(l));
      auto ht = h->acquire("q", c.name, l);
      auto gt = g->acquire("q", c.name, l);
      // A device lane may answer before its slot is written (early replies): a failed produce shows in wait().
      const bool g_ok = gt && static_cast<bool>(g->wait(*gt, nullptr));
      ASSERT_EQ(static_cast<bool>(ht), g_ok) << what << ": " << (ht ? "" : ht.error().to_string());
      if (!ht) {
        if (gt) (void)g->release(gt->handle);
        continue;
      }
      EXPECT_TRUE(gt->on_device) << what;
      EXPECT_EQ(gt->dtype, ht->dtype) << what;
      EXPECT_EQ(gt->shape, ht->shape) << what;
      ASSERT_EQ(gt->bytes, ht->bytes) << what;
      std::vector<std::uint8_t> got(gt->bytes);
      ASSERT_TRUE(g->copy_to_host(*gt, got.data())) << what;
      std::size_t first_diff = 0;
      while (first_diff < ht->bytes && got[first_diff] == static_cast<const std::uint8_t*>(ht->data)[first_diff]) {
        ++first_diff;
      }
      EXPECT_EQ(first_diff, ht->bytes) << what << ": first differing byte of " << ht->bytes;
      ++compared;
      packed += shm::is_packed_int(l) ? 1 : 0;
      // What the kernels write (codec/serve/intq_device_form.h): bf16/fp16 dense, and packed layouts with bf16/fp16 scales except a GPTQ
      // v1 zero point of 0 (refused above on both paths).
      const bool dense16 = l == Layout::kDenseBF16 || l == Layout::kDenseF16 ||
                           (l == Layout::kStored && (c.dense == DType::kBF16 || c.dense == DType::kF16));
      by_kernels += (dense16 || (shm::is_packed_int(l) && c.t.scale_dtype != DType::kF32)) ? 1 : 0;
      EXPECT_TRUE(h->release(ht->handle));
      EXPECT_TRUE(g->release(gt->handle));
    }
  }
  EXPECT_GE(packed, 20);
  EXPECT_GE(compared, 50);
  // Forms in host memory: copied to the device at each slot they wrote; none otherwise.
  auto st = g->stats();
  ASSERT_TRUE(st && !st->pools.empty());
  if (staged) {
    EXPECT_GT(st->pools[0].host_tier_bytes, 0u);
    EXPECT_GT(st->pools[0].staged_bytes, 0u);
  } else {
    EXPECT_EQ(st->pools[0].host_tier_bytes, 0u);
    EXPECT_EQ(st->pools[0].staged_bytes, 0u);
  }
  // The CPU path taken silently would pass the byte comparison: epkd's exit line says which path each slot took.
  ASSERT_EQ(both.device.terminate(), 0);
  std::string log = read_file(both.device.log_path());
  const std::string want = "intq slots: " + std::to_string(by_kernels) + " by the device kernels, " +
                           std::to_string(compared - by_kernels) + " by the CPU path";
  EXPECT_NE(log.find(want), std::string::npos) << "want \"" << want << "\" in epkd's log:\n" << log;
}

TEST_F(EpkdGpuIntq, EveryIntqLayoutFromTheDeviceKernelsIsTheCpuPathsBytes) {
  every_layout_is_the_cpu_paths(cases_, path_, {}, false);
}

// With a tier budget of 0 the forms are made in pinned host memory at each tensor's first decode and copied to the
// device before the kernels read them: the same kernels, the same bytes, nothing more on the CPU path.
TEST_F(EpkdGpuIntq, FromHostMemoryTheKernelsWriteTheSameBytes) {
  every_layout_is_the_cpu_paths(cases_, path_, {"--tier-budget-mb", "0"}, true);
}

// A packed layout the kernels refuse for a tensor (GPTQ v1 of a tensor with a zero point of 0: v1 cannot store it)
// goes to the CPU path, which refuses it too, without a padded copy uploaded first; a layout they take with the same
// padding (GPTQ v2: 200 x 77 padded to 200 x 80, the stored variant being 200 x 77) adds one. epkd's resident bytes
// (stats) say which.
TEST_F(EpkdGpuIntq, ARefusedPackedLayoutUploadsNoPaddedCopy) {
  DeviceAndHost both({"--model", "q=" + path_, "--devices", "0"}, "q=" + path_, "64");
  ASSERT_TRUE(both.connect());
  std::optional<Client>& g = both.on_device;
  auto resident = [&]() -> std::uint64_t {
    auto st = g->stats();
    EXPECT_TRUE(st) << (st ? "" : st.error().to_string());
    return st ? st->resident_bytes : 0;
  };
  const std::uint64_t at_open = resident();
  ASSERT_GT(at_open, 0u);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second refusal comes from the device form's memory of the first
    auto v1 = g->acquire("q", "asym4_zero0", shm::Layout::kGptq);
    const bool v1_ok = v1 && static_cast<bool>(g->wait(*v1, nullptr));
    EXPECT_FALSE(v1_ok) << "GPTQ v1 cannot store a zero point of 0 (attempt " << attempt << ")";
    if (v1) (void)g->release(v1->handle);
    EXPECT_EQ(resident(), at_open) << "a refused layout uploaded a padded copy (attempt " << attempt << ")";
  }
  auto v2 = g->acquire("q", "asym4_zero0", shm::Layout::kGptqV2);
  ASSERT_TRUE(v2) << v2.error().to_string();
  ASSERT_TRUE(g->wait(*v2, nullptr));
  EXPECT_GT(resident(), at_open) << "GPTQ's padding of a 200 x 77 tensor is a variant of its own";
  EXPECT_TRUE(g->release(v2->handle));
}

}  // namespace
}  // namespace epk
