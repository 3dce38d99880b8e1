// intq_io.h's "int" readers: read_int_header (the params, checked) and read_int (every buffer too).
#include "codec/layouts/intq_io.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "codec/layouts/intq_codes.h"
#include "codec/layouts/intq_entry.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts::intq {

using namespace detail;  // the internals of intq_entry.h, intq_codes.h

Result<IntHeader> read_int_header(const container::Reader& reader, const container::TensorEntry& entry) {
  const Where w{reader, entry};
  EPK_TRY_ASSIGN(Params p, read_params(w));
  if (p.kind != Kind::kInt) return w.bad("params.kind", "'" + std::string(kind_name(p.kind)) + "', not 'int'");
  const json& j = p.j;
  IntHeader h;
  QuantTensor& t = h.shape;
  EPK_TRY_ASSIGN(std::int64_t bits, get_int(w, j, "bits", 1, 8));
  t.bits = static_cast<int>(bits);
  EPK_TRY_ASSIGN(t.padded_rows, get_int(w, j, "padded_rows", 0, kMaxExtent));
  EPK_TRY_ASSIGN(t.padded_cols, get_int(w, j, "padded_cols", 0, kMaxExtent));
  EPK_TRY_ASSIGN(t.rows, get_int(w, j, "rows", 0, t.padded_rows));
  EPK_TRY_ASSIGN(t.cols, get_int(w, j, "cols", 0, t.padded_cols));
  const std::uint64_t n_codes = static_cast<std::uint64_t>(t.padded_rows) * static_cast<std::uint64_t>(t.padded_cols);
  if (n_codes > kMaxElements) return w.bad("params.padded_rows", "padded_rows * padded_cols too large");
  // Padding is what a layout's alignment adds (a group, 16 rows, 64 columns). Bounding it keeps the codes a reader
  // allocates close to the logical tensor, whose size the caller chose to decode: rANS-coded codes of one symbol
  // cost no payload, so the stored bytes alone would not bound them.
  if (t.padded_rows - t.rows > kMaxPadding) return w.bad("params.padded_rows", "more than 4096 rows of padding");
  if (t.padded_cols - t.cols > kMaxPadding) return w.bad("params.padded_cols", "more than 4096 columns of padding");
  // A group may be longer than the tensor (group 128 on a 64-row layer): only its positivity and bound matter.
  EPK_TRY_ASSIGN(t.group_size, get_int(w, j, "group_size", 1, kMaxExtent));
  EPK_TRY_ASSIGN(t.num_groups,
                 get_int(w, j, "num_groups", t.padded_rows > 0 ? 1 : 0, std::max<std::int64_t>(t.padded_rows, 1)));
  EPK_TRY_ASSIGN(std::string sdt, get_string(w, j, "scale_dtype"));
  auto scale_dtype = dtype_from_name(sdt);
  if (!scale_dtype || (*scale_dtype != DType::kF16 && *scale_dtype != DType::kBF16 && *scale_dtype != DType::kF32)) {
    return w.bad("params.scale_dtype", "'" + sdt + "' is not F16, BF16 or F32");
  }
  t.scale_dtype = *scale_dtype;
  EPK_TRY_ASSIGN(std::string codes_form, get_string(w, j, "codes"));
  if (codes_form != "packed" && codes_form != "rans") {
    return w.bad("params.codes", "'" + codes_form + "' is neither 'packed' nor 'rans'");
  }
  h.rans_codes = codes_form == "rans";
  if (h.rans_codes) {
    EPK_TRY_ASSIGN(std::int64_t pb, get_int(w, j, "code_prob_bits", rans::symbols::kMinProbBits,
                                            rans::symbols::kMaxProbBits));
    EPK_TRY_ASSIGN(std::int64_t ts, get_int(w, j, "code_tile_symbols", 1, kMaxExtent));
    h.code_prob_bits = static_cast<int>(pb);
    h.code_tile_symbols = static_cast<std::uint32_t>(ts);
  }
  EPK_TRY_ASSIGN(std::string zeros_form, get_string(w, j, "zeros"));
  if (zeros_form != "packed" && zeros_form != "symmetric") {
    return w.bad("params.zeros", "'" + zeros_form + "' is neither 'packed' nor 'symmetric'");
  }
  h.symmetric = zeros_form == "symmetric";
  EPK_TRY_ASSIGN(h.has_g_idx, get_bool(w, j, "g_idx"));
  EPK_TRY_ASSIGN(h.has_perm, get_bool(w, j, "perm"));
  EPK_TRY(get_string(w, j, "source"));
  const std::uint64_t want_shape[] = {static_cast<std::uint64_t>(t.cols), static_cast<std::uint64_t>(t.rows)};
  EPK_TRY(check_shape(w, want_shape));
  if (!h.has_g_idx && t.num_groups != (t.padded_rows + t.group_size - 1) / t.group_size) {
    return w.bad("params.num_groups", "does not match padded_rows / group_size for static groups");
  }
  const std::uint64_t n_groups = static_cast<std::uint64_t>(t.num_groups) * static_cast<std::uint64_t>(t.padded_cols);
  if (n_groups > kMaxElements) return w.bad("params.num_groups", "num_groups * padded_cols too large");
  return h;
}

