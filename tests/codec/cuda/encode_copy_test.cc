// cuda::StagedCopier against plain cudaMemcpy: uploads and downloads at every alignment and size around its chunk
// (one slot, two, a partial last chunk, many) and around the size where its team of copy threads takes over, from
// a read-only file mapping's neighbouring ranges (what `epk compress` uploads from) and to and from memory the
// caller pinned, and rows gathered from scattered places. Every byte is compared, no byte outside the destination
// is written, the host memory is left as registered as it was and no CUDA error is left behind. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/common/mapped_file.h"
#include "codec/cuda/encode/encode_copy.h"
#include "tests/codec/cuda/device_buffer.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

constexpr std::size_t kChunk = cuda::StagedCopier::kChunk;
constexpr std::size_t kTeam = cuda::StagedCopier::kTeamMinBytes;

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = std::uint8_t(r >> (8 * k));
  }
  return v;
}

// The first index where the device's n bytes differ from src, or n.
std::size_t first_difference(const void* device, const std::uint8_t* src, std::size_t n) {
  std::vector<std::uint8_t> back(n);
  EPK_CUDA_CHECK(cudaMemcpy(back.data(), device, n, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i)
    if (back[i] != src[i]) return i;
  return n;
}

bool registered(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  cudaGetLastError();
  return e == cudaSuccess && a.type == cudaMemoryTypeHost;
}

class StagedCopierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    EPK_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  // Uploads src[0, n) and checks every byte, the source left unregistered and no error pending.
  void expect_upload(cuda::StagedCopier& copier, const std::uint8_t* src, std::size_t n, const std::string& what) {
    testing::DeviceBuffer dev(n);
    ASSERT_EQ(copier.to_device(dev.get(), src, n, stream_), cudaSuccess) << what;
    EXPECT_EQ(first_difference(dev.get(), src, n), n) << what;
    EXPECT_FALSE(registered(src + n / 2)) << what;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
  }
  cudaStream_t stream_ = nullptr;
};

TEST_F(StagedCopierTest, UploadsEveryAlignmentAndSizeAroundTheChunk) {
  const auto host = random_bytes(9 * kChunk + 3 * 4096, 1);
  cuda::StagedCopier copier;
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097}})
    for (std::size_t n : {std::size_t{1}, kTeam - 1, kTeam, kChunk - 1, kChunk, kChunk + 1, 2 * kChunk + 4097,
                          3 * kChunk + 123, 9 * kChunk - 4095})
      expect_upload(copier, host.data() + offset, n, "offset " + std::to_string(offset) + " size " + std::to_string(n));
}

TEST_F(StagedCopierTest, UploadsFromAReadOnlyFileMapping) {
  const std::string path = test::test_scratch_file("staged_copier", ".bin");
  const auto bytes = random_bytes(2 * kChunk + 12345, 2);
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped) << mapped.error().message;
  cuda::StagedCopier copier;
  // Two neighbouring ranges sharing a page, as adjacent tensors of one safetensors file do.
  const std::size_t split = kChunk + 777;
  expect_upload(copier, mapped->data() + 3, split - 3, "first range");
  expect_upload(copier, mapped->data() + split, bytes.size() - split, "second range");
  std::remove(path.c_str());
}

TEST_F(StagedCopierTest, UploadsFromMemoryTheCallerPinned) {
  void* pinned = nullptr;
  EPK_CUDA_CHECK(cudaMallocHost(&pinned, 2 * kChunk));
  const auto bytes = random_bytes(2 * kChunk, 3);
  std::memcpy(pinned, bytes.data(), bytes.size());
  cuda::StagedCopier copier;
  testing::DeviceBuffer dev(2 * kChunk - 5);
  const auto* src = static_cast<const std::uint8_t*>(pinned) + 5;
  ASSERT_EQ(copier.to_device(dev.get(), src, 2 * kChunk - 5, stream_), cudaSuccess);
  EXPECT_EQ(first_difference(dev.get(), src, 2 * kChunk - 5), 2 * kChunk - 5);
  EXPECT_TRUE(registered(pinned)) << "the caller's pinned memory stays pinned";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EPK_CUDA_CHECK(cudaFreeHost(pinned));
}

