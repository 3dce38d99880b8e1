#include "codec/describe/tensor_details.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "codec/layouts/intq_io.h"
#include "codec/rans/container_io.h"

namespace epk::describe {
namespace {

// The encoding parameters of a lattice-rans tensor (params_json and its rows and cols against the shape checked by
// codec/rans/container_io; the shape's own rules by the reader at open).
Result<TensorDetails> lattice_rans(const container::Reader& reader, const container::TensorEntry& t) {
  rans::LatticeRansStream s;
  rans::EncodingInfo info;
  EPK_TRY(rans::parse_entry_params(reader, t, &s, &info));
  const std::uint64_t stored = rans::stored_bytes(t);
  const std::uint64_t n = t.element_count();
  // From the geometry, in either profile (from_container holds params.tiles and the buffers to it).
  const auto tiles = std::uint32_t(rans::tiles_for_vectors(s.vectors(), s.tile_symbols));
  const nlohmann::json j{{"target_bpp", info.target_bpp},
                         {"stored_bytes", stored},
                         {"stored_bpp", n ? 8.0 * double(stored) / double(n) : 0.0},
                         {"prob_bits", s.prob_bits},
                         {"tile_symbols", s.tile_symbols},
                         {"tiles", tiles},
                         {"padded_cols", s.padded_cols},
                         {"rdo_sweeps", info.rdo_sweeps},
                         {"scale", info.scale},
                         {"coarsened", info.coarsened},
                         {"origin", info.origin},
                         {"profile", rans::profile_name(info.profile)}};
  char target[32] = "-";
  if (info.target_bpp > 0) std::snprintf(target, sizeof target, "%.3f", info.target_bpp);
  char line[256];
  std::snprintf(line, sizeof line, "target %s bpp, prob bits %u, %u tiles of %u symbols, rdo %d, %s profile, %s",
                target, unsigned(s.prob_bits), tiles, unsigned(s.tile_symbols), int(info.rdo_sweeps),
                std::string(rans::profile_name(info.profile)).c_str(),
                info.origin == "entropack" ? "imported from entropack" : "encoded by epk");
  return TensorDetails{"lattice_rans", j.dump(), line};
}

// Effective bits per weight of an intq tensor, split as FORMAT.md 11.6 says (codec/layouts/intq_io.h checks it).
Result<TensorDetails> intq(const container::Reader& reader, const container::TensorEntry& t) {
  EPK_TRY_ASSIGN(auto f, layouts::intq::footprint_of_entry(reader, t));
  auto per = [&](std::uint64_t b) { return f.weights ? 8.0 * static_cast<double>(b) / f.weights : 0.0; };
  EPK_TRY_ASSIGN(auto codes, layouts::intq::code_info(reader, t));
  const auto params = nlohmann::json::parse(t.params_json, nullptr, false);
  const std::string kind = params.is_object() ? params.value("kind", "") : "";
  const nlohmann::json j{{"kind", kind},
                         {"codes", codes.form},
                         {"code_bytes", codes.stored_bytes},
                         {"packed_code_bytes", codes.packed_bytes},
                         {"bits_per_weight", f.bits_per_weight()},
                         {"codes_bpw", per(f.code_bytes)},
                         {"scales_bpw", per(f.scale_bytes)},
                         {"zeros_bpw", per(f.zero_bytes)},
                         {"indices_bpw", per(f.index_bytes)}};
  // The split of the buffers alone; the tensor's stored rate is the listing's own column.
  char line[256];
  std::snprintf(line, sizeof line,
                "intq %s, codes %s: buffers per weight = codes %.3f + scales %.3f + zeros %.3f + indices %.3f bits",
                kind.c_str(), std::string(codes.form).c_str(), per(f.code_bytes), per(f.scale_bytes),
                per(f.zero_bytes), per(f.index_bytes));
  return TensorDetails{"intq", j.dump(), line};
}

}  // namespace

Result<TensorDetails> tensor_details(const container::Reader& reader, const container::TensorEntry& entry) {
  switch (entry.encoding) {
    case container::Encoding::kLatticeRans: return lattice_rans(reader, entry);
    case container::Encoding::kIntq: return intq(reader, entry);
    default: return TensorDetails{};
  }
}

}  // namespace epk::describe
