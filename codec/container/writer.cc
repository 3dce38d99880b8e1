#include "codec/container/writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/shape_rules.h"

namespace epk::container {
namespace {

constexpr std::size_t kWriteChunk = 4u << 20;

Error invalid(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, path + ": " + what);
}

void append_str32(std::string& out, std::string_view s) {
  append_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

bool valid_name(std::string_view s) { return !s.empty() && s.size() <= kMaxNameLen && is_valid_name_utf8(s); }

}  // namespace

Writer::Writer(Writer&& other) noexcept
    : file_(std::move(other.file_)),
      metadata_(std::move(other.metadata_)),
      entries_(std::move(other.entries_)),
      names_(std::move(other.names_)),
      reserved_(std::exchange(other.reserved_, 0)),
      filled_(other.filled_.exchange(0)),
      open_(std::exchange(other.open_, false)),
      failed_(other.failed_.exchange(false)) {}

Writer& Writer::operator=(Writer&& other) noexcept {
  if (this != &other) {
    file_ = std::move(other.file_);  // AtomicFileWriter releases (unlinks) ours first
    metadata_ = std::move(other.metadata_);
    entries_ = std::move(other.entries_);
    names_ = std::move(other.names_);
    reserved_ = std::exchange(other.reserved_, 0);
    filled_ = other.filled_.exchange(0);
    open_ = std::exchange(other.open_, false);
    failed_ = other.failed_.exchange(false);
  }
  return *this;
}

Result<Writer> Writer::create(const std::string& path, std::map<std::string, std::string> metadata) {
  for (const auto& [k, v] : metadata) {
    if (!valid_name(k)) return invalid(path, "metadata key '" + k + "': empty, too long or not UTF-8");
    if (!is_valid_utf8(v)) return invalid(path, "metadata value of '" + k + "': not UTF-8");
  }
  Writer w;
  EPK_TRY_ASSIGN(w.file_, AtomicFileWriter::create(path));
  w.metadata_ = std::move(metadata);
  std::uint8_t zeros[kHeaderSize] = {};
  EPK_TRY(w.file_.write(zeros, sizeof(zeros)));  // patched by finish()
  w.open_ = true;
  return w;
}

Status Writer::check_usable() const {
  if (failed_) return make_error(ErrorCode::kIo, path() + ": an earlier write failed; the file is abandoned");
  if (!open_) return make_error(ErrorCode::kInternal, path() + ": writer is not open (finished or moved from)");
  return {};
}

Status Writer::validate(const TensorSpec& spec, std::span<const BufferShape> buffers) const {
  const std::string& p = path();
  if (!valid_name(spec.name)) return invalid(p, "tensor name '" + spec.name + "': empty, too long or not UTF-8");
  const std::string t = "tensor '" + spec.name + "'";
  if (names_.contains(spec.name)) return invalid(p, t + ": duplicate name");
  if (entries_.size() >= kMaxTensors) return invalid(p, t + ": the file already holds the most tensors (2^24)");
  if (!dtype_from_code(static_cast<std::uint32_t>(spec.dtype))) return invalid(p, t + ": unknown dtype");
  if (!encoding_from_code(static_cast<std::uint32_t>(spec.encoding))) return invalid(p, t + ": unknown encoding");
  if (auto fault = check_shape(spec.encoding, spec.dtype, spec.shape))
    return invalid(p, t + ": " + fault->field + ": " + fault->detail);
  std::uint64_t count = 1;
  for (auto d : spec.shape) count *= d;  // checked above
  const std::uint64_t bits = count * static_cast<std::uint64_t>(dtype_bits(spec.dtype));
  const std::string& params = spec.params_json.empty() ? std::string("{}") : spec.params_json;
  if (params.size() > kMaxParamsLen) return invalid(p, t + ": params longer than 1 MiB");
  if (!is_valid_utf8(params)) return invalid(p, t + ": params not UTF-8");
  auto json = nlohmann::json::parse(params, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return invalid(p, t + ": params is not a JSON object");
  if (buffers.size() > kMaxBuffers) return invalid(p, t + ": more than 256 buffers");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (!valid_name(buffers[i].name))
      return invalid(p, t + ": buffer " + std::to_string(i) + " name empty, too long or not UTF-8");
    for (std::size_t j = 0; j < i; ++j)
      if (buffers[j].name == buffers[i].name) return invalid(p, t + ": duplicate buffer '" + buffers[i].name + "'");
  }
  if (spec.encoding == Encoding::kRaw) {
    if (buffers.size() != 1 || buffers[0].name != kRawBufferName)
      return invalid(p, t + ": a raw tensor has exactly one buffer named 'data'");
    std::uint64_t want = bits / 8 + (bits % 8 != 0);
    if (buffers[0].size != want)
      return invalid(p, t + ": raw buffer holds " + std::to_string(buffers[0].size) +
                            " bytes, shape and dtype say " + std::to_string(want));
  }
  return {};
}

std::vector<BufferShape> buffer_shapes(std::span<const BufferData> buffers) {
  std::vector<BufferShape> shapes;
  shapes.reserve(buffers.size());
  for (const auto& b : buffers) shapes.push_back({b.name, b.bytes.size()});
  return shapes;
}

Status Writer::add_tensor(const TensorSpec& spec, std::span<const BufferData> buffers) {
  EPK_TRY_ASSIGN(Reservation r, reserve_tensor(spec, buffer_shapes(buffers)));
  return fill_tensor(r, buffers);
}

Result<Writer::Reservation> Writer::reserve_tensor(const TensorSpec& spec, std::span<const BufferShape> buffers) {
  EPK_TRY(check_usable());
  EPK_TRY(validate(spec, buffers));

  TensorEntry e;
  e.name = spec.name;
  e.shape = spec.shape;
  e.dtype = spec.dtype;
  e.encoding = spec.encoding;
  e.params_json = spec.params_json.empty() ? "{}" : spec.params_json;
  std::uint64_t end = 0;
  for (const auto& b : buffers) {
    BufferRef r;
    r.name = b.name;
    r.offset = align_up(end, kBufferAlign);  // relative until the section is placed
    r.size = b.size;
    if (!checked_add(r.offset, r.size, &end))
      return invalid(path(), "tensor '" + spec.name + "': section size overflows");
    e.buffers.push_back(std::move(r));
  }
  e.section_size = end;
  // The padding before the section and between its buffers is reserved and never written: it reads as zero.
  const std::uint64_t at = file_.position();
  file_.reserve(align_up(at, section_alignment(e.section_size)) - at);
  e.section_offset = file_.reserve(e.section_size);
  for (auto& b : e.buffers) b.offset += e.section_offset;
  names_.insert(e.name);
  entries_.push_back(std::move(e));
  ++reserved_;
  return Reservation(&entries_.back());
}

Status Writer::fill_tensor(Reservation r, std::span<const BufferData> buffers) {
  if (failed_) return make_error(ErrorCode::kIo, path() + ": an earlier write failed; the file is abandoned");
  TensorEntry* e = r.entry_;
  if (e == nullptr || buffers.size() != e->buffers.size())
    return make_error(ErrorCode::kInternal, path() + ": fill_tensor does not match a reservation");
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name != e->buffers[i].name || buffers[i].bytes.size() != e->buffers[i].size)
      return make_error(ErrorCode::kInternal,
                        path() + ": tensor '" + e->name + "': buffer '" + buffers[i].name + "' is not as reserved");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    // Hash and write chunk by chunk, so each chunk is read once while it is cache-hot (a buffer may be GBs of a
    // mapped source file).
    Xxh3Stream hash;
    std::uint64_t at = e->buffers[i].offset;
    auto rest = buffers[i].bytes;
    while (!rest.empty()) {
      auto chunk = rest.first(std::min<std::size_t>(rest.size(), kWriteChunk));
      hash.update(chunk);
      if (Status st = file_.write_reserved(at, chunk); !st) {
        failed_ = true;
        return st;
      }
      at += chunk.size();
      rest = rest.subspan(chunk.size());
    }
    file_.start_writeback(e->buffers[i].offset, e->buffers[i].size);
    e->buffers[i].xxh3 = hash.digest();
  }
  filled_.fetch_add(1, std::memory_order_release);
  return {};
}

