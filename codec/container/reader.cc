#include "codec/container/reader.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <utility>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/shape_rules.h"

namespace epk::container {
namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
  return buf;
}

std::string num(std::uint64_t v) { return std::to_string(v); }

// Of n ranges [offset(i), offset(i) + size(i)), the first two non-empty ones that overlap in offset order, as
// (earlier, later): the later starts before the earlier ends. nullopt when none do. Ranges already in offset order
// (as the writer lays them out) are checked without sorting.
template <class Offset, class Size>
std::optional<std::pair<std::uint32_t, std::uint32_t>> first_overlap(std::size_t n, Offset offset, Size size) {
  std::vector<std::uint32_t> order;
  order.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i)
    if (size(i) > 0) order.push_back(i);
  auto by_offset = [&](std::uint32_t a, std::uint32_t b) { return offset(a) < offset(b); };
  if (!std::is_sorted(order.begin(), order.end(), by_offset)) std::sort(order.begin(), order.end(), by_offset);
  for (std::size_t k = 1; k < order.size(); ++k) {
    if (offset(order[k - 1]) + size(order[k - 1]) > offset(order[k])) return std::pair{order[k - 1], order[k]};
  }
  return std::nullopt;
}

// Reads fields of one region (index or metadata) front to back; every read is checked against the bytes left, and
// every error names the file, the field and the region.
class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::uint64_t size, const std::string& path, const char* region)
      : data_(data), size_(size), path_(path), region_(region) {}

  std::uint64_t left() const { return size_ - pos_; }
  std::uint64_t pos() const { return pos_; }

  Error fail(ErrorCode code, const std::string& field, const std::string& detail) const {
    return make_error(code, path_ + ": " + field + ": " + detail);
  }

  // `field` is a string or a callable returning one: field names are built only when an error is reported, so a
  // valid index of many tensors parses without allocating a message per field.
  template <class Field>
  Status need(std::uint64_t n, const Field& field) const {
    if (n > left())
      return fail(
          ErrorCode::kBadInput, name_of(field),
          "needs " + num(n) + " bytes, " + num(left()) + " left in the " + region_ + " (truncated " + region_ + ")");
    return {};
  }

  template <class T, class Field>
  Result<T> read(const Field& field) {
    EPK_TRY(need(sizeof(T), field));
    T v = load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  // A str32: the length is bounded by max_len and by the bytes left before anything is copied.
  template <class Field>
  Result<std::string> read_str32(const Field& field, std::uint64_t max_len, bool is_name) {
    auto len_field = [&] { return name_of(field) + "_len"; };
    EPK_TRY_ASSIGN(std::uint32_t len, read<std::uint32_t>(len_field));
    if (is_name && len == 0) return fail(ErrorCode::kBadInput, len_field(), "empty");
    if (len > max_len) return fail(ErrorCode::kBadInput, len_field(), num(len) + " exceeds the limit " + num(max_len));
    EPK_TRY(need(len, len_field));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    if (is_name ? !is_valid_name_utf8(s) : !is_valid_utf8(s))
      return fail(ErrorCode::kBadInput, name_of(field), "not valid UTF-8 (or contains NUL)");
    return s;
  }

 private:
  template <class Field>
  static std::string name_of(const Field& field) {
    if constexpr (std::is_invocable_v<const Field&>)
      return field();
    else
      return std::string(field);
  }

  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& path_;
  const char* region_;
};

struct HeaderFields {
  std::uint64_t file_size, index_offset, index_size, index_checksum;
  std::uint64_t metadata_offset, metadata_size, metadata_checksum, tensor_count;
};

