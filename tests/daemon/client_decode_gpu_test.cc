// Client-side decode (client/stored_tier.h) against the real epkd on a CUDA device: the client maps epkd's compressed
// tier, reads the streams from the file epkd passes it, decodes in its own context, and gets bit for bit the bytes
// epkd serves for the same tensor and layout. Skips without a usable device (CI).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "client/client.h"
#include "client/epk.h"
#include "client/stored_tier.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"
#include "tests/daemon/epkd_device_harness.h"

namespace epk {
namespace {

using namespace epk::test_harness;  // NOLINT
using client::StoredTier;
using shm::Layout;

class ClientDecodeGpu : public DeviceModelTest {
 protected:
  static int compare_every_layout(client::Client& c, StoredTier& tier, bool staged);
};

std::vector<std::uint8_t> device_bytes(DeviceAddress at, std::uint64_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  EXPECT_TRUE(shm::copy_from_device(out.data(), at, bytes, 0));
  return out;
}

// Every serving layout of four tensors, one batch per layout into one buffer (the way epk.torch decodes a block), run
// twice, against what epkd serves for the same tensor and layout; `staged`: the inputs copied from the host tier into
// a device buffer first (enqueue_copy). Returns how many tensors were compared.
int ClientDecodeGpu::compare_every_layout(client::Client& c, StoredTier& tier, bool staged) {
  const std::vector<std::string> names = {"w0", "w1", "w2", "w4"};  // odd 129x67 first, then three rates
  int compared = 0;
  for (Layout l : {Layout::kStored, Layout::kDenseBF16, Layout::kDenseF16, Layout::kDenseF32, Layout::kRowwiseI8,
                   Layout::kRowwiseF8E4M3}) {
    std::vector<StoredTier::Job> jobs;
    std::vector<std::uint64_t> at, bytes, in_at;
    std::uint64_t total = 0, in_total = 0;
    for (const std::string& n : names) {
      auto b = tier.decoded_bytes(n, l);
      EXPECT_TRUE(b) << n << " " << shm::layout_name(l) << ": " << b.error().to_string();
      if (!b) return compared;
      at.push_back(total);
      bytes.push_back(*b);
      total += (*b + 255) / 256 * 256;
      auto span = tier.span(n);
      EXPECT_TRUE(span);
      if (!span) return compared;
      in_at.push_back(in_total);
      in_total += (span->bytes + 255) / 256 * 256;
    }
    auto out = shm::DeviceBuffer::alloc(total, 0);
    auto inputs = shm::DeviceBuffer::alloc(in_total, 0);
    EXPECT_TRUE(out && inputs);
    if (!out || !inputs) return compared;
    // Stale bytes in the buffers: the decode (rowwise padding included) must overwrite every byte it serves, and a
    // staged decode must read only what its copy wrote.
    EXPECT_TRUE(shm::fill_device_async(out->address(), 0xA5, total, nullptr, 0));
    EXPECT_TRUE(shm::fill_device_async(inputs->address(), 0x5A, in_total, nullptr, 0));
    for (std::size_t i = 0; i < names.size(); ++i) {
      jobs.push_back({names[i], l, out->address() + at[i], staged ? inputs->address() + in_at[i] : DeviceAddress()});
    }
    auto batch = tier.plan(jobs);
    EXPECT_TRUE(batch) << batch.error().to_string();
    if (!batch) return compared;
    EXPECT_GT((*batch)->scratch_bytes(), 0u);
    for (int round = 0; round < 2; ++round) {  // a plan runs again and again
      EXPECT_TRUE((*batch)->enqueue_copy(nullptr));
      EXPECT_TRUE((*batch)->enqueue(nullptr));
      Status st = (*batch)->check(nullptr);
      EXPECT_TRUE(st) << st.error().to_string();
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto t = c.acquire("m", names[i], l);
      EXPECT_TRUE(t) << t.error().to_string();
      if (!t) return compared;
      EXPECT_EQ(t->bytes, bytes[i]) << names[i] << " " << shm::layout_name(l);
      auto want = host_bytes(c, *t);
      auto got = device_bytes(out->address() + at[i], bytes[i]);
      EXPECT_EQ(got, want) << names[i] << " " << shm::layout_name(l) << (staged ? " staged" : "");
      EXPECT_TRUE(c.release_after(t->handle, nullptr));
      ++compared;
    }
  }
  return compared;
}

TEST_F(ClientDecodeGpu, EveryLayoutIsTheDaemonsBytesInOneBatch) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0"}, "16");
  auto c = gpu.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto tier = StoredTier::open(*c, "m", 0);
  ASSERT_TRUE(tier) << tier.error().to_string();
  EXPECT_GT((*tier)->tier_bytes(), 0u);
  EXPECT_FALSE((*tier)->host_tier());
  EXPECT_TRUE((*tier)->holds("w0"));
  EXPECT_FALSE((*tier)->holds("norm"));  // raw: acquired from epkd
  auto raw = (*tier)->decoded_bytes("norm", Layout::kDenseF32);
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ((*tier)->decoded_bytes("nope", Layout::kDenseF32).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(compare_every_layout(*c, **tier, false), 24);
  // Staged inputs need a host tier: epkd's device tier is read where it is.
  auto out = shm::DeviceBuffer::alloc(129 * 67 * 4, 0);
  ASSERT_TRUE(out);
  std::vector<StoredTier::Job> staged = {{"w0", Layout::kDenseF32, out->address(), out->address()}};
  auto refused = (*tier)->plan(staged);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  // The tier outlives the connection it came from.
  c->disconnect();
  std::vector<StoredTier::Job> one = {{"w0", Layout::kDenseF32, out->address()}};
  auto batch = (*tier)->plan(one);
  ASSERT_TRUE(batch) << batch.error().to_string();
  ASSERT_TRUE((*batch)->enqueue(nullptr));
  EXPECT_TRUE((*batch)->check(nullptr));
}

TEST_F(ClientDecodeGpu, BadJobsAreRefusedByName) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0"}, "16");
  auto c = gpu.connect();
  ASSERT_TRUE(c);
  auto tier = StoredTier::open(*c, "m", 0);
  ASSERT_TRUE(tier) << tier.error().to_string();
  auto out = shm::DeviceBuffer::alloc(1 << 20, 0);
  ASSERT_TRUE(out);
  std::vector<StoredTier::Job> misaligned = {{"w1", Layout::kDenseBF16, out->address() + 8}};
  auto b = (*tier)->plan(misaligned);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(b.error().message.find("'w1'"), std::string::npos) << b.error().message;
  std::vector<StoredTier::Job> packed = {{"w1", Layout::kGptq, out->address()}};
  b = (*tier)->plan(packed);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kUnsupported);
  EXPECT_FALSE((*tier)->plan({}));
  // A device epkd does not serve.
  auto none = StoredTier::open(*c, "m", 7);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
}

