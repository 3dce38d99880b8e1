#include "daemon/epk_decode.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/rans/decoder.h"

namespace epk::daemon {
namespace {

Error bad(const container::Reader& r, const container::TensorEntry& t, const std::string& what) {
  return Error{ErrorCode::kBadInput, r.path() + ": tensor '" + t.name + "': " + what};
}

template <typename T>
Result<std::span<const T>> typed_buffer(const container::Reader& r, const container::TensorEntry& t,
                                        std::string_view name) {
  EPK_TRY_ASSIGN(std::span<const std::uint8_t> bytes, r.buffer(t, name));
  if (bytes.size() % sizeof(T) != 0) {
    return bad(r, t, "buffer '" + std::string(name) + "' holds " + std::to_string(bytes.size()) +
                         " bytes, not a whole number of " + std::to_string(sizeof(T)) + "-byte elements");
  }
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(T) != 0) {
    return bad(r, t, "buffer '" + std::string(name) + "' is not aligned");
  }
  return std::span<const T>(reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T));
}

}  // namespace

Result<rans::LatticeRansStream> lattice_stream_view(const container::Reader& reader, const container::TensorEntry& t) {
  auto params = nlohmann::json::parse(t.params_json, nullptr, false);
  if (params.is_discarded() || !params.is_object()) return bad(reader, t, "params: not a JSON object");
  auto field = [&](const char* key, std::uint32_t* out) -> Status {
    auto it = params.find(key);
    if (it == params.end() || !it->is_number_unsigned() ||
        it->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      return bad(reader, t, std::string("params.") + key + ": missing or not an unsigned 32-bit integer");
    }
    *out = it->get<std::uint32_t>();
    return {};
  };
  rans::LatticeRansStream s;
  EPK_TRY(field("rows", &s.rows));
  EPK_TRY(field("cols", &s.cols));
  EPK_TRY(field("padded_cols", &s.padded_cols));
  EPK_TRY(field("prob_bits", &s.prob_bits));
  EPK_TRY(field("tile_symbols", &s.tile_symbols));
  if (t.shape.size() != 2 || t.shape[0] != s.rows || t.shape[1] != s.cols) {
    return bad(reader, t, "shape does not match params rows " + std::to_string(s.rows) + " x cols " +
                              std::to_string(s.cols));
  }
  EPK_TRY_ASSIGN(s.payload, typed_buffer<std::uint16_t>(reader, t, "payload"));
  EPK_TRY_ASSIGN(s.offsets, typed_buffer<std::uint32_t>(reader, t, "offsets"));
  EPK_TRY_ASSIGN(s.states, typed_buffer<std::uint32_t>(reader, t, "states"));
  EPK_TRY_ASSIGN(s.tables, typed_buffer<rans::TableMeta>(reader, t, "stream_meta"));
  EPK_TRY_ASSIGN(s.freq_tables, typed_buffer<std::uint16_t>(reader, t, "freq_tables"));
  EPK_TRY_ASSIGN(s.scales, typed_buffer<float>(reader, t, "scales"));
  if (Status v = rans::validate_stream(s, t.name); !v) {
    return Error{v.error().code, reader.path() + ": " + v.error().message};  // the decoder names the tensor
  }
  return s;
}

Status decode_lattice(const rans::LatticeRansStream& s, std::string_view name, DType out_type,
                      std::span<std::byte> dst) {
  return rans::decode(s, name, out_type, dst, 1);
}

}  // namespace epk::daemon