// Rows gathered to the device (the encoder's search sample): rows in any order, repeated, of odd sizes, the gather
// spanning chunks and rows straddling a chunk's end, with a team of all cores and one that leaves a core spare.
TEST_F(StagedCopierTest, GathersRowsInTheOrderGiven) {
  for (const int spare : {0, 1}) {
    cuda::StagedCopier copier(spare);
    for (const std::size_t row_bytes : {std::size_t{2}, std::size_t{7}, std::size_t{4096}, std::size_t{77777}}) {
      const std::size_t rows = std::max<std::size_t>(3, (2 * kChunk + 12345) / row_bytes);
      const auto host = random_bytes(rows * row_bytes, 7 + row_bytes);
      std::vector<std::uint32_t> pick;
      std::mt19937 gen{std::uint32_t(row_bytes)};
      const std::size_t count = row_bytes < 4096 ? 1000 : rows / 2 + 1;
      for (std::size_t i = 0; i < count; ++i) pick.push_back(std::uint32_t(gen() % rows));
      pick.push_back(std::uint32_t(rows - 1));
      pick.push_back(pick.front());
      std::vector<std::uint8_t> want;
      for (const std::uint32_t r : pick) want.insert(want.end(), host.begin() + std::ptrdiff_t(r * row_bytes),
                                                     host.begin() + std::ptrdiff_t((r + 1) * row_bytes));
      const std::string what = "row " + std::to_string(row_bytes) + " bytes, " + std::to_string(pick.size()) +
                               " rows, spare cores " + std::to_string(spare);
      testing::DeviceBuffer dev(want.size());
      ASSERT_EQ(copier.rows_to_device(dev.get(), host.data(), row_bytes, pick, stream_), cudaSuccess) << what;
      EXPECT_EQ(first_difference(dev.get(), want.data(), want.size()), want.size()) << what;
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
    }
  }
}

TEST_F(StagedCopierTest, DownloadsEveryAlignmentAndSizeAroundTheChunk) {
  cuda::StagedCopier copier;
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{4095}})
    for (std::size_t n : {std::size_t{1}, kTeam - 1, kTeam, kChunk - 1, kChunk, 2 * kChunk + 4097, 7 * kChunk + 9}) {
      const std::string what = "offset " + std::to_string(offset) + " size " + std::to_string(n);
      const auto bytes = random_bytes(n, 4 + n);
      testing::DeviceBuffer dev(n);
      EPK_CUDA_CHECK(cudaMemcpy(dev.get(), bytes.data(), n, cudaMemcpyHostToDevice));
      // Guard bytes either side: nothing outside [offset, offset + n) is written.
      std::vector<std::uint8_t> back(offset + n + 1, 0xA5);
      ASSERT_EQ(copier.to_host(back.data() + offset, dev.get(), n, stream_), cudaSuccess) << what;
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), back.begin() + std::ptrdiff_t(offset))) << what;
      EXPECT_TRUE(std::all_of(back.begin(), back.begin() + std::ptrdiff_t(offset), [](auto c) { return c == 0xA5; }))
          << what;
      EXPECT_EQ(back.back(), 0xA5) << what;
      EXPECT_FALSE(registered(back.data() + offset + n / 2)) << what;
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
    }
}

TEST_F(StagedCopierTest, DownloadsIntoMemoryTheCallerPinned) {
  void* pinned = nullptr;
  EPK_CUDA_CHECK(cudaMallocHost(&pinned, 2 * kChunk));
  const auto bytes = random_bytes(2 * kChunk - 7, 6);
  testing::DeviceBuffer dev = testing::DeviceBuffer::from_host(bytes.data(), bytes.size());
  cuda::StagedCopier copier;
  auto* dst = static_cast<std::uint8_t*>(pinned) + 7;
  ASSERT_EQ(copier.to_host(dst, dev.get(), bytes.size(), stream_), cudaSuccess);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), dst));
  EXPECT_TRUE(registered(pinned)) << "the caller's pinned memory stays pinned";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EPK_CUDA_CHECK(cudaFreeHost(pinned));
}

}  // namespace
}  // namespace epk
