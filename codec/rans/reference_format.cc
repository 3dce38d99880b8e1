#include "codec/rans/reference_format.h"

#include <array>
#include <cstring>

#include <nlohmann/json.hpp>

#include "codec/common/bytes.h"
#include "codec/rans/decoder.h"

namespace epk::rans {

namespace {

constexpr std::uint64_t kAlign = 16;
constexpr std::uint64_t kLengthPrefix = 8;

struct BufferSpec {
  const char* name;
  const char* dtype;
  std::uint64_t item;
};
constexpr std::array<BufferSpec, 7> kBuffers = {{
    {"payload", "uint16", 2},
    {"offsets", "uint32", 4},
    {"states", "uint32", 4},
    {"stream_meta", "int32", 4},
    {"freq_tables", "uint16", 2},
    {"scales", "float32", 4},
    {"layout", "int64", 8},
}};

struct DTypeName {
  DType t;
  const char* name;
};
constexpr std::array<DTypeName, 14> kDTypeNames = {{
    {DType::kF32, "float32"},
    {DType::kF16, "float16"},
    {DType::kBF16, "bfloat16"},
    {DType::kF8E4M3, "float8_e4m3fn"},
    {DType::kF8E5M2, "float8_e5m2"},
    {DType::kI8, "int8"},
    {DType::kU8, "uint8"},
    {DType::kI16, "int16"},
    {DType::kU16, "uint16"},
    {DType::kI32, "int32"},
    {DType::kU32, "uint32"},
    {DType::kI64, "int64"},
    {DType::kU64, "uint64"},
    {DType::kBool, "bool"},
}};

Error bad(std::string_view name, const std::string& what) {
  return make_error(ErrorCode::kBadInput, "tensor '" + std::string(name) + "': quant_state: " + what);
}

template <class T, class A>
void copy_out(std::span<const std::byte> src, std::vector<T, A>& dst) {
  dst.resize(src.size() / sizeof(T));
  if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
}

nlohmann::json header_json(const EncodedTensor& t, std::string_view dtype) {
  const std::uint64_t tiles = t.offsets.empty() ? 0 : t.offsets.size() - 1;
  nlohmann::json j;
  j["compress_method"] = "lattice_rans";
  j["dtype"] = std::string(dtype);
  j["shape"] = {t.rows, t.cols};
  j["header"] = {{"compress_method", "lattice_rans"}};
  nlohmann::json names = nlohmann::json::array();
  nlohmann::json dtypes = nlohmann::json::array();
  for (const BufferSpec& b : kBuffers) {
    names.push_back(b.name);
    dtypes.push_back(b.dtype);
  }
  j["buffer_names"] = names;
  j["buffer_dtypes"] = dtypes;
  j["buffer_shapes"] = nlohmann::json::array({
      nlohmann::json::array({t.payload.size()}),
      nlohmann::json::array({t.offsets.size()}),
      nlohmann::json::array({tiles, 32}),
      nlohmann::json::array({t.tables.size(), 4}),
      nlohmann::json::array({t.freq_tables.size()}),
      nlohmann::json::array({t.scales.size()}),
      nlohmann::json::array({3}),
  });
  return j;
}

}  // namespace

std::optional<std::string_view> reference_dtype_name(DType t) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.t == t) return std::string_view(d.name);
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_reference_name(std::string_view name) {
  for (const DTypeName& d : kDTypeNames) {
    if (name == d.name) return d.t;
  }
  return std::nullopt;
}

