// The io_uring section reader against its pread reference and the file's own bytes: odd ranges, many requests in
// flight, O_DIRECT and buffered pieces, short reads, a truncated file, a descriptor that is not open, an open file
// whose path was replaced.
#include "daemon/sources/section_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "shm/unique_fd.h"

namespace epk::daemon {
namespace {

// Files go beside the build (a disk filesystem: O_DIRECT works there; /tmp may be tmpfs).
std::filesystem::path test_dir() {
  auto d = std::filesystem::current_path() / ("section_reader_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

class SectionReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_dir();
    path_ = (dir_ / "data.bin").string();
    std::mt19937_64 rng(20261130);
    bytes_.resize(kFileSize);
    for (auto& b : bytes_) b = static_cast<std::uint8_t>(rng());
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
    auto r = SectionReader::create();
    if (!r) GTEST_SKIP() << r.error().to_string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Ranges of odd sizes at odd and aligned offsets, each placed in `arena` like the resident tier places sections
  // (4096-aligned, keeping the offset within the page), plus the same ranges for the reference buffer.
  struct Layout {
    std::vector<ReadRange> ranges;
    std::uint64_t bytes = 0;
  };
  static Layout odd_layout(std::uint64_t file_size, std::uint32_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    Layout l;
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint64_t size = 0, offset = 0;
      switch (i % 5) {
        case 0: size = 1 + rng() % 97; break;                                          // tiny
        case 1: size = 4096 * (1 + rng() % 300); offset = 4096 * (rng() % 400); break;  // aligned: O_DIRECT
        case 2: size = 4096 * (1 + rng() % 300) + 1 + rng() % 4095; offset = 4096 * (rng() % 400); break;  // + tail
        case 3: size = 1 + rng() % (3 << 20); break;                                    // large, odd
        default: size = 1 + rng() % 70000; break;
      }
      if (i % 5 != 1 && i % 5 != 2) offset = rng() % file_size;
      size = std::min(size, file_size - offset);
      if (size == 0) size = 1, offset = file_size - 1;
      const std::uint64_t at = (l.bytes + 4095) / 4096 * 4096 + offset % 4096;
      l.ranges.push_back({offset, size, reinterpret_cast<std::uint8_t*>(at)});  // relative; rebased by place()
      l.bytes = at + size;
    }
    return l;
  }
  static std::vector<ReadRange> place(const Layout& l, std::uint8_t* base) {
    std::vector<ReadRange> out = l.ranges;
    for (auto& r : out) r.dst = base + reinterpret_cast<std::uintptr_t>(r.dst);
    return out;
  }
  void expect_file_bytes(const std::vector<ReadRange>& ranges) {
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const ReadRange& r = ranges[i];
      ASSERT_TRUE(std::equal(r.dst, r.dst + r.size, bytes_.begin() + static_cast<std::ptrdiff_t>(r.offset)))
          << "range " << i << " [" << r.offset << ", +" << r.size << ")";
    }
  }

  // The reader's and the reference's reads of the file path_ names, open for the call.
  Result<ReadStats> read_file(SectionReader& reader, std::span<const ReadRange> ranges) const {
    shm::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return make_errno_error(path_ + ": open", errno);
    return reader.read(fd.get(), path_, ranges);
  }
  Status pread_file(std::span<const ReadRange> ranges) const {
    shm::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return make_errno_error(path_ + ": open", errno);
    return pread_ranges(fd.get(), path_, ranges);
  }

