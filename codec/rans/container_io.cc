#include "codec/rans/container_io.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"

namespace epk::rans {
namespace {

template <class T, class A>
std::span<const std::uint8_t> as_u8(const std::vector<T, A>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

std::string where_of(const container::Reader& r, const container::TensorEntry& e) {
  return r.path() + ": tensor '" + e.name + "'";
}

Error bad(std::string_view where, std::string_view field, std::string_view what) {
  return make_error(ErrorCode::kBadInput,
                    std::string(where) + ": lattice-rans " + std::string(field) + " " + std::string(what));
}

Result<std::uint32_t> get_u32(const nlohmann::json& j, std::string_view where, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return bad(where, std::string("params.") + key, "is missing");
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0))
    return bad(where, std::string("params.") + key, "is not a non-negative integer: " + it->dump());
  const std::uint64_t v = it->get<std::uint64_t>();
  if (v > std::numeric_limits<std::uint32_t>::max())
    return bad(where, std::string("params.") + key, "is out of range: " + it->dump());
  return std::uint32_t(v);
}

template <class T>
Result<std::span<const T>> typed(const container::Reader& r, const container::TensorEntry& e, std::string_view name,
                                 std::uint64_t expect_count, std::string_view where) {
  EPK_TRY_ASSIGN(auto bytes, r.buffer(e, name));
  if (bytes.size() % sizeof(T) != 0)
    return bad(where, "buffer '" + std::string(name) + "'",
               "has " + std::to_string(bytes.size()) + " bytes, not a multiple of " + std::to_string(sizeof(T)));
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(T) != 0)
    return bad(where, "buffer '" + std::string(name) + "'", "is not aligned to " + std::to_string(alignof(T)));
  const std::uint64_t n = bytes.size() / sizeof(T);
  if (expect_count != std::numeric_limits<std::uint64_t>::max() && n != expect_count)
    return bad(where, "buffer '" + std::string(name) + "'",
               "holds " + std::to_string(n) + " elements, expected " + std::to_string(expect_count));
  return std::span<const T>(reinterpret_cast<const T*>(bytes.data()), n);
}

constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();

}  // namespace

std::string params_json(const LatticeRansStream& s, const EncodingInfo& info, const NativeMetadata* native) {
  nlohmann::json j = {
      {"rows", s.rows},
      {"cols", s.cols},
      {"padded_cols", s.padded_cols},
      {"prob_bits", s.prob_bits},
      {"tile_symbols", s.tile_symbols},
      {"tiles", s.tiles()},
      {"target_bpp", info.target_bpp},
      {"origin", info.origin},
      {"encoder",
       {{"rdo_sweeps", info.rdo_sweeps},
        {"rdo_candidates", info.rdo_candidates},
        {"calibrate_rate", info.calibrate_rate},
        {"scale", info.scale},
        {"coarsened", info.coarsened}}},
  };
  if (info.calibrated) j["encoder"]["calibrated"] = true;
  if (!info.entropack_key.empty()) j["entropack_key"] = info.entropack_key;
  if (native != nullptr) {
    // Written only for the native profile, so a reference file is byte for byte what it was before the key existed.
    j["profile"] = profile_name(StreamProfile::kNative);
    j["count_bits"] = native->count_bits;
    j["scale_shift"] = native->scale_shift;
    j["coset1_vectors"] = native->coset1_vectors;
  }
  return j.dump();  // nlohmann's object is a std::map: keys sorted
}

ContainerForm to_container(const EncodedTensor& t, std::string name, const EncodingInfo& info) {
  ContainerForm f;
  const LatticeRansStream s = t.view();
  f.spec.name = std::move(name);
  f.spec.shape = {t.rows, t.cols};
  f.spec.dtype = t.dtype;
  f.spec.encoding = container::Encoding::kLatticeRans;
  f.spec.params_json = params_json(s, info);
  f.buffers = {
      {std::string(kPayloadBuffer), as_u8(t.payload)},        {std::string(kOffsetsBuffer), as_u8(t.offsets)},
      {std::string(kStatesBuffer), as_u8(t.states)},          {std::string(kStreamMetaBuffer), as_u8(t.tables)},
      {std::string(kFreqTablesBuffer), as_u8(t.freq_tables)}, {std::string(kScalesBuffer), as_u8(t.scales)},
  };
  return f;
}