Result<EncodedTensor> parse_reference_quant_state(std::span<const std::byte> blob, std::string_view name) {
  if (blob.size() < kLengthPrefix) return bad(name, "shorter than its 8-byte header length");
  const std::uint64_t header_len = load_le<std::uint64_t>(blob.data());
  std::uint64_t header_end = 0;
  if (!checked_add(kLengthPrefix, header_len, &header_end) || header_end > blob.size()) {
    return bad(name, "header length " + std::to_string(header_len) + " runs past the end (" +
                         std::to_string(blob.size()) + " bytes)");
  }
  const auto* text = reinterpret_cast<const char*>(blob.data() + kLengthPrefix);
  const nlohmann::json j = nlohmann::json::parse(text, text + header_len, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(name, "header is not a JSON object");
  for (const char* key : {"compress_method", "dtype", "shape", "buffer_names", "buffer_dtypes", "buffer_shapes"}) {
    if (!j.contains(key)) return bad(name, std::string("header lacks '") + key + "'");
  }
  if (!j["compress_method"].is_string()) return bad(name, "compress_method is not a string");
  if (j["compress_method"].get<std::string>() != "lattice_rans") {
    return make_error(ErrorCode::kUnsupported, "tensor '" + std::string(name) + "': compress_method '" +
                                                   j["compress_method"].get<std::string>() + "' is not lattice_rans");
  }
  EncodedTensor t;
  if (!j["dtype"].is_string()) return bad(name, "dtype is not a string");
  const auto dtype = dtype_from_reference_name(j["dtype"].get<std::string>());
  if (!dtype) return bad(name, "dtype '" + j["dtype"].get<std::string>() + "' unknown");
  t.dtype = *dtype;
  const nlohmann::json& shape = j["shape"];
  if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_unsigned() || !shape[1].is_number_unsigned()) {
    return bad(name, "shape is not two non-negative integers");
  }
  const std::uint64_t rows = shape[0].get<std::uint64_t>();
  const std::uint64_t cols = shape[1].get<std::uint64_t>();
  if (rows == 0 || cols == 0 || rows > 0xffffffffull || cols > 0xfffffff0ull) return bad(name, "shape out of range");
  t.rows = std::uint32_t(rows);
  t.cols = std::uint32_t(cols);

  const nlohmann::json& names = j["buffer_names"];
  const nlohmann::json& dtypes = j["buffer_dtypes"];
  const nlohmann::json& shapes = j["buffer_shapes"];
  if (!names.is_array() || !dtypes.is_array() || !shapes.is_array() || names.size() != kBuffers.size() ||
      dtypes.size() != names.size() || shapes.size() != names.size()) {
    return bad(name, "buffer_names, buffer_dtypes and buffer_shapes must list the 7 lattice_rans buffers");
  }
  std::array<std::span<const std::byte>, 7> views{};
  std::array<bool, 7> seen{};
  std::array<std::vector<std::uint64_t>, 7> dims;
  std::uint64_t offset = align_up(header_end, kAlign);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string() || !dtypes[i].is_string() || !shapes[i].is_array()) {
      return bad(name, "buffer entry " + std::to_string(i) + " malformed");
    }
    const std::string bname = names[i].get<std::string>();
    std::size_t k = 0;
    while (k < kBuffers.size() && bname != kBuffers[k].name) ++k;
    if (k == kBuffers.size()) return bad(name, "unexpected buffer '" + bname + "'");
    if (seen[k]) return bad(name, "buffer '" + bname + "' repeated");
    seen[k] = true;
    if (dtypes[i].get<std::string>() != kBuffers[k].dtype) {
      return bad(name, "buffer '" + bname + "' has dtype " + dtypes[i].get<std::string>() + ", expected " +
                           kBuffers[k].dtype);
    }
    std::uint64_t bytes = kBuffers[k].item;
    for (const nlohmann::json& d : shapes[i]) {
      if (!d.is_number_unsigned()) return bad(name, "buffer '" + bname + "' shape not non-negative integers");
      dims[k].push_back(d.get<std::uint64_t>());
      if (!checked_mul(bytes, d.get<std::uint64_t>(), &bytes)) return bad(name, "buffer '" + bname + "' too large");
    }
    std::uint64_t end = 0;
    if (!checked_add(offset, bytes, &end) || end > blob.size()) {
      return bad(name, "buffer '" + bname + "' (" + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                           ") runs past the end (" + std::to_string(blob.size()) + " bytes)");
    }
    views[k] = blob.subspan(offset, bytes);
    offset = align_up(end, kAlign);
  }
  if (offset != blob.size()) {
    return bad(name, "buffers end at " + std::to_string(offset) + " but the blob has " + std::to_string(blob.size()) +
                         " bytes");
  }
  auto rank_is = [&](std::size_t k, std::size_t r) { return dims[k].size() == r; };
  if (!rank_is(0, 1) || !rank_is(1, 1) || !rank_is(2, 2) || !rank_is(3, 2) || !rank_is(4, 1) || !rank_is(5, 1) ||
      !rank_is(6, 1)) {
    return bad(name, "buffer ranks differ from the lattice_rans layout");
  }
  if (dims[2][1] != 32) return bad(name, "states must be [tiles, 32]");
  if (dims[3][0] != 17 || dims[3][1] != 4) return bad(name, "stream_meta must be [17, 4]");
  if (dims[6][0] != 3) return bad(name, "layout must be [3]");
  if (dims[1][0] != dims[2][0] + 1) return bad(name, "offsets must have tiles + 1 entries");
  copy_out(views[0], t.payload);
  copy_out(views[1], t.offsets);
  copy_out(views[2], t.states);
  copy_out(views[3], t.tables);
  copy_out(views[4], t.freq_tables);
  copy_out(views[5], t.scales);
  std::array<std::int64_t, 3> layout{};
  std::memcpy(layout.data(), views[6].data(), 24);
  if (layout[0] <= 0 || layout[0] > 0xffffffffll || layout[1] < 0 || layout[1] > 64 || layout[2] <= 0 ||
      layout[2] > 0xffffffffll) {
    return bad(name, "layout values out of range");
  }
  t.padded_cols = std::uint32_t(layout[0]);
  t.prob_bits = std::uint32_t(layout[1]);
  t.tile_symbols = std::uint32_t(layout[2]);
  EPK_TRY(validate_stream(t.view(), name));
  return t;
}

