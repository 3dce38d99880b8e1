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

class ClientDecodeGpu : public DeviceModelTest {};

// ptr: an integer, as StoredTier::Job's out_dev.
std::vector<std::uint8_t> device_bytes(std::uint64_t ptr, std::uint64_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  EXPECT_TRUE(shm::copy_from_device(out.data(), DeviceAddress(ptr), bytes, 0));
  return out;
}

TEST_F(ClientDecodeGpu, EveryLayoutIsTheDaemonsBytesInOneBatch) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0"}, "16");
  auto c = gpu.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  auto tier = StoredTier::open(*c, "m", 0);
  ASSERT_TRUE(tier) << tier.error().to_string();
  EXPECT_GT((*tier)->tier_bytes(), 0u);
  EXPECT_TRUE((*tier)->holds("w0"));
  EXPECT_FALSE((*tier)->holds("norm"));  // raw: acquired from epkd
  auto raw = (*tier)->decoded_bytes("norm", Layout::kDenseF32);
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ((*tier)->decoded_bytes("nope", Layout::kDenseF32).error().code, ErrorCode::kNotFound);
  const std::vector<std::string> names = {"w0", "w1", "w2", "w4"};  // odd 129x67 first, then three rates
  int compared = 0;
  for (Layout l : {Layout::kStored, Layout::kDenseBF16, Layout::kDenseF16, Layout::kDenseF32, Layout::kRowwiseI8,
                   Layout::kRowwiseF8E4M3}) {
    // One batch for all four tensors, into one buffer: the way epk.torch decodes a block.
    std::vector<StoredTier::Job> jobs;
    std::vector<std::uint64_t> at, bytes;
    std::uint64_t total = 0;
    for (const std::string& n : names) {
      auto b = (*tier)->decoded_bytes(n, l);
      ASSERT_TRUE(b) << n << " " << shm::layout_name(l) << ": " << b.error().to_string();
      at.push_back(total);
      bytes.push_back(*b);
      total += (*b + 255) / 256 * 256;
    }
    auto out = shm::DeviceBuffer::alloc(total, 0);
    ASSERT_TRUE(out) << out.error().to_string();
    // Stale bytes in the buffer: the decode (rowwise padding included) must overwrite every byte it serves.
    ASSERT_TRUE(shm::fill_device_async(out->address(), 0xA5, total, nullptr, 0));
    for (std::size_t i = 0; i < names.size(); ++i) jobs.push_back({names[i], l, out->ptr() + at[i]});
    auto batch = (*tier)->plan(jobs);
    ASSERT_TRUE(batch) << batch.error().to_string();
    EXPECT_GT((*batch)->scratch_bytes(), 0u);
    for (int round = 0; round < 2; ++round) {  // a plan runs again and again
      ASSERT_TRUE((*batch)->enqueue(nullptr));
      Status st = (*batch)->check(nullptr);
      ASSERT_TRUE(st) << st.error().to_string();
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto t = c->acquire("m", names[i], l);
      ASSERT_TRUE(t) << t.error().to_string();
      ASSERT_EQ(t->bytes, bytes[i]) << names[i] << " " << shm::layout_name(l);
      auto want = host_bytes(*c, *t);
      auto got = device_bytes(out->ptr() + at[i], bytes[i]);
      EXPECT_EQ(got, want) << names[i] << " " << shm::layout_name(l);
      EXPECT_TRUE(c->release_after(t->handle, nullptr));
      ++compared;
    }
  }
  EXPECT_EQ(compared, 24);
  // The tier outlives the connection it came from.
  c->disconnect();
  auto out = shm::DeviceBuffer::alloc(129 * 67 * 4, 0);
  ASSERT_TRUE(out);
  std::vector<StoredTier::Job> one = {{"w0", Layout::kDenseF32, out->ptr()}};
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
  std::vector<StoredTier::Job> misaligned = {{"w1", Layout::kDenseBF16, out->ptr() + 8}};
  auto b = (*tier)->plan(misaligned);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(b.error().message.find("'w1'"), std::string::npos) << b.error().message;
  std::vector<StoredTier::Job> packed = {{"w1", Layout::kGptq, out->ptr()}};
  b = (*tier)->plan(packed);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kUnsupported);
  EXPECT_FALSE((*tier)->plan({}));
  // A device epkd does not serve.
  auto none = StoredTier::open(*c, "m", 7);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
}

TEST_F(ClientDecodeGpu, WithoutTheDeviceTierThereIsNothingToMap) {
  DevEpkd gpu({"--model", "m=" + path_, "--devices", "0", "--no-device-resident"}, "16");
  auto c = gpu.connect();
  ASSERT_TRUE(c);
  auto tier = StoredTier::open(*c, "m", 0);
  ASSERT_FALSE(tier);
  EXPECT_EQ(tier.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(tier.error().message.find("no compressed tier"), std::string::npos) << tier.error().message;
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
  EXPECT_EQ(device_bytes(out->ptr(), bytes), want);
  EXPECT_EQ(epk_release(c, t.handle), EPK_OK);
  epk_batch_free(b);
  epk_stored_close(s);
  epk_disconnect(c);
}

}  // namespace
}  // namespace epk