Result<HeaderFields> parse_header(const std::string& path, std::span<const std::uint8_t> file) {
  auto fail = [&](ErrorCode code, const char* field, const std::string& detail) {
    return make_error(code, path + ": header." + field + ": " + detail);
  };
  if (file.size() < kHeaderSize)
    return make_error(ErrorCode::kBadInput, path + ": header: file is " + num(file.size()) +
                                                " bytes, shorter than the " + num(kHeaderSize) + "-byte header");
  const std::uint8_t* h = file.data();
  if (!std::equal(kMagic.begin(), kMagic.end(), h + header::kMagicAt))
    return fail(ErrorCode::kBadInput, "magic", "not an .epk file (magic " + hex(load_le<std::uint64_t>(h)) + ")");
  auto version = load_le<std::uint32_t>(h + header::kVersionAt);
  if (version != kVersion)
    return fail(ErrorCode::kUnsupported, "version", num(version) + " (this build reads version " + num(kVersion) + ")");
  auto stored = load_le<std::uint64_t>(h + header::kHeaderChecksumAt);
  auto computed = xxh3_64(file.subspan(0, header::kHeaderChecksumAt));
  if (stored != computed)
    return fail(ErrorCode::kChecksum, "header_checksum", "stored " + hex(stored) + ", computed " + hex(computed));
  auto flags = load_le<std::uint32_t>(h + header::kFlagsAt);
  if (flags != 0) return fail(ErrorCode::kUnsupported, "flags", hex(flags) + " (version 1 defines none)");
  for (std::size_t i = 0; i < header::kReservedSize; ++i)
    if (h[header::kReservedAt + i] != 0) return fail(ErrorCode::kBadInput, "reserved", "byte " + num(i) + " not zero");

  HeaderFields f;
  f.file_size = load_le<std::uint64_t>(h + header::kFileSizeAt);
  f.index_offset = load_le<std::uint64_t>(h + header::kIndexOffsetAt);
  f.index_size = load_le<std::uint64_t>(h + header::kIndexSizeAt);
  f.index_checksum = load_le<std::uint64_t>(h + header::kIndexChecksumAt);
  f.metadata_offset = load_le<std::uint64_t>(h + header::kMetadataOffsetAt);
  f.metadata_size = load_le<std::uint64_t>(h + header::kMetadataSizeAt);
  f.metadata_checksum = load_le<std::uint64_t>(h + header::kMetadataChecksumAt);
  f.tensor_count = load_le<std::uint64_t>(h + header::kTensorCountAt);

  if (f.file_size != file.size())
    return fail(ErrorCode::kBadInput, "file_size",
                num(f.file_size) + " but the file has " + num(file.size()) + " bytes (truncated or extended)");
  // Rule 2.2: header < sections < index <= metadata, metadata ending at the end of the file.
  if (f.index_offset < kHeaderSize || f.index_offset % kBufferAlign != 0)
    return fail(ErrorCode::kBadInput, "index_offset", num(f.index_offset) + " before the data or not 64-aligned");
  if (f.index_size < 8) return fail(ErrorCode::kBadInput, "index_size", num(f.index_size) + " smaller than 8");
  std::uint64_t index_end;
  if (!checked_add(f.index_offset, f.index_size, &index_end))
    return fail(ErrorCode::kBadInput, "index_size", "index_offset + index_size overflows");
  if (index_end > f.file_size)
    return fail(
        ErrorCode::kBadInput, "index_offset",
        "index [" + num(f.index_offset) + ", " + num(index_end) + ") past end of file (" + num(f.file_size) + ")");
  if (f.metadata_offset < index_end || f.metadata_offset % kBufferAlign != 0)
    return fail(ErrorCode::kBadInput, "metadata_offset",
                num(f.metadata_offset) + " before the end of the index (" + num(index_end) + ") or not 64-aligned");
  if (f.metadata_size < 8) return fail(ErrorCode::kBadInput, "metadata_size", num(f.metadata_size) + " smaller than 8");
  std::uint64_t metadata_end;
  if (!checked_add(f.metadata_offset, f.metadata_size, &metadata_end))
    return fail(ErrorCode::kBadInput, "metadata_size", "metadata_offset + metadata_size overflows");
  if (metadata_end != f.file_size)
    return fail(ErrorCode::kBadInput, "metadata_size",
                "metadata ends at " + num(metadata_end) + ", the file at " + num(f.file_size));

  auto check_sum = [&](const char* field, std::uint64_t off, std::uint64_t size, std::uint64_t want) -> Status {
    auto got = xxh3_64(file.subspan(off, size));
    if (got != want) return fail(ErrorCode::kChecksum, field, "stored " + hex(want) + ", computed " + hex(got));
    return {};
  };
  EPK_TRY(check_sum("index_checksum", f.index_offset, f.index_size, f.index_checksum));
  EPK_TRY(check_sum("metadata_checksum", f.metadata_offset, f.metadata_size, f.metadata_checksum));
  return f;
}