std::uint64_t reference_quant_state_bytes(const EncodedTensor& t) {
  const auto dtype = reference_dtype_name(t.dtype);
  const std::string text = header_json(t, dtype ? *dtype : "float32").dump();
  std::uint64_t offset = align_up(kLengthPrefix + text.size(), kAlign);
  const std::uint64_t sizes[7] = {t.payload.size() * 2, t.offsets.size() * 4,     t.states.size() * 4,
                                  t.tables.size() * 16, t.freq_tables.size() * 2, t.scales.size() * 4,
                                  24};
  for (std::uint64_t s : sizes) offset = align_up(offset + s, kAlign);
  return offset;
}

Result<std::vector<std::byte>> write_reference_quant_state(const EncodedTensor& t) {
  const auto dtype = reference_dtype_name(t.dtype);
  if (!dtype) {
    return make_error(ErrorCode::kUnsupported, "write_reference_quant_state: dtype " +
                                                   std::string(dtype_name(t.dtype)) + " has no reference name");
  }
  EPK_TRY(validate_stream(t.view(), "write_reference_quant_state"));
  const std::string text = header_json(t, *dtype).dump();
  std::vector<std::byte> out(reference_quant_state_bytes(t), std::byte{0});
  store_le<std::uint64_t>(out.data(), text.size());
  std::memcpy(out.data() + kLengthPrefix, text.data(), text.size());
  std::uint64_t offset = align_up(kLengthPrefix + text.size(), kAlign);
  auto put = [&](const void* src, std::uint64_t n) {
    if (n) std::memcpy(out.data() + offset, src, n);
    offset = align_up(offset + n, kAlign);
  };
  put(t.payload.data(), t.payload.size() * 2);
  put(t.offsets.data(), t.offsets.size() * 4);
  put(t.states.data(), t.states.size() * 4);
  put(t.tables.data(), t.tables.size() * 16);
  put(t.freq_tables.data(), t.freq_tables.size() * 2);
  put(t.scales.data(), t.scales.size() * 4);
  const std::int64_t layout[3] = {t.padded_cols, t.prob_bits, t.tile_symbols};
  put(layout, 24);
  return out;
}

}  // namespace epk::rans
