#include "codec/common/atomic_file.h"
#include "tests/support/scratch_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace epk {
namespace {

fs::path fresh_dir(const char* name) { return test::scratch_dir(std::string("epk_") + name); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(AtomicFileWriter, NothingUnderFinalNameUntilCommit) {
  auto dir = fresh_dir("atomic1");
  auto target = (dir / "out.bin").string();
  auto w = AtomicFileWriter::create(target);
  ASSERT_TRUE(w) << w.error().to_string();
  ASSERT_TRUE(w->write("abc", 3));
  ASSERT_TRUE(w->pad_to(8));
  EXPECT_EQ(w->position(), 8u);
  const std::uint8_t patch[] = {'X'};
  ASSERT_TRUE(w->write_at(1, patch));
  EXPECT_FALSE(fs::exists(target));
  ASSERT_TRUE(w->commit());
  EXPECT_EQ(slurp(target), std::string("aXc\0\0\0\0\0", 8));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}

TEST(AtomicFileWriter, AbandonedWriterLeavesNoFile) {
  auto dir = fresh_dir("atomic2");
  auto target = (dir / "out.bin").string();
  {
    auto w = AtomicFileWriter::create(target);
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->write("abc", 3));
  }
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 0);
}

TEST(AtomicFileWriter, WriteAtPastEndIsRefused) {
  auto dir = fresh_dir("atomic3");
  auto w = AtomicFileWriter::create((dir / "x").string());
  ASSERT_TRUE(w);
  const std::uint8_t b[] = {1, 2};
  EXPECT_FALSE(w->write_at(0, b));
}

TEST(AtomicFileWriter, MissingDirectoryIsAnIoError) {
  auto w = AtomicFileWriter::create("/nonexistent-dir-epk/x.epk");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::kIo);
  EXPECT_NE(w.error().message.find("/nonexistent-dir-epk/x.epk"), std::string::npos);
}

}  // namespace
}  // namespace epk