// Rules 5.1-5.10 for one tensor; `index_offset` bounds its section.
Result<TensorEntry> parse_tensor(Cursor& c, std::uint64_t i, std::uint64_t index_offset) {
  TensorEntry e;
  // Field names: "tensor[3] 'name' rank", "tensor[3] 'name' buffers[1].offset"; tf/bf make them lazily.
  auto tname = [&](std::string_view f) { return "tensor[" + num(i) + "] '" + e.name + "' " + std::string(f); };
  auto tf = [&](const char* f) { return [&, f] { return tname(f); }; };
  auto bname = [&](std::uint64_t j, std::string_view f) { return tname("buffers[" + num(j) + "]." + std::string(f)); };
  auto bf = [&](std::uint32_t j, const char* f) { return [&, j, f] { return bname(j, f); }; };
  auto bad = [&](std::string_view field, const std::string& detail) {
    return c.fail(ErrorCode::kBadInput, tname(field), detail);
  };

  EPK_TRY_ASSIGN(e.name, c.read_str32([&] { return "tensor[" + num(i) + "].name"; }, kMaxNameLen, /*is_name=*/true));
  EPK_TRY_ASSIGN(auto rank, c.read<std::uint8_t>(tf("rank")));
  EPK_TRY_ASSIGN(auto dtype_code, c.read<std::uint8_t>(tf("dtype")));
  EPK_TRY_ASSIGN(auto encoding_code, c.read<std::uint8_t>(tf("encoding")));
  EPK_TRY_ASSIGN(auto reserved, c.read<std::uint8_t>(tf("reserved")));
  if (rank > kMaxRank) return bad("rank", num(rank) + " exceeds " + num(kMaxRank));  // before reading the shape
  auto dtype = dtype_from_code(dtype_code);
  if (!dtype) return c.fail(ErrorCode::kUnsupported, tname("dtype"), "unknown code " + num(dtype_code));
  auto encoding = encoding_from_code(encoding_code);
  if (!encoding) return c.fail(ErrorCode::kUnsupported, tname("encoding"), "unknown code " + num(encoding_code));
  if (reserved != 0) return bad("reserved", "not zero");
  e.dtype = *dtype;
  e.encoding = *encoding;

  e.shape.reserve(rank);
  for (unsigned d = 0; d < rank; ++d) {
    EPK_TRY_ASSIGN(auto dim, c.read<std::uint64_t>(tf("shape")));
    e.shape.push_back(dim);
  }
  if (auto fault = check_shape(e.encoding, e.dtype, e.shape)) return bad(fault->field, fault->detail);
  const std::uint64_t bits = e.element_count() * static_cast<std::uint64_t>(dtype_bits(e.dtype));  // checked above

  EPK_TRY_ASSIGN(e.params_json, c.read_str32(tf("params"), kMaxParamsLen, /*is_name=*/false));

  EPK_TRY_ASSIGN(e.section_offset, c.read<std::uint64_t>(tf("section_offset")));
  EPK_TRY_ASSIGN(e.section_size, c.read<std::uint64_t>(tf("section_size")));
  std::uint64_t section_end;
  if (!checked_add(e.section_offset, e.section_size, &section_end))
    return bad("section_size", "section_offset + section_size overflows");
  if (e.section_offset < kHeaderSize || section_end > index_offset)
    return bad("section_offset", "section [" + num(e.section_offset) + ", " + num(section_end) +
                                     ") outside the data region [" + num(kHeaderSize) + ", " + num(index_offset) + ")");
  std::uint64_t align = section_alignment(e.section_size);
  if (e.section_offset % align != 0)
    return bad("section_offset", num(e.section_offset) + " not aligned to " + num(align));

  EPK_TRY_ASSIGN(auto buffer_count, c.read<std::uint32_t>(tf("buffer_count")));
  if (buffer_count > kMaxBuffers || buffer_count > c.left() / kMinBufferEntry)
    return bad("buffer_count", num(buffer_count) + " exceeds the limit " + num(kMaxBuffers) +
                                   " or the bytes left in the index (" + num(c.left()) + ")");
  e.buffers.reserve(buffer_count);
  for (std::uint32_t j = 0; j < buffer_count; ++j) {
    BufferRef r;
    EPK_TRY_ASSIGN(r.name, c.read_str32(bf(j, "name"), kMaxNameLen, /*is_name=*/true));
    EPK_TRY_ASSIGN(auto rel, c.read<std::uint64_t>(bf(j, "offset")));
    EPK_TRY_ASSIGN(r.size, c.read<std::uint64_t>(bf(j, "size")));
    EPK_TRY_ASSIGN(r.xxh3, c.read<std::uint64_t>(bf(j, "checksum")));
    if (rel % kBufferAlign != 0)
      return c.fail(ErrorCode::kBadInput, bname(j, "offset"), num(rel) + " not a multiple of " + num(kBufferAlign));
    std::uint64_t rel_end;
    if (!checked_add(rel, r.size, &rel_end))
      return c.fail(ErrorCode::kBadInput, bname(j, "size"), "offset + size overflows");
    if (rel_end > e.section_size)
      return c.fail(ErrorCode::kBadInput, bname(j, "offset"),
                    "[" + num(rel) + ", " + num(rel_end) + ") past the section end (" + num(e.section_size) + ")");
    for (std::uint32_t k = 0; k < j; ++k)
      if (e.buffers[k].name == r.name)
        return c.fail(ErrorCode::kBadInput, bname(j, "name"), "duplicate '" + r.name + "'");
    r.offset = e.section_offset + rel;  // cannot overflow: rel_end <= section_size and the section end fits
    e.buffers.push_back(std::move(r));
  }

  // Buffers of one tensor do not overlap (empty ones never do). The writer lays them out in order, so the common case
  // is checked without sorting.
  if (auto o = first_overlap(
          e.buffers.size(), [&](std::uint32_t j) { return e.buffers[j].offset; },
          [&](std::uint32_t j) { return e.buffers[j].size; }))
    return c.fail(ErrorCode::kBadInput, bname(o->second, "offset"), "overlaps buffers[" + num(o->first) + "]");

  if (e.encoding == Encoding::kRaw) {
    if (e.buffers.size() != 1 || e.buffers[0].name != kRawBufferName)
      return bad("buffer_count", "a raw tensor has exactly one buffer named 'data'");
    std::uint64_t want = bits / 8 + (bits % 8 != 0);
    if (e.buffers[0].size != want)
      return c.fail(ErrorCode::kBadInput, bname(0, "size"),
                    num(e.buffers[0].size) + " bytes, shape and dtype say " + num(want));
  }
  return e;
}