std::string Writer::encode_index() const {
  std::string out;
  append_le<std::uint64_t>(out, entries_.size());
  for (const auto& e : entries_) {
    append_str32(out, e.name);
    out.push_back(static_cast<char>(e.shape.size()));
    out.push_back(static_cast<char>(e.dtype));
    out.push_back(static_cast<char>(e.encoding));
    out.push_back(0);
    for (auto d : e.shape) append_le<std::uint64_t>(out, d);
    append_str32(out, e.params_json);
    append_le<std::uint64_t>(out, e.section_offset);
    append_le<std::uint64_t>(out, e.section_size);
    append_le<std::uint32_t>(out, static_cast<std::uint32_t>(e.buffers.size()));
    for (const auto& b : e.buffers) {
      append_str32(out, b.name);
      append_le<std::uint64_t>(out, b.offset - e.section_offset);
      append_le<std::uint64_t>(out, b.size);
      append_le<std::uint64_t>(out, b.xxh3);
    }
  }
  return out;
}

std::string Writer::encode_metadata() const {
  std::string out;
  append_le<std::uint64_t>(out, metadata_.size());
  for (const auto& [k, v] : metadata_) {  // std::map: ascending bytewise, as rule 6 wants
    append_str32(out, k);
    append_str32(out, v);
  }
  return out;
}

