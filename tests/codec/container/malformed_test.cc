// Malformed files, each derived from a valid one by editing bytes; each must be refused with an error code and a
// message naming the file and the field (docs/FORMAT.md rule 7). Checksums are recomputed after an edit unless the row
// is about a checksum, so that the structural checks themselves are reached. Run under the asan preset too.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "tests/codec/container/test_util.h"

namespace epk::container {
namespace {

using Bytes = std::vector<std::uint8_t>;
using testing::random_bytes;

// Where each field of the valid file sits, found by walking it independently of the reader.
struct BufferPos {
  std::size_t name_len, offset, size, checksum;
  std::uint64_t rel_offset, bytes;
};
struct TensorPos {
  std::size_t start, name_len, rank, dtype, encoding, reserved, shape, params_len, section_offset, section_size,
      buffer_count;
  std::uint64_t section_offset_value, section_size_value;
  std::vector<BufferPos> buffers;
};
struct Layout {
  std::uint64_t index_offset, index_size, metadata_offset, metadata_size;
  std::vector<TensorPos> tensors;
  std::vector<std::size_t> metadata_key_len;
};

std::uint32_t get32(const Bytes& b, std::size_t at) { return load_le<std::uint32_t>(b.data() + at); }
std::uint64_t get64(const Bytes& b, std::size_t at) { return load_le<std::uint64_t>(b.data() + at); }
void put32(Bytes& b, std::size_t at, std::uint32_t v) { store_le(b.data() + at, v); }
void put64(Bytes& b, std::size_t at, std::uint64_t v) { store_le(b.data() + at, v); }

Layout walk(const Bytes& f) {
  Layout l;
  l.index_offset = get64(f, header::kIndexOffsetAt);
  l.index_size = get64(f, header::kIndexSizeAt);
  l.metadata_offset = get64(f, header::kMetadataOffsetAt);
  l.metadata_size = get64(f, header::kMetadataSizeAt);
  std::size_t p = l.index_offset;
  std::uint64_t count = get64(f, p);
  p += 8;
  for (std::uint64_t i = 0; i < count; ++i) {
    TensorPos t;
    t.start = p;
    t.name_len = p;
    p += 4 + get32(f, p);
    t.rank = p;
    t.dtype = p + 1;
    t.encoding = p + 2;
    t.reserved = p + 3;
    std::uint8_t rank = f[p];
    p += 4;
    t.shape = p;
    p += 8u * rank;
    t.params_len = p;
    p += 4 + get32(f, p);
    t.section_offset = p;
    t.section_offset_value = get64(f, p);
    t.section_size = p + 8;
    t.section_size_value = get64(f, p + 8);
    p += 16;
    t.buffer_count = p;
    std::uint32_t nb = get32(f, p);
    p += 4;
    for (std::uint32_t j = 0; j < nb; ++j) {
      BufferPos b;
      b.name_len = p;
      p += 4 + get32(f, p);
      b.offset = p;
      b.size = p + 8;
      b.checksum = p + 16;
      b.rel_offset = get64(f, p);
      b.bytes = get64(f, p + 8);
      p += 24;
      t.buffers.push_back(b);
    }
    l.tensors.push_back(t);
  }
  p = l.metadata_offset;
  std::uint64_t entries = get64(f, p);
  p += 8;
  for (std::uint64_t i = 0; i < entries; ++i) {
    l.metadata_key_len.push_back(p);
    p += 4 + get32(f, p);
    p += 4 + get32(f, p);
  }
  return l;
}

enum class Fix { kAll, kHeaderOnly, kNone };

// Recomputes the region checksums (where the header's region fields still lie inside the file) and the header's own.
void refix(Bytes& f, Fix fix) {
  if (fix == Fix::kNone || f.size() < kHeaderSize) return;
  if (fix == Fix::kAll) {
    auto region = [&](std::size_t off_at, std::size_t size_at, std::size_t sum_at) {
      std::uint64_t off = get64(f, off_at), size = get64(f, size_at), end;
      if (checked_add(off, size, &end) && end <= f.size()) put64(f, sum_at, xxh3_64({f.data() + off, size}));
    };
    region(header::kIndexOffsetAt, header::kIndexSizeAt, header::kIndexChecksumAt);
    region(header::kMetadataOffsetAt, header::kMetadataSizeAt, header::kMetadataChecksumAt);
  }
  put64(f, header::kHeaderChecksumAt, xxh3_64({f.data(), header::kHeaderChecksumAt}));
}

// t0 raw F32 [3,5]; t1 lattice-rans with three buffers; t2 a raw tensor over 1 MiB (4096-aligned); t3 intq without
// buffers; t4 a raw BF16 scalar. Metadata: source, tool_version.
Bytes build_valid(const std::filesystem::path& dir, bool with_large) {
  auto path = (dir / "valid.epk").string();
  auto w = Writer::create(path, {{"source", "unit-test"}, {"tool_version", "0.0.1"}});
  EXPECT_TRUE(w);
  auto a = random_bytes(60, 1), p0 = random_bytes(100, 2), p1 = random_bytes(37, 3), p2 = random_bytes(200, 4);
  auto big = random_bytes(with_large ? kLargeSectionThreshold + 3 : 5, 5), s = random_bytes(2, 6);
  EXPECT_TRUE(w->add_tensor({"t0", {3, 5}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", a}}));
  EXPECT_TRUE(w->add_tensor({"t1", {16, 16}, DType::kBF16, Encoding::kLatticeRans, R"({"bits":4})"},
                            {{"p0", p0}, {"p1", p1}, {"p2", p2}}));
  EXPECT_TRUE(w->add_tensor({"t2", {big.size()}, DType::kU8, Encoding::kRaw, "{}"}, {{"data", big}}));
  EXPECT_TRUE(w->add_tensor({"t3", {4, 4}, DType::kF16, Encoding::kIntq, R"({"group_size":4})"}, {}));
  EXPECT_TRUE(w->add_tensor({"t4", {}, DType::kBF16, Encoding::kRaw, "{}"}, {{"data", s}}));
  EXPECT_TRUE(w->finish());
  auto bytes = testing::slurp(path);
  std::filesystem::remove(path);
  return bytes;
}

struct Row {
  const char* name;
  std::function<void(Bytes&, const Layout&)> edit;
  ErrorCode code;
  std::string field;
  Fix fix = Fix::kAll;
};

constexpr std::uint64_t kMax64 = ~0ull;

std::vector<Row> rows() {
  using L = const Layout&;
  return {
      {"bad_magic", [](Bytes& f, L) { f[0] = 'X'; }, ErrorCode::kBadInput, "header.magic"},
      {"magic_text_mode", [](Bytes& f, L) { f[4] = '\n'; }, ErrorCode::kBadInput, "header.magic"},
      {"version_plus_one", [](Bytes& f, L) { put32(f, header::kVersionAt, kVersion + 1); }, ErrorCode::kUnsupported,
       "header.version"},
      {"version_zero", [](Bytes& f, L) { put32(f, header::kVersionAt, 0); }, ErrorCode::kUnsupported, "header.version"},
      {"header_checksum", [](Bytes& f, L) { f[header::kReservedAt + 3] = 1; }, ErrorCode::kChecksum,
       "header.header_checksum", Fix::kNone},
      {"unknown_flag", [](Bytes& f, L) { put32(f, header::kFlagsAt, 1); }, ErrorCode::kUnsupported, "header.flags"},
      {"reserved_not_zero", [](Bytes& f, L) { f[header::kReservedAt + 39] = 7; }, ErrorCode::kBadInput,
       "header.reserved"},
      {"file_size_plus_one", [](Bytes& f, L) { put64(f, header::kFileSizeAt, f.size() + 1); }, ErrorCode::kBadInput,
       "header.file_size"},
      {"index_offset_past_end", [](Bytes& f, L) { put64(f, header::kIndexOffsetAt, align_up(f.size(), 64) + 64); },
       ErrorCode::kBadInput, "header.index_offset"},
      {"index_offset_misaligned", [](Bytes& f, L l) { put64(f, header::kIndexOffsetAt, l.index_offset + 8); },
       ErrorCode::kBadInput, "header.index_offset"},
      {"index_offset_in_header", [](Bytes& f, L) { put64(f, header::kIndexOffsetAt, 64); }, ErrorCode::kBadInput,
       "header.index_offset"},
      {"index_size_overflows", [](Bytes& f, L) { put64(f, header::kIndexSizeAt, kMax64 - 32); }, ErrorCode::kBadInput,
       "header.index_size"},
      {"index_size_too_small", [](Bytes& f, L) { put64(f, header::kIndexSizeAt, 7); }, ErrorCode::kBadInput,
       "header.index_size"},
      {"index_past_metadata", [](Bytes& f, L l) { put64(f, header::kIndexSizeAt, l.index_size + 64); },
       ErrorCode::kBadInput, "header.metadata_offset"},
      {"metadata_offset_misaligned", [](Bytes& f, L l) { put64(f, header::kMetadataOffsetAt, l.metadata_offset + 1); },
       ErrorCode::kBadInput, "header.metadata_offset"},
      {"metadata_size_short", [](Bytes& f, L l) { put64(f, header::kMetadataSizeAt, l.metadata_size - 1); },
       ErrorCode::kBadInput, "header.metadata_size"},
      {"metadata_size_overflows", [](Bytes& f, L) { put64(f, header::kMetadataSizeAt, kMax64); }, ErrorCode::kBadInput,
       "header.metadata_size"},
      {"index_checksum", [](Bytes& f, L l) { f[l.tensors[4].section_size] ^= 1; }, ErrorCode::kChecksum,
       "header.index_checksum", Fix::kHeaderOnly},
      {"metadata_checksum", [](Bytes& f, L) { f[f.size() - 1] ^= 0x20; }, ErrorCode::kChecksum,
       "header.metadata_checksum", Fix::kHeaderOnly},
      {"tensor_count_differs", [](Bytes& f, L) { put64(f, header::kTensorCountAt, 4); }, ErrorCode::kBadInput,
       "index.tensor_count"},
      {"tensor_count_near_2_64",
       [](Bytes& f, L l) {
         put64(f, header::kTensorCountAt, kMax64);
         put64(f, l.index_offset, kMax64);
       },
       ErrorCode::kBadInput, "index.tensor_count"},
      {"tensor_count_over_limit",
       [](Bytes& f, L l) {
         put64(f, header::kTensorCountAt, kMaxTensors + 1);
         put64(f, l.index_offset, kMaxTensors + 1);
       },
       ErrorCode::kBadInput, "index.tensor_count: 16777217 exceeds the limit"},
      {"index_trailing_bytes",
       [](Bytes& f, L l) {
         put64(f, header::kTensorCountAt, 4);
         put64(f, l.index_offset, 4);
       },
       ErrorCode::kBadInput, "trailing bytes"},
      {"name_len_past_end", [](Bytes& f, L l) { put32(f, l.tensors[3].name_len, 4000); }, ErrorCode::kBadInput,
       "tensor[3].name_len"},
      {"name_len_over_limit", [](Bytes& f, L l) { put32(f, l.tensors[0].name_len, 0xFFFFFFFFu); }, ErrorCode::kBadInput,
       "tensor[0].name_len"},
      {"name_empty", [](Bytes& f, L l) { put32(f, l.tensors[0].name_len, 0); }, ErrorCode::kBadInput,
       "tensor[0].name_len"},
      {"name_not_utf8", [](Bytes& f, L l) { f[l.tensors[0].name_len + 4] = 0xFF; }, ErrorCode::kBadInput,
       "tensor[0].name"},
      {"name_duplicate", [](Bytes& f, L l) { f[l.tensors[1].name_len + 5] = '0'; }, ErrorCode::kBadInput,
       "tensor[1].name"},
      {"rank_9", [](Bytes& f, L l) { f[l.tensors[0].rank] = 9; }, ErrorCode::kBadInput, "rank"},
      {"dtype_unknown", [](Bytes& f, L l) { f[l.tensors[0].dtype] = 200; }, ErrorCode::kUnsupported, "dtype"},
      {"dtype_one_past_last", [](Bytes& f, L l) { f[l.tensors[0].dtype] = kDTypeCount; }, ErrorCode::kUnsupported,
       "dtype"},
      {"encoding_unknown", [](Bytes& f, L l) { f[l.tensors[1].encoding] = kEncodingCount; }, ErrorCode::kUnsupported,
       "encoding"},
      {"entry_reserved", [](Bytes& f, L l) { f[l.tensors[1].reserved] = 1; }, ErrorCode::kBadInput, "reserved"},
      {"shape_product_overflows",
       [](Bytes& f, L l) {
         put64(f, l.tensors[1].shape, 1ull << 32);
         put64(f, l.tensors[1].shape + 8, 1ull << 32);
       },
       ErrorCode::kBadInput, "'t1' shape: element count overflows"},
      {"shape_bits_overflow",  // 2^60 BF16 elements: the count fits, the bit count does not
       [](Bytes& f, L l) {
         put64(f, l.tensors[1].shape, 1ull << 60);
         put64(f, l.tensors[1].shape + 8, 1);
       },
       ErrorCode::kBadInput, "'t1' shape: element count * dtype bits"},
      {"lattice_cols_2_32", [](Bytes& f, L l) { put64(f, l.tensors[1].shape + 8, 1ull << 32); },  // rule 10.1
       ErrorCode::kBadInput, "'t1' shape[1]: 4294967296 outside [1, 2^32)"},
      {"lattice_rows_zero", [](Bytes& f, L l) { put64(f, l.tensors[1].shape, 0); }, ErrorCode::kBadInput,
       "'t1' shape[0]: 0 outside [1, 2^32)"},
      {"decoded_f32_size_overflows",  // 2^60 U8 elements: the bits fit, 32-bit decoded elements do not (rule 5.3)
       [](Bytes& f, L l) {
         put64(f, l.tensors[3].shape, 1ull << 30);
         put64(f, l.tensors[3].shape + 8, 1ull << 30);
         f[l.tensors[3].dtype] = static_cast<std::uint8_t>(DType::kU8);
       },
       ErrorCode::kBadInput, "'t3' shape: element count * 32 overflows"},
      {"params_len_past_end", [](Bytes& f, L l) { put32(f, l.tensors[1].params_len, 100000); }, ErrorCode::kBadInput,
       "params_len"},
      {"params_len_over_limit", [](Bytes& f, L l) { put32(f, l.tensors[1].params_len, kMaxParamsLen + 1); },
       ErrorCode::kBadInput, "params_len"},
      {"params_not_utf8", [](Bytes& f, L l) { f[l.tensors[1].params_len + 4] = 0xC0; }, ErrorCode::kBadInput, "params"},
      {"section_past_end", [](Bytes& f, L l) { put64(f, l.tensors[4].section_offset, align_up(f.size(), 64)); },
       ErrorCode::kBadInput, "'t4' section_offset"},
      {"section_in_index", [](Bytes& f, L l) { put64(f, l.tensors[4].section_offset, l.index_offset); },
       ErrorCode::kBadInput, "'t4' section_offset"},
      {"section_in_header", [](Bytes& f, L l) { put64(f, l.tensors[0].section_offset, 64); }, ErrorCode::kBadInput,
       "'t0' section_offset"},
      {"section_misaligned",
       [](Bytes& f, L l) { put64(f, l.tensors[1].section_offset, l.tensors[1].section_offset_value + 8); },
       ErrorCode::kBadInput, "'t1' section_offset"},
      {"large_section_not_page_aligned",
       [](Bytes& f, L l) { put64(f, l.tensors[2].section_offset, l.tensors[2].section_offset_value - 64); },
       ErrorCode::kBadInput, "'t2' section_offset"},
      {"section_size_overflows", [](Bytes& f, L l) { put64(f, l.tensors[2].section_size, kMax64); },
       ErrorCode::kBadInput, "'t2' section_size"},
      {"sections_overlap",
       [](Bytes& f, L l) { put64(f, l.tensors[4].section_offset, l.tensors[0].section_offset_value + 64 - 64); },
       ErrorCode::kBadInput, "section_offset"},
      {"buffer_count_huge", [](Bytes& f, L l) { put32(f, l.tensors[1].buffer_count, 0xFFFFFFFFu); },
       ErrorCode::kBadInput, "'t1' buffer_count"},
      {"buffer_count_over_limit", [](Bytes& f, L l) { put32(f, l.tensors[1].buffer_count, kMaxBuffers + 1); },
       ErrorCode::kBadInput, "'t1' buffer_count"},
      {"buffer_name_len_past_end", [](Bytes& f, L l) { put32(f, l.tensors[1].buffers[2].name_len, 4096); },
       ErrorCode::kBadInput, "buffers[2].name_len"},
      {"buffer_offset_past_section",
       [](Bytes& f, L l) { put64(f, l.tensors[1].buffers[2].offset, align_up(l.tensors[1].section_size_value, 64)); },
       ErrorCode::kBadInput, "'t1' buffers[2].offset: [448, 648) past the section end"},
      {"buffer_offset_past_file",
       [](Bytes& f, L l) { put64(f, l.tensors[1].buffers[0].offset, align_up(f.size(), 64)); }, ErrorCode::kBadInput,
       "'t1' buffers[0].offset"},
      {"buffer_misaligned",
       [](Bytes& f, L l) { put64(f, l.tensors[1].buffers[1].offset, l.tensors[1].buffers[1].rel_offset + 8); },
       ErrorCode::kBadInput, "'t1' buffers[1].offset"},
      {"buffers_overlap", [](Bytes& f, L l) { put64(f, l.tensors[1].buffers[1].offset, 64); }, ErrorCode::kBadInput,
       "'t1' buffers[1].offset"},
      {"buffer_size_overflows", [](Bytes& f, L l) { put64(f, l.tensors[1].buffers[1].size, kMax64 - 64); },
       ErrorCode::kBadInput, "'t1' buffers[1].size"},
      {"buffer_name_duplicate", [](Bytes& f, L l) { f[l.tensors[1].buffers[1].name_len + 5] = '0'; },
       ErrorCode::kBadInput, "'t1' buffers[1].name"},
      {"raw_size_mismatch", [](Bytes& f, L l) { put64(f, l.tensors[0].buffers[0].size, 56); }, ErrorCode::kBadInput,
       "'t0' buffers[0].size"},
      {"raw_buffer_renamed", [](Bytes& f, L l) { f[l.tensors[0].buffers[0].name_len + 4] = 'x'; }, ErrorCode::kBadInput,
       "'t0' buffer_count"},
      {"metadata_count_huge", [](Bytes& f, L l) { put64(f, l.metadata_offset, kMax64 / 2); }, ErrorCode::kBadInput,
       "metadata.entry_count"},
      {"metadata_key_len_past_end", [](Bytes& f, L l) { put32(f, l.metadata_key_len[1], 1000); }, ErrorCode::kBadInput,
       "metadata[1].key_len"},
      {"metadata_keys_unsorted", [](Bytes& f, L l) { f[l.metadata_key_len[0] + 4] = 'z'; }, ErrorCode::kBadInput,
       "metadata[1].key"},
      {"metadata_trailing_bytes", [](Bytes& f, L l) { put64(f, l.metadata_offset, 1); }, ErrorCode::kBadInput,
       "metadata: "},
  };
}

class ContainerMalformed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    valid_ = build_valid(dir_, /*with_large=*/true);
    layout_ = walk(valid_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `bytes` as a file named after the case and opens it.
  std::pair<std::string, Result<Reader>> open_as(const std::string& name, const Bytes& bytes) {
    auto path = (dir_ / (name + ".epk")).string();
    testing::spit(path, bytes);
    return {path, Reader::open(path)};
  }

  std::filesystem::path dir_;
  Bytes valid_;
  Layout layout_;
};

TEST_F(ContainerMalformed, ValidFileOpensAndVerifies) {
  auto [path, r] = open_as("valid", valid_);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->tensors().size(), 5u);
  EXPECT_TRUE(r->verify_all());
  ASSERT_EQ(layout_.tensors.size(), 5u);  // the walker agrees with the reader
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_EQ(layout_.tensors[i].section_offset_value, r->tensors()[i].section_offset);
}

TEST_F(ContainerMalformed, EveryRowIsRefusedNamingFileAndField) {
  std::set<std::string> names;
  for (const auto& row : rows()) {
    SCOPED_TRACE(row.name);
    ASSERT_TRUE(names.insert(row.name).second) << "duplicate row name";
    Bytes f = valid_;
    row.edit(f, layout_);
    refix(f, row.fix);
    ASSERT_NE(f, valid_) << "the edit changed nothing";
    auto [path, r] = open_as(row.name, f);
    ASSERT_FALSE(r) << "accepted";
    EXPECT_EQ(r.error().code, row.code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().to_string();
    EXPECT_NE(r.error().message.find(row.field), std::string::npos) << r.error().to_string();
    std::filesystem::remove(path);
  }
}

// Every section boundary (header, each section and buffer start and end, index entries, metadata) and a fixed-seed
// sample of other lengths; once as is (caught by header.file_size), once with file_size patched to the truncated
// length (caught by the region checks).
TEST_F(ContainerMalformed, TruncatedAtEveryBoundaryIsRefused) {
  std::set<std::uint64_t> cuts = {0,
                                  1,
                                  8,
                                  64,
                                  kHeaderSize - 1,
                                  kHeaderSize,
                                  layout_.index_offset,
                                  layout_.index_offset + 8,
                                  layout_.metadata_offset,
                                  layout_.metadata_offset + 8,
                                  valid_.size() - 1};
  for (const auto& t : layout_.tensors) {
    cuts.insert(t.start);
    cuts.insert(t.section_offset_value);
    cuts.insert(t.section_offset_value + t.section_size_value);
    for (const auto& b : t.buffers) {
      cuts.insert(t.section_offset_value + b.rel_offset);
      cuts.insert(t.section_offset_value + b.rel_offset + b.bytes);
    }
  }
  for (auto k : layout_.metadata_key_len) cuts.insert(k);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 40; ++i) cuts.insert(rng() % valid_.size());
  cuts.erase(valid_.size());
  for (auto cut : cuts) {
    for (bool patch : {false, true}) {
      SCOPED_TRACE("cut at " + std::to_string(cut) + (patch ? " with file_size patched" : ""));
      Bytes f(valid_.begin(), valid_.begin() + static_cast<std::ptrdiff_t>(cut));
      if (patch && cut >= kHeaderSize) {
        put64(f, header::kFileSizeAt, cut);
        refix(f, Fix::kHeaderOnly);
      }
      auto [path, r] = open_as("cut", f);
      ASSERT_FALSE(r) << "accepted";
      EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << r.error().to_string();
      EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().to_string();
      std::string field = cut < kHeaderSize ? "header: " : patch ? "header." : "header.file_size";
      EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().to_string();
    }
  }
}

TEST_F(ContainerMalformed, BufferChecksumMismatchIsFoundByVerify) {
  Bytes f = valid_;
  const auto& t1 = layout_.tensors[1];
  f[t1.section_offset_value + t1.buffers[2].rel_offset + 199] ^= 0x80;  // last byte of p2
  auto [path, r] = open_as("buffer_checksum", f);
  ASSERT_TRUE(r) << "open must not hash buffers: " << r.error().to_string();
  EXPECT_TRUE(r->verify(*r->find("t0")));
  for (auto s : {r->verify(*r->find("t1")), r->verify_all()}) {
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kChecksum);
    for (const char* part : {"t1", "buffers[2]", "'p2'", "checksum"})
      EXPECT_NE(s.error().message.find(part), std::string::npos) << s.error().to_string();
    EXPECT_NE(s.error().message.find(path), std::string::npos);
  }
}

TEST_F(ContainerMalformed, StoredBufferChecksumEditedIsFoundByVerify) {
  Bytes f = valid_;
  f[layout_.tensors[4].buffers[0].checksum] ^= 1;
  refix(f, Fix::kAll);
  auto [path, r] = open_as("stored_checksum", f);
  ASSERT_TRUE(r) << r.error().to_string();
  auto s = r->verify(*r->find("t4"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kChecksum);
  EXPECT_NE(s.error().message.find("'t4' buffers[0]"), std::string::npos) << s.error().to_string();
}

TEST(ContainerMalformedFiles, DirectoryAndMissingFileAreRefused) {
  auto dir = testing::fresh_dir("notfile");
  auto d = Reader::open(dir.string());
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find(dir.string()), std::string::npos);
  auto m = Reader::open((dir / "missing.epk").string());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kIo);
  EXPECT_NE(m.error().message.find("missing.epk"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Random edits of the index with checksums repaired: the reader must refuse or accept, never read out of bounds. A
// file it accepts hands out only spans inside the map.
TEST(ContainerMalformedFiles, RandomIndexEditsNeverCrash) {
  auto dir = testing::fresh_dir("fuzz");
  Bytes valid = build_valid(dir, /*with_large=*/false);
  Layout l = walk(valid);
  std::mt19937_64 rng(20261130);
  auto path = (dir / "fuzz.epk").string();
  int refused = 0, accepted = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    Bytes f = valid;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      std::size_t at = l.index_offset + rng() % l.index_size;
      f[at] = rng() % 4 == 0 ? 0xFF : static_cast<std::uint8_t>(rng());
    }
    refix(f, Fix::kAll);
    testing::spit(path, f);
    auto r = Reader::open(path);
    if (!r) {
      ++refused;
      EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().to_string();
      continue;
    }
    ++accepted;
    for (const auto& t : r->tensors()) {
      for (std::size_t i = 0; i < t.buffers.size(); ++i) {
        auto b = r->buffer(t, i);
        EXPECT_EQ(b.size(), t.buffers[i].size);
        EXPECT_LE(t.buffers[i].offset + t.buffers[i].size, r->file_size());
      }
      (void)r->verify(t);
    }
  }
  EXPECT_GT(refused, 0);
  std::printf("random index edits: %d refused, %d accepted\n", refused, accepted);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace epk::container