// tier_budget_mb = 0: epkd's host tier (a sealed memfd) mapped here read-only; decodes from it read it in place or
// from staged copies, and give epkd's bytes (epkd decodes from the same host tier, staged, on the GPU).
TEST_F(ClientDecodeGpu, FromEpkdsHostTierTheClientDecodesTheSameBytes) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0", "--tier-budget-mb", "0"}, "16");
  auto c = gpu.connect();
  ASSERT_TRUE(c);
  auto tier = StoredTier::open(*c, "m", 0);
  ASSERT_TRUE(tier) << tier.error().to_string();
  EXPECT_TRUE((*tier)->host_tier());
  EXPECT_GT((*tier)->tier_bytes(), 0u);
  std::printf("host tier shared (registered read-only): %s\n", (*tier)->host_tier_shared() ? "yes" : "no (copy)");
  // In place over PCIe, then from staged copies.
  EXPECT_EQ(compare_every_layout(*c, **tier, false), 24);
  EXPECT_EQ(compare_every_layout(*c, **tier, true), 24);
  auto out = shm::DeviceBuffer::alloc(129 * 67 * 4, 0);
  ASSERT_TRUE(out);
  std::vector<StoredTier::Job> unaligned = {{"w0", Layout::kDenseF32, out->address(), out->address() + 16}};
  auto refused = (*tier)->plan(unaligned);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(ClientDecodeGpu, TheCApiDecodesTheSameBytes) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0"}, "16");
  ASSERT_TRUE(gpu.running());
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(gpu.socket().c_str(), &c), EPK_OK) << epk_last_error();
  epk_stored* s = nullptr;
  ASSERT_EQ(epk_stored_open(c, "m", 0, &s), EPK_OK) << epk_last_error();
  std::uint64_t bytes = 0;
  ASSERT_EQ(epk_stored_decoded_bytes(s, "w3", "dense:bf16", &bytes), EPK_OK) << epk_last_error();
  EXPECT_EQ(bytes, 384u * 320 * 2);
  std::uint64_t dims[8];
  std::uint32_t ndim = 0;
  ASSERT_EQ(epk_stored_shape(s, "w3", dims, 8, &ndim), EPK_OK) << epk_last_error();
  ASSERT_EQ(ndim, 2u);
  EXPECT_EQ(dims[0], 384u);
  EXPECT_EQ(dims[1], 320u);
  auto out = shm::DeviceBuffer::alloc(bytes, 0);
  ASSERT_TRUE(out);
  epk_decode_job job{"w3", "dense:bf16", out->address().as<void>()};
  epk_batch* b = nullptr;
  ASSERT_EQ(epk_batch_create(s, &job, 1, &b), EPK_OK) << epk_last_error();
  ASSERT_EQ(epk_batch_enqueue(b, nullptr), EPK_OK) << epk_last_error();
  ASSERT_EQ(epk_batch_check(b, nullptr), EPK_OK) << epk_last_error();
  epk_tensor t;
  ASSERT_EQ(epk_acquire(c, "m", "w3", "dense:bf16", &t), EPK_OK) << epk_last_error();
  std::vector<std::uint8_t> want(t.bytes);
  ASSERT_EQ(epk_copy_to_host(c, &t, want.data()), EPK_OK) << epk_last_error();
  EXPECT_EQ(device_bytes(out->address(), bytes), want);
  EXPECT_EQ(epk_release(c, t.handle), EPK_OK);
  epk_batch_free(b);
  epk_stored_close(s);
  epk_disconnect(c);
}

}  // namespace
}  // namespace epk
