#include "codec/common/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace epk {
namespace {

TEST(MappedFile, MapsContentsAndEmptyFiles) {
  auto dir = std::filesystem::temp_directory_path() / ("epk_map_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "a") << "hello"; }
  { std::ofstream(dir / "empty"); }
  auto a = MappedFile::open((dir / "a").string());
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data()), a->size()), "hello");
  auto e = MappedFile::open((dir / "empty").string());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->size(), 0u);
  MappedFile moved = std::move(*a);
  EXPECT_EQ(moved.size(), 5u);
  std::filesystem::remove_all(dir);
}

TEST(MappedFile, MissingFileAndDirectoryAreRefused) {
  auto m = MappedFile::open("/nonexistent/epk");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("/nonexistent/epk"), std::string::npos);
  auto d = MappedFile::open("/tmp");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kBadInput);
}

}  // namespace
}  // namespace epk
