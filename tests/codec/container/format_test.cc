#include "codec/container/format.h"

#include <gtest/gtest.h>

namespace epk::container {
namespace {

TEST(ContainerFormat, EncodingCodesAndNamesAreFixed) {
  EXPECT_EQ(static_cast<int>(Encoding::kRaw), 0);
  EXPECT_EQ(static_cast<int>(Encoding::kLatticeRans), 1);
  EXPECT_EQ(static_cast<int>(Encoding::kIntq), 2);
  EXPECT_EQ(encoding_name(Encoding::kRaw), "raw");
  EXPECT_EQ(encoding_name(Encoding::kLatticeRans), "lattice-rans");
  EXPECT_EQ(encoding_name(Encoding::kIntq), "intq");
  for (int i = 0; i < kEncodingCount; ++i) {
    auto e = static_cast<Encoding>(i);
    EXPECT_EQ(encoding_from_name(encoding_name(e)), e);
    EXPECT_EQ(encoding_from_code(static_cast<std::uint32_t>(i)), e);
  }
  EXPECT_FALSE(encoding_from_name("RAW"));
  EXPECT_FALSE(encoding_from_name(""));
  EXPECT_FALSE(encoding_from_code(3));
  EXPECT_FALSE(encoding_from_code(255));
}

TEST(ContainerFormat, SectionAlignmentSwitchesAtOneMiB) {
  EXPECT_EQ(section_alignment(0), 64u);
  EXPECT_EQ(section_alignment(kLargeSectionThreshold - 1), 64u);
  EXPECT_EQ(section_alignment(kLargeSectionThreshold), 4096u);
  EXPECT_EQ(section_alignment(~0ull), 4096u);
}

TEST(ContainerFormat, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("model.layers.0.mlp.down_proj.weight"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));              // lone continuation
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));
  EXPECT_FALSE(is_valid_name_utf8(std::string_view("a\0b", 3)));
  EXPECT_TRUE(is_valid_name_utf8("w"));
}

}  // namespace
}  // namespace epk::container