  static constexpr std::uint64_t kFileSize = (5 << 20) + 4095 + 17;  // odd: the last page is partial
  std::filesystem::path dir_;
  std::string path_;
  std::vector<std::uint8_t> bytes_;
};

// Reading an open file reads that file, O_DIRECT pieces included, whatever its path names by then.
TEST_F(SectionReaderTest, AnOpenFileIsReadAfterItsPathIsReplaced) {
  shm::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  ASSERT_TRUE(fd.valid());
  const std::string other = (dir_ / "other.bin").string();
  std::vector<std::uint8_t> zeros(kFileSize, 0);
  std::ofstream(other, std::ios::binary).write(reinterpret_cast<const char*>(zeros.data()), zeros.size());
  std::filesystem::rename(other, path_);
  Layout l = odd_layout(kFileSize, 60, 3);
  auto arena = PinnedArena::create(l.bytes);
  ASSERT_TRUE(arena) << arena.error().to_string();
  auto reader = SectionReader::create();
  ASSERT_TRUE(reader);
  auto ranges = place(l, arena->data());
  auto st = reader->read(fd.get(), path_, ranges);
  ASSERT_TRUE(st) << st.error().to_string();
  expect_file_bytes(ranges);
  EXPECT_GT(st->direct_bytes, 0u);
  std::vector<std::uint8_t> ref(l.bytes, 0);
  auto ref_ranges = place(l, ref.data());
  ASSERT_TRUE(pread_ranges(fd.get(), path_, ref_ranges));
  expect_file_bytes(ref_ranges);
}

TEST_F(SectionReaderTest, OddRangesMatchPreadAndTheFileBitForBit) {
  Layout l = odd_layout(kFileSize, 200, 1);
  auto arena = PinnedArena::create(l.bytes);
  ASSERT_TRUE(arena) << arena.error().to_string();
  std::vector<std::uint8_t> ref(l.bytes, 0);
  auto reader = SectionReader::create({.queue_depth = 32, .chunk_bytes = 64 << 10});
  ASSERT_TRUE(reader);
  ASSERT_TRUE(reader->register_memory(arena->span()));
  EXPECT_TRUE(reader->registered());
  auto ranges = place(l, arena->data());
  auto st = read_file(*reader, ranges);
  ASSERT_TRUE(st) << st.error().to_string();
  ASSERT_TRUE(pread_file(place(l, ref.data())));
  expect_file_bytes(ranges);
  EXPECT_TRUE(std::equal(ref.begin(), ref.end(), arena->data()));  // gaps between ranges untouched (zero) in both
  EXPECT_GT(st->direct_bytes, 0u);                                  // aligned ranges went through O_DIRECT
  EXPECT_GT(st->buffered_bytes, 0u);
  EXPECT_EQ(st->direct_bytes + st->buffered_bytes, [&] {
    std::uint64_t n = 0;
    for (const auto& r : ranges) n += r.size;
    return n;
  }());
  EXPECT_EQ(st->fixed_requests, st->requests);  // every request read into the registered arena
  EXPECT_GT(st->requests, 200u);                // large ranges were split
}

TEST_F(SectionReaderTest, ManyRequestsInFlightAndUnregisteredMemory) {
  Layout l = odd_layout(kFileSize, 1000, 2);
  std::vector<std::uint8_t> heap(l.bytes + 4096);  // not registered, not page-aligned: plain buffered reads
  auto reader = SectionReader::create({.queue_depth = 256, .chunk_bytes = 4096});
  ASSERT_TRUE(reader);
  auto ranges = place(l, heap.data() + 1);
  auto st = read_file(*reader, ranges);
  ASSERT_TRUE(st) << st.error().to_string();
  expect_file_bytes(ranges);
  EXPECT_EQ(st->fixed_requests, 0u);
  EXPECT_GT(st->requests, 1000u);
}

TEST_F(SectionReaderTest, ReadersOnSeveralThreadsAtOnce) {
  // One ring per thread (a SectionReader is not shared), all reading the same file into their own arenas.
  constexpr int kThreads = 4;
  std::vector<Layout> layouts;
  std::vector<PinnedArena> arenas;
  for (int i = 0; i < kThreads; ++i) {
    layouts.push_back(odd_layout(kFileSize, 150, 10 + i));
    auto a = PinnedArena::create(layouts.back().bytes);
    ASSERT_TRUE(a);
    arenas.push_back(std::move(*a));
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto reader = SectionReader::create({.queue_depth = 16, .chunk_bytes = 128 << 10});
      if (!reader) return void(errors[i] = reader.error().to_string());
      if (i % 2 == 0 && !reader->register_memory(arenas[i].span())) errors[i] = "register failed";
      auto st = read_file(*reader, place(layouts[i], arenas[i].data()));
      if (!st) errors[i] = st.error().to_string();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[i], "") << "thread " << i;
    expect_file_bytes(place(layouts[i], arenas[i].data()));
  }
}