Result<std::map<std::string, std::string>> parse_metadata(Cursor& c) {
  std::map<std::string, std::string> out;
  EPK_TRY_ASSIGN(auto count, c.read<std::uint64_t>("metadata.entry_count"));
  if (count > c.left() / kMinMetadataEntry)
    return c.fail(ErrorCode::kBadInput, "metadata.entry_count", num(count) + " exceeds the bytes of the metadata");
  const std::string* prev = nullptr;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto mf = [&](const char* f) { return [&, f] { return "metadata[" + num(i) + "]." + f; }; };
    EPK_TRY_ASSIGN(auto key, c.read_str32(mf("key"), kMaxNameLen, /*is_name=*/true));
    EPK_TRY_ASSIGN(auto value, c.read_str32(mf("value"), UINT32_MAX, /*is_name=*/false));
    if (prev != nullptr && !(*prev < key))
      return c.fail(ErrorCode::kBadInput, mf("key")(),
                    "'" + key + "' not after '" + *prev + "' (duplicate or unsorted)");
    prev = &out.emplace_hint(out.end(), std::move(key), std::move(value))->first;
  }
  if (c.left() != 0) return c.fail(ErrorCode::kBadInput, "metadata", num(c.left()) + " trailing bytes");
  return out;
}

}  // namespace