Result<OwnedContainerForm> to_container_as(const EncodedTensor& t, std::string name, const EncodingInfo& info) {
  OwnedContainerForm out;
  if (info.profile == StreamProfile::kReference) {
    out.form = to_container(t, std::move(name), info);
    return out;
  }
  EPK_TRY_ASSIGN(NativeMetadata m, pack_native(t, native_scale_shift(t.scales)));
  auto native = std::make_shared<const NativeMetadata>(std::move(m));
  out.native = native;
  ContainerForm& f = out.form;
  f.spec.name = std::move(name);
  f.spec.shape = {t.rows, t.cols};
  f.spec.dtype = t.dtype;
  f.spec.encoding = container::Encoding::kLatticeRans;
  f.spec.params_json = params_json(t.view(), info, native.get());
  f.buffers = {
      {std::string(kPayloadBuffer), as_u8(t.payload)},
      {std::string(kWordCountsBuffer), as_u8(native->word_counts)},
      {std::string(kPackedStatesBuffer), as_u8(native->states)},
      {std::string(kPackedTablesBuffer), as_u8(native->tables)},
      {std::string(kF16ScalesBuffer), as_u8(native->scales)},
  };
  return out;
}

std::uint64_t stored_bytes_as(const EncodedTensor& t, std::string_view name, const EncodingInfo& info) {
  if (info.profile == StreamProfile::kReference) {
    const ContainerForm f = to_container(t, std::string(name), info);
    std::uint64_t b = index_entry_bytes(f.spec, f.buffers);
    for (const auto& buf : f.buffers) b += buf.bytes.size();
    return b;
  }
  const NativeSizes z = native_sizes(t);
  NativeMetadata params;  // the params_json fields only
  params.count_bits = z.count_bits;
  params.scale_shift = z.scale_shift;
  params.coset1_vectors = z.coset1_vectors;
  container::TensorSpec spec{std::string(name), {t.rows, t.cols}, t.dtype, container::Encoding::kLatticeRans,
                             params_json(t.view(), info, &params)};
  const std::vector<std::uint8_t> none;
  std::vector<container::BufferData> names;
  for (std::string_view n : {kPayloadBuffer, kWordCountsBuffer, kPackedStatesBuffer, kPackedTablesBuffer,
                             kF16ScalesBuffer}) {
    names.push_back({std::string(n), none});
  }
  // index_entry_bytes counts the buffer table, not the contents: empty views stand in for the bytes.
  return index_entry_bytes(spec, names) + 2 * t.payload.size() + z.word_counts + z.states + z.tables + z.scales;
}

Status parse_params(std::string_view json, std::string_view where, LatticeRansStream* s, EncodingInfo* info) {
  auto j = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(where, "params", "is not a JSON object");
  EPK_TRY_ASSIGN(s->rows, get_u32(j, where, "rows"));
  EPK_TRY_ASSIGN(s->cols, get_u32(j, where, "cols"));
  EPK_TRY_ASSIGN(s->padded_cols, get_u32(j, where, "padded_cols"));
  EPK_TRY_ASSIGN(s->prob_bits, get_u32(j, where, "prob_bits"));
  EPK_TRY_ASSIGN(s->tile_symbols, get_u32(j, where, "tile_symbols"));
  EPK_TRY_ASSIGN(auto tiles, get_u32(j, where, "tiles"));
  (void)tiles;  // checked against the offsets buffer by from_container
  if (s->rows == 0 || s->cols == 0) return bad(where, "params.rows/cols", "must be positive");
  if (s->padded_cols != (std::uint64_t(s->cols) + 7) / 8 * 8)
    return bad(where, "params.padded_cols", std::to_string(s->padded_cols) + " is not cols rounded up to 8");
  if (s->prob_bits < 1 || s->prob_bits > 15) return bad(where, "params.prob_bits", "is outside [1, 15]");
  if (s->tile_symbols == 0) return bad(where, "params.tile_symbols", "is 0");
  StreamProfile profile = StreamProfile::kReference;
  if (auto it = j.find("profile"); it != j.end()) {
    if (!it->is_string() || (*it != "native" && *it != "reference"))
      return bad(where, "params.profile", "is not \"native\" or \"reference\": " + it->dump());
    if (*it == "native") profile = StreamProfile::kNative;
  }
  if (info) {
    *info = EncodingInfo{};
    info->profile = profile;
    if (auto it = j.find("target_bpp"); it != j.end()) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
        return bad(where, "params.target_bpp", "is not a non-negative number");
      info->target_bpp = it->get<double>();
    }
    if (auto it = j.find("origin"); it != j.end()) {
      if (!it->is_string()) return bad(where, "params.origin", "is not a string");
      info->origin = it->get<std::string>();
    }
    if (auto it = j.find("entropack_key"); it != j.end()) {
      if (!it->is_string()) return bad(where, "params.entropack_key", "is not a string");
      info->entropack_key = it->get<std::string>();
    }
    if (auto it = j.find("encoder"); it != j.end()) {
      if (!it->is_object()) return bad(where, "params.encoder", "is not an object");
      const auto& enc = *it;
      auto num = [&](const char* k, double* out) -> Status {
        auto f = enc.find(k);
        if (f == enc.end()) return {};
        if (!f->is_number()) return bad(where, std::string("params.encoder.") + k, "is not a number");
        *out = f->get<double>();
        return {};
      };
      double rdo = 0, cand = 0, scale = 0;
      EPK_TRY(num("rdo_sweeps", &rdo));
      EPK_TRY(num("rdo_candidates", &cand));
      EPK_TRY(num("scale", &scale));
      if (!(rdo >= 0 && rdo <= 1000)) return bad(where, "params.encoder.rdo_sweeps", "is outside [0, 1000]");
      if (!(cand >= 0 && cand <= 1000)) return bad(where, "params.encoder.rdo_candidates", "is outside [0, 1000]");
      info->rdo_sweeps = int(rdo);
      info->rdo_candidates = int(cand);
      info->scale = scale;
      for (auto [k, out] : {std::pair{"calibrate_rate", &info->calibrate_rate},
                            {"coarsened", &info->coarsened},
                            {"calibrated", &info->calibrated}}) {
        auto f = enc.find(k);
        if (f == enc.end()) continue;
        if (!f->is_boolean()) return bad(where, std::string("params.encoder.") + k, "is not a boolean");
        *out = f->get<bool>();
      }
    }
  }
  return {};
}