TEST_F(SectionReaderTest, ShortReadsAreResubmittedForTheRest) {
  Layout l = odd_layout(kFileSize, 60, 3);
  auto arena = PinnedArena::create(l.bytes);
  ASSERT_TRUE(arena);
  for (std::uint64_t clip : {std::uint64_t{1000}, std::uint64_t{4096}, std::uint64_t{12289}}) {
    std::fill(arena->data(), arena->data() + arena->size(), 0);
    auto reader = SectionReader::create({.queue_depth = 8, .chunk_bytes = 256 << 10, .clip_completions_to = clip});
    ASSERT_TRUE(reader);
    ASSERT_TRUE(reader->register_memory(arena->span()));
    auto ranges = place(l, arena->data());
    auto st = read_file(*reader, ranges);
    ASSERT_TRUE(st) << "clip " << clip << ": " << st.error().to_string();
    expect_file_bytes(ranges);
    EXPECT_GT(st->short_reads, 0u) << "clip " << clip;
  }
}

TEST_F(SectionReaderTest, WithoutDirectEverythingIsBuffered) {
  Layout l = odd_layout(kFileSize, 40, 4);
  auto arena = PinnedArena::create(l.bytes);
  ASSERT_TRUE(arena);
  auto reader = SectionReader::create({.direct = false});
  ASSERT_TRUE(reader);
  auto ranges = place(l, arena->data());
  auto st = read_file(*reader, ranges);
  ASSERT_TRUE(st) << st.error().to_string();
  expect_file_bytes(ranges);
  EXPECT_EQ(st->direct_bytes, 0u);
}

TEST_F(SectionReaderTest, ATruncatedFileIsAnErrorNamingTheFileAndTheRange) {
  std::filesystem::resize_file(path_, 1 << 20);
  auto arena = PinnedArena::create(4 << 20);
  ASSERT_TRUE(arena);
  // One range inside what is left, one past the new end: aligned (the O_DIRECT path) and odd (buffered).
  for (ReadRange past : {ReadRange{(1 << 20) - 8192, 2 << 20, arena->data() + 16384},
                         ReadRange{12345, 1 << 20, arena->data() + 16384 + 12345 % 4096}}) {
    std::vector<ReadRange> ranges = {{4096, 8192, arena->data()}, past};
    const std::string want = path_ + ": bytes [" + std::to_string(past.offset) + ", " +
                             std::to_string(past.offset + past.size) + "): the file ends at 1048576 bytes";
    auto reader = SectionReader::create();
    ASSERT_TRUE(reader);
    ASSERT_TRUE(reader->register_memory(arena->span()));
    auto st = read_file(*reader, ranges);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kBadInput);
    EXPECT_NE(st.error().message.find(want), std::string::npos) << st.error().message;
    auto ref = pread_file(ranges);
    ASSERT_FALSE(ref);
    EXPECT_NE(ref.error().message.find(want), std::string::npos) << ref.error().message;
  }
}

TEST_F(SectionReaderTest, ADescriptorNotOpenAndAnOverflowingRangeAreErrors) {
  std::uint8_t b[16];
  auto reader = SectionReader::create();
  ASSERT_TRUE(reader);
  const std::string missing = (dir_ / "missing.epk").string();
  std::vector<ReadRange> one = {{0, 16, b}};
  auto st = reader->read(-1, missing, one);  // /proc is there: an I/O error naming the file, not "unsupported"
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kIo) << st.error().to_string();
  EXPECT_NE(st.error().message.find(missing), std::string::npos);
  std::vector<ReadRange> wrap = {{~std::uint64_t{0} - 4, 16, b}};
  st = read_file(*reader, wrap);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(pread_file(wrap));
  const Status bad = pread_ranges(-1, missing, one);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kIo);
  EXPECT_NE(bad.error().message.find(missing), std::string::npos);
}

TEST_F(SectionReaderTest, EmptyRangesAndAnEmptyListReadNothing) {
  auto reader = SectionReader::create();
  ASSERT_TRUE(reader);
  std::vector<ReadRange> none;
  auto st = read_file(*reader, none);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->requests, 0u);
  std::vector<ReadRange> empty = {{kFileSize, 0, nullptr}, {0, 0, nullptr}};
  st = read_file(*reader, empty);
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_EQ(st->requests, 0u);
}

}  // namespace
}  // namespace epk::daemon