Status Writer::finish() {
  EPK_TRY(check_usable());
  if (filled_.load(std::memory_order_acquire) != reserved_)
    return make_error(ErrorCode::kInternal, path() + ": finish before every reserved tensor was written");
  failed_ = true;
  const std::string index = encode_index();
  const std::string meta = encode_metadata();
  EPK_TRY(file_.pad_to(kBufferAlign));
  const std::uint64_t index_offset = file_.position();
  EPK_TRY(file_.write(as_bytes(index)));
  EPK_TRY(file_.pad_to(kBufferAlign));
  const std::uint64_t metadata_offset = file_.position();
  EPK_TRY(file_.write(as_bytes(meta)));

  std::uint8_t h[kHeaderSize] = {};
  for (std::size_t i = 0; i < kMagic.size(); ++i) h[header::kMagicAt + i] = kMagic[i];
  store_le<std::uint32_t>(h + header::kVersionAt, kVersion);
  store_le<std::uint32_t>(h + header::kFlagsAt, 0);
  store_le<std::uint64_t>(h + header::kFileSizeAt, file_.position());
  store_le<std::uint64_t>(h + header::kIndexOffsetAt, index_offset);
  store_le<std::uint64_t>(h + header::kIndexSizeAt, index.size());
  store_le<std::uint64_t>(h + header::kIndexChecksumAt, xxh3_64(as_bytes(index)));
  store_le<std::uint64_t>(h + header::kMetadataOffsetAt, metadata_offset);
  store_le<std::uint64_t>(h + header::kMetadataSizeAt, meta.size());
  store_le<std::uint64_t>(h + header::kMetadataChecksumAt, xxh3_64(as_bytes(meta)));
  store_le<std::uint64_t>(h + header::kTensorCountAt, entries_.size());
  store_le<std::uint64_t>(h + header::kHeaderChecksumAt,
                          xxh3_64(std::span<const std::uint8_t>(h, header::kHeaderChecksumAt)));
  EPK_TRY(file_.write_at(0, std::span<const std::uint8_t>(h, kHeaderSize)));
  EPK_TRY(file_.commit());
  failed_ = false;
  open_ = false;
  return {};
}

}  // namespace epk::container