Result<Reader> Reader::open(const std::string& path) {
  EPK_TRY_ASSIGN(MappedFile file, MappedFile::open(path));
  return over_file(std::move(file));
}

Result<Reader> Reader::open_fd(int fd, const std::string& name) {
  EPK_TRY_ASSIGN(MappedFile file, MappedFile::map_fd(fd, name));
  return over_file(std::move(file));
}

Result<Reader> Reader::over_file(MappedFile mapped) {
  Reader r;
  r.file_ = std::move(mapped);
  const std::string path = r.file_.path();
  auto file = r.file_.bytes();
  r.bytes_ = file;
  r.path_ = path;
  EPK_TRY_ASSIGN(HeaderFields h, parse_header(path, file));

  Cursor index(file.data() + h.index_offset, h.index_size, path, "index");
  EPK_TRY_ASSIGN(auto count, index.read<std::uint64_t>("index.tensor_count"));
  if (count != h.tensor_count)
    return index.fail(ErrorCode::kBadInput, "index.tensor_count",
                      num(count) + " but header.tensor_count is " + num(h.tensor_count));
  if (count > kMaxTensors)
    return index.fail(ErrorCode::kBadInput, "index.tensor_count",
                      num(count) + " exceeds the limit " + num(kMaxTensors));
  if (count > index.left() / kMinTensorEntry)
    return index.fail(ErrorCode::kBadInput, "index.tensor_count",
                      num(count) + " entries cannot fit in the " + num(index.left()) + " bytes left in the index");
  r.tensors_.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    EPK_TRY_ASSIGN(auto e, parse_tensor(index, i, h.index_offset));
    r.tensors_.push_back(std::move(e));
  }
  if (index.left() != 0) return index.fail(ErrorCode::kBadInput, "index", num(index.left()) + " trailing bytes");

  // Names are unique (rule 5.2); the sorted order also serves find().
  r.by_name_.resize(r.tensors_.size());
  for (std::uint32_t i = 0; i < r.by_name_.size(); ++i) r.by_name_[i] = i;
  std::sort(r.by_name_.begin(), r.by_name_.end(),
            [&](auto a, auto b) { return r.tensors_[a].name < r.tensors_[b].name; });
  for (std::size_t k = 1; k < r.by_name_.size(); ++k) {
    auto a = r.by_name_[k - 1], b = r.by_name_[k];
    if (r.tensors_[a].name == r.tensors_[b].name)
      return index.fail(ErrorCode::kBadInput, "tensor[" + num(std::max(a, b)) + "].name",
                        "duplicate of tensor[" + num(std::min(a, b)) + "] '" + r.tensors_[a].name + "'");
  }

  // Sections do not overlap (rule 5.7).
  if (auto o = first_overlap(
          r.tensors_.size(), [&](std::uint32_t i) { return r.tensors_[i].section_offset; },
          [&](std::uint32_t i) { return r.tensors_[i].section_size; }))
    return index.fail(ErrorCode::kBadInput,
                      "tensor[" + num(o->second) + "] '" + r.tensors_[o->second].name + "' section_offset",
                      "section overlaps that of tensor[" + num(o->first) + "] '" + r.tensors_[o->first].name + "'");

  Cursor meta(file.data() + h.metadata_offset, h.metadata_size, path, "metadata");
  EPK_TRY_ASSIGN(r.metadata_, parse_metadata(meta));

  // Everything below is bounded by the checks above: buffers lie in disjoint sections inside the data region.
  std::uint64_t used = kHeaderSize + h.index_size + h.metadata_size;
  for (const auto& t : r.tensors_)
    for (const auto& b : t.buffers) used += b.size;
  r.padding_bytes_ = h.file_size - used;
  return r;
}