Status parse_entry_params(const container::Reader& r, const container::TensorEntry& e, LatticeRansStream* s,
                          EncodingInfo* info) {
  const std::string where = where_of(r, e);
  EPK_TRY(parse_params(e.params_json, where, s, info));
  if (e.shape.size() != 2 || e.shape[0] != s->rows || e.shape[1] != s->cols)
    return bad(where, "shape",
               "does not match params rows x cols (" + std::to_string(s->rows) + " x " + std::to_string(s->cols) + ")");
  return {};
}

namespace {

Result<std::int64_t> get_i64(const nlohmann::json& j, std::string_view where, const char* key, std::int64_t lo,
                             std::int64_t hi) {
  auto it = j.find(key);
  if (it == j.end()) return bad(where, std::string("params.") + key, "is missing");
  if (!it->is_number_integer()) return bad(where, std::string("params.") + key, "is not an integer: " + it->dump());
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) {
    return bad(where, std::string("params.") + key,
               it->dump() + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

// The native profile's buffers, expanded into arrays `out` owns, then validated as any stream.
Result<StoredStream> native_from_container(const container::Reader& r, const container::TensorEntry& e,
                                           StoredStream out, const std::string& where) {
  LatticeRansStream& s = out.stream;
  if (e.buffers.size() != kNativeBuffers)
    return bad(where, "buffers", "count is " + std::to_string(e.buffers.size()) + ", expected 5 (native profile)");
  const auto j = nlohmann::json::parse(e.params_json, nullptr, false);  // parse_entry_params parsed it already
  NativeView v;
  EPK_TRY_ASSIGN(const std::int64_t count_bits, get_i64(j, where, "count_bits", 0, 32));
  EPK_TRY_ASSIGN(const std::int64_t shift, get_i64(j, where, "scale_shift", -300, 300));
  EPK_TRY_ASSIGN(const std::int64_t coset1, get_i64(j, where, "coset1_vectors", 0, std::int64_t(1) << 62));
  v.count_bits = std::uint32_t(count_bits);
  v.scale_shift = std::int32_t(shift);
  v.coset1_vectors = std::uint64_t(coset1);
  const std::uint64_t tiles = tiles_for_vectors(s.vectors(), s.tile_symbols);
  if (j.value("tiles", std::uint64_t(0)) != tiles)
    return bad(where, "params.tiles", "does not match the geometry (" + std::to_string(tiles) + " tiles)");
  EPK_TRY_ASSIGN(s.payload, typed<std::uint16_t>(r, e, kPayloadBuffer, kAny, where));
  EPK_TRY_ASSIGN(v.word_counts, typed<std::uint8_t>(r, e, kWordCountsBuffer, kAny, where));
  EPK_TRY_ASSIGN(v.states, typed<std::uint8_t>(r, e, kPackedStatesBuffer, kAny, where));
  EPK_TRY_ASSIGN(v.tables, typed<std::uint8_t>(r, e, kPackedTablesBuffer, kAny, where));
  EPK_TRY_ASSIGN(v.scales, typed<std::uint16_t>(r, e, kF16ScalesBuffer, s.rows, where));
  EPK_TRY_ASSIGN(ExpandedMetadata expanded, expand_native(v, s, where + ": native profile"));
  auto owned = std::make_shared<const ExpandedMetadata>(std::move(expanded));
  s = with_expanded(s, *owned);
  out.expanded = std::move(owned);
  EPK_TRY(validate_stream(s, where));
  return out;
}

}  // namespace

Result<StoredStream> from_container(const container::Reader& r, const container::TensorEntry& e) {
  const std::string where = where_of(r, e);
  if (e.encoding != container::Encoding::kLatticeRans)
    return make_error(
        ErrorCode::kUnsupported,
        where + ": encoding is " + std::string(container::encoding_name(e.encoding)) + ", not lattice-rans");
  if (!rate::encode_input_supported(e.dtype))
    return make_error(ErrorCode::kUnsupported, where + ": lattice-rans dtype " + std::string(dtype_name(e.dtype)) +
                                                   " is not a supported source");
  StoredStream out;
  out.dtype = e.dtype;
  LatticeRansStream& s = out.stream;
  EPK_TRY(parse_entry_params(r, e, &s, &out.info));
  if (out.info.profile == StreamProfile::kNative) return native_from_container(r, e, std::move(out), where);
  if (e.buffers.size() != kStoredBuffers)
    return bad(where, "buffers", "count is " + std::to_string(e.buffers.size()) + ", expected 6");
  EPK_TRY_ASSIGN(s.payload, typed<std::uint16_t>(r, e, kPayloadBuffer, kAny, where));
  EPK_TRY_ASSIGN(s.offsets, typed<std::uint32_t>(r, e, kOffsetsBuffer, kAny, where));
  if (s.offsets.empty()) return bad(where, "buffer 'offsets'", "is empty");
  auto tiles_param = nlohmann::json::parse(e.params_json, nullptr, false).value("tiles", std::uint64_t(0));
  if (tiles_param != s.offsets.size() - 1)
    return bad(where, "params.tiles",
               std::to_string(tiles_param) + " does not match the offsets buffer (" +
                   std::to_string(s.offsets.size() - 1) + " tiles)");
  EPK_TRY_ASSIGN(s.states, typed<std::uint32_t>(r, e, kStatesBuffer, std::uint64_t(s.tiles()) * kLanes, where));
  EPK_TRY_ASSIGN(s.tables, typed<TableMeta>(r, e, kStreamMetaBuffer, kTables, where));
  EPK_TRY_ASSIGN(s.freq_tables, typed<std::uint16_t>(r, e, kFreqTablesBuffer, kAny, where));
  EPK_TRY_ASSIGN(s.scales, typed<float>(r, e, kScalesBuffer, s.rows, where));
  EPK_TRY(validate_stream(s, where));
  return out;
}

EncodedTensor to_owned(const StoredStream& st) {
  const LatticeRansStream& s = st.stream;
  EncodedTensor t;
  t.rows = s.rows;
  t.cols = s.cols;
  t.padded_cols = s.padded_cols;
  t.prob_bits = s.prob_bits;
  t.tile_symbols = s.tile_symbols;
  t.dtype = st.dtype;
  t.payload.assign(s.payload.begin(), s.payload.end());
  t.offsets.assign(s.offsets.begin(), s.offsets.end());
  t.states.assign(s.states.begin(), s.states.end());
  t.tables.assign(s.tables.begin(), s.tables.end());
  t.freq_tables.assign(s.freq_tables.begin(), s.freq_tables.end());
  t.scales.assign(s.scales.begin(), s.scales.end());
  return t;
}

namespace {
std::uint64_t entry_bytes(std::size_t name, std::size_t rank, std::size_t params) {
  // str32 name, rank/dtype/encoding/reserved bytes, shape, str32 params, section offset and size, buffer count
  return 4 + name + 4 + 8 * rank + 4 + params + 8 + 8 + 4;
}
constexpr std::uint64_t kBufferEntryFixed = 4 + 8 + 8 + 8;  // str32 length, offset, size, xxh3
}  // namespace

std::uint64_t index_entry_bytes(const container::TensorEntry& e) {
  std::uint64_t n = entry_bytes(e.name.size(), e.shape.size(), e.params_json.size());
  for (const auto& b : e.buffers) n += kBufferEntryFixed + b.name.size();
  return n;
}

std::uint64_t index_entry_bytes(const container::TensorSpec& spec, const std::vector<container::BufferData>& buffers) {
  std::uint64_t n = entry_bytes(spec.name.size(), spec.shape.size(), spec.params_json.size());
  for (const auto& b : buffers) n += kBufferEntryFixed + b.name.size();
  return n;
}

std::uint64_t stored_bytes(const container::TensorEntry& e) {
  std::uint64_t n = index_entry_bytes(e);
  for (const auto& b : e.buffers) n += b.size;
  return n;
}

}  // namespace epk::rans
