// intq_io.h's questions about what an entry is and stores: kind_of, code_info and footprint_of_entry (no code is
// decoded).
#include "codec/layouts/intq_io.h"

#include "codec/layouts/intq_entry.h"
#include "codec/layouts/intq_verbatim.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts::intq {

using namespace detail;  // the internals of intq_entry.h, intq_verbatim.h

Result<Kind> kind_of(const container::Reader& reader, const container::TensorEntry& entry) {
  EPK_TRY_ASSIGN(Params p, read_params(Where{reader, entry}));
  return p.kind;
}

Result<CodeInfo> code_info(const container::Reader& reader, const container::TensorEntry& entry) {
  EPK_TRY_ASSIGN(Kind kind, kind_of(reader, entry));
  CodeInfo info;
  if (kind != Kind::kInt) {
    info.form = std::string(kind_name(kind));
    return info;
  }
  EPK_TRY_ASSIGN(IntHeader h, read_int_header(reader, entry));
  info.form = h.rans_codes ? "rans" : "packed";
  for (const auto& b : entry.buffers) {
    if (b.name == "codes" || b.name == "code_freqs" || b.name == "code_tiles") info.stored_bytes += b.size;
  }
  info.packed_bytes = packed_words(static_cast<std::uint64_t>(h.shape.padded_rows) *
                                       static_cast<std::uint64_t>(h.shape.padded_cols),
                                   h.shape.bits) * 4;
  return info;
}

Result<Footprint> footprint_of_entry(const container::Reader& reader, const container::TensorEntry& entry) {
  const Where w{reader, entry};
  EPK_TRY_ASSIGN(Params p, read_params(w));
  Footprint f;
  f.weights = entry.element_count();
  if (p.kind == Kind::kGguf) {
    EPK_TRY_ASSIGN(GgufStored g, read_gguf_entry(w, p.j));
    Footprint gf = gguf_footprint(g.type, g.n);
    gf.weights = f.weights;
    return gf;
  }
  for (const auto& b : entry.buffers) {
    if (b.name == "codes" || b.name == "code_freqs" || b.name == "code_tiles" || b.name == "weight")
      f.code_bytes += b.size;
    else if (b.name == "scales" || b.name == "absmax" || b.name == "quant_map" || b.name.rfind("nested_", 0) == 0)
      f.scale_bytes += b.size;
    else if (b.name == "zeros")
      f.zero_bytes += b.size;
    else
      f.index_bytes += b.size;
  }
  return f;
}

}  // namespace epk::layouts::intq