Result<QuantTensor> read_int(const container::Reader& reader, const container::TensorEntry& entry) {
  const Where w{reader, entry};
  EPK_TRY_ASSIGN(IntHeader h, read_int_header(reader, entry));
  QuantTensor t = std::move(h.shape);
  const bool has_g_idx = h.has_g_idx, has_perm = h.has_perm;
  const std::uint64_t n_codes = static_cast<std::uint64_t>(t.padded_rows) * static_cast<std::uint64_t>(t.padded_cols);
  const bool sym = h.symmetric;
  if (h.rans_codes) {
    EPK_TRY(only_buffers(w, {"codes", "code_freqs", "code_tiles", "scales", "zeros", "g_idx", "perm"}));
  } else {
    EPK_TRY(only_buffers(w, {"codes", "scales", "zeros", "g_idx", "perm"}));
  }
  const std::uint64_t n_groups = static_cast<std::uint64_t>(t.num_groups) * static_cast<std::uint64_t>(t.padded_cols);

  if (h.rans_codes) {
    EPK_TRY(decode_rans_codes(w, t.bits, h.code_prob_bits, h.code_tile_symbols, n_codes, &t.codes));
  } else {
    EPK_TRY_ASSIGN(auto codes, need_buffer(w, "codes", packed_words(n_codes, t.bits) * 4));
    EPK_TRY(unpack_checked(w, "codes", codes, n_codes, t.bits, &t.codes));
  }
  EPK_TRY_ASSIGN(auto scales,
                 need_buffer(w, "scales", n_groups * static_cast<std::uint64_t>(dtype_bits(t.scale_dtype) / 8)));
  t.scales.resize(n_groups);
  const std::size_t sw = static_cast<std::size_t>(dtype_bits(t.scale_dtype) / 8);
  for (std::size_t i = 0; i < n_groups; ++i) {
    t.scales[i] = load_float(scales.data() + sw * i, t.scale_dtype);
    if (!std::isfinite(t.scales[i])) return w.bad("buffers.scales", "entry " + std::to_string(i) + " is not finite");
  }
  if (sym) {
    if (reader.buffer(entry, "zeros")) return w.bad("buffers.zeros", "present although params.zeros is 'symmetric'");
    t.zeros.assign(n_groups, 1 << (t.bits - 1));
  } else {
    EPK_TRY_ASSIGN(auto zeros, need_buffer(w, "zeros", packed_words(n_groups, t.bits) * 4));
    std::vector<std::uint8_t> z;
    EPK_TRY(unpack_checked(w, "zeros", zeros, n_groups, t.bits, &z));
    t.zeros.assign(z.begin(), z.end());
  }
  auto read_i32 = [&](std::string_view field, std::vector<std::int32_t>* out) -> Status {
    EPK_TRY_ASSIGN(auto b, need_buffer(w, field, static_cast<std::uint64_t>(t.padded_rows) * 4));
    out->resize(sz(t.padded_rows));
    for (std::size_t i = 0; i < out->size(); ++i) (*out)[i] = load_le<std::int32_t>(b.data() + 4 * i);
    return {};
  };
  if (has_g_idx) {
    EPK_TRY(read_i32("g_idx", &t.g_idx));
    for (std::size_t k = 0; k < t.g_idx.size(); ++k) {
      if (t.g_idx[k] < 0 || t.g_idx[k] >= t.num_groups) {
        return w.bad("buffers.g_idx", "entry " + std::to_string(k) + " = " + std::to_string(t.g_idx[k]) +
                                          " outside 0.." + std::to_string(t.num_groups - 1));
      }
    }
  } else {
    if (reader.buffer(entry, "g_idx")) return w.bad("buffers.g_idx", "present although params.g_idx is false");
    t.g_idx.resize(sz(t.padded_rows));
    for (std::int64_t k = 0; k < t.padded_rows; ++k) t.g_idx[sz(k)] = static_cast<std::int32_t>(k / t.group_size);
  }
  if (has_perm) {
    EPK_TRY(read_i32("perm", &t.perm));
    std::vector<bool> seen(sz(t.padded_rows), false);
    for (std::int64_t k = 0; k < t.padded_rows; ++k) {
      const std::int32_t p = t.perm[sz(k)];
      const std::int64_t hi = k < t.rows ? t.rows : t.padded_rows;
      if (p < 0 || p >= hi || seen[sz(p)]) {
        return w.bad("buffers.perm", "entry " + std::to_string(k) + " = " + std::to_string(p) +
                                         " repeats a row or is out of range (logical rows must permute 0..rows-1)");
      }
      seen[sz(p)] = true;
    }
  } else if (reader.buffer(entry, "perm")) {
    return w.bad("buffers.perm", "present although params.perm is false");
  }
  if (auto st = validate(t); !st) return w.bad("params", st.error().message);
  return t;
}

}  // namespace epk::layouts::intq