Result<Reader> Reader::over_memory(std::string path, std::span<const std::uint8_t> bytes,
                                   std::vector<TensorEntry> tensors, std::map<std::string, std::string> metadata) {
  Reader r;
  r.bytes_ = bytes;
  r.path_ = std::move(path);
  r.tensors_ = std::move(tensors);
  r.metadata_ = std::move(metadata);
  for (const TensorEntry& t : r.tensors_) {
    for (const BufferRef& b : t.buffers) {
      if (b.offset > bytes.size() || b.size > bytes.size() - b.offset)
        return make_error(ErrorCode::kBadInput, r.path_ + ": tensor '" + t.name + "' buffer '" + b.name +
                                                    "' lies outside the " + num(bytes.size()) + " bytes in memory");
    }
  }
  r.by_name_.resize(r.tensors_.size());
  for (std::uint32_t i = 0; i < r.by_name_.size(); ++i) r.by_name_[i] = i;
  std::sort(r.by_name_.begin(), r.by_name_.end(),
            [&](auto a, auto b) { return r.tensors_[a].name < r.tensors_[b].name; });
  for (std::size_t k = 1; k < r.by_name_.size(); ++k) {
    if (r.tensors_[r.by_name_[k - 1]].name == r.tensors_[r.by_name_[k]].name)
      return make_error(ErrorCode::kBadInput, r.path_ + ": tensor '" + r.tensors_[r.by_name_[k]].name + "' twice");
  }
  return r;
}

const TensorEntry* Reader::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](std::uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

std::span<const std::uint8_t> Reader::buffer(const TensorEntry& t, std::size_t i) const {
  if (i >= t.buffers.size()) return {};
  const auto& b = t.buffers[i];
  // Defensive against an entry from another reader: never hand out bytes outside this map.
  if (b.offset > bytes_.size() || b.size > bytes_.size() - b.offset) return {};
  return bytes_.subspan(b.offset, b.size);
}

Result<std::span<const std::uint8_t>> Reader::buffer(const TensorEntry& t, std::string_view name) const {
  for (std::size_t i = 0; i < t.buffers.size(); ++i)
    if (t.buffers[i].name == name) return buffer(t, i);
  return make_error(ErrorCode::kNotFound,
                    path() + ": tensor '" + t.name + "': no buffer named '" + std::string(name) + "'");
}

Status Reader::verify(const TensorEntry& t) const {
  for (std::size_t i = 0; i < t.buffers.size(); ++i) EPK_TRY(verify_buffer(t, i));
  return {};
}

Status Reader::verify_buffer(const TensorEntry& t, std::size_t i) const {
  const auto& b = t.buffers[i];
  auto got = xxh3_64(buffer(t, i));
  if (got != b.xxh3)
    return make_error(ErrorCode::kChecksum, path() + ": tensor '" + t.name + "' buffers[" + num(i) + "] '" + b.name +
                                                "' checksum: stored " + hex(b.xxh3) + ", computed " + hex(got));
  return {};
}

Status Reader::verify_all() const {
  for (const auto& t : tensors_) EPK_TRY(verify(t));
  return {};
}

}  // namespace epk::container
