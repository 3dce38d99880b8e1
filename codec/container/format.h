// Constants of the .epk container (docs/FORMAT.md is the spec; rule numbers below refer to it) and the encoding codes.
// Shared by the writer, the reader and the tests that build malformed files byte by byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace epk::container {

// Rule 3: the fixed header.
inline constexpr std::array<std::uint8_t, 8> kMagic = {0x45, 0x50, 0x4B, 0x00, 0x0D, 0x0A, 0x1A, 0x0A};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kHeaderSize = 128;

// Byte offsets of the header fields.
namespace header {
inline constexpr std::size_t kMagicAt = 0;
inline constexpr std::size_t kVersionAt = 8;
inline constexpr std::size_t kFlagsAt = 12;
inline constexpr std::size_t kFileSizeAt = 16;
inline constexpr std::size_t kIndexOffsetAt = 24;
inline constexpr std::size_t kIndexSizeAt = 32;
inline constexpr std::size_t kIndexChecksumAt = 40;
inline constexpr std::size_t kMetadataOffsetAt = 48;
inline constexpr std::size_t kMetadataSizeAt = 56;
inline constexpr std::size_t kMetadataChecksumAt = 64;
inline constexpr std::size_t kTensorCountAt = 72;
inline constexpr std::size_t kReservedAt = 80;
inline constexpr std::size_t kReservedSize = 40;
inline constexpr std::size_t kHeaderChecksumAt = 120;  // XXH3-64 of bytes [0, 120)
}  // namespace header

// Rule 4: alignment.
inline constexpr std::uint64_t kBufferAlign = 64;          // buffers inside a section, small sections, index, metadata
inline constexpr std::uint64_t kLargeSectionAlign = 4096;  // sections of kLargeSectionThreshold bytes or more
inline constexpr std::uint64_t kLargeSectionThreshold = 1u << 20;

// Rule 5: bounds on the index.
inline constexpr std::uint64_t kMaxTensors = 1u << 24;
inline constexpr std::uint32_t kMaxRank = 8;
inline constexpr std::uint32_t kMaxNameLen = 4096;
inline constexpr std::uint32_t kMaxBuffers = 256;
inline constexpr std::uint32_t kMaxParamsLen = 1u << 20;
inline constexpr std::uint64_t kMinTensorEntry = 4 + 1 + 4 + 4 + 8 + 8 + 4;  // name of 1 byte, rank 0, empty params
inline constexpr std::uint64_t kMinBufferEntry = 4 + 1 + 8 + 8 + 8;
inline constexpr std::uint64_t kMinMetadataEntry = 4 + 1 + 4;

// The alignment a section of `section_size` bytes starts at (rule 4.2).
inline constexpr std::uint64_t section_alignment(std::uint64_t section_size) {
  return section_size >= kLargeSectionThreshold ? kLargeSectionAlign : kBufferAlign;
}

// Stored as a byte in the index: never renumber, only append.
enum class Encoding : std::uint8_t {
  kRaw = 0,          // the source dtype's bytes, one buffer "data"
  kLatticeRans = 1,  // EntroPack: E8 lattice + tiled rANS (codec/rans/stream.h)
  kIntq = 2,         // logical integer quantization (codes, scales, zeros, g_idx)
};
inline constexpr int kEncodingCount = 3;

// "raw", "lattice-rans", "intq".
std::string_view encoding_name(Encoding e);
std::optional<Encoding> encoding_from_name(std::string_view name);
// nullopt for codes this build does not know.
std::optional<Encoding> encoding_from_code(std::uint32_t code);

// The name of the single buffer of a raw tensor (rule 5.5).
inline constexpr std::string_view kRawBufferName = "data";

// Valid UTF-8 (no overlongs, no surrogates, at most U+10FFFF) and no NUL byte: the rule for names and metadata keys.
bool is_valid_name_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);

}  // namespace epk::container
