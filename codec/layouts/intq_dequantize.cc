// intq_io.h's dequantize_intq: any intq entry to dense weights in the index shape.
#include "codec/layouts/intq_io.h"

#include <algorithm>

#include "codec/layouts/intq_entry.h"
#include "codec/layouts/intq_verbatim.h"

namespace epk::layouts::intq {

using namespace detail;  // the internals of intq_entry.h, intq_verbatim.h

namespace {

// The nn.Linear weight [cols, rows] (perm undone) straight into dst: the same float32 product as dequantize_f32,
// rounded once, in 64 x 64 blocks so that neither the code reads nor the transposed writes stride through memory.
void write_int_dense(const QuantTensor& t, DType out, std::span<std::uint8_t> dst) {
  constexpr std::int64_t kBlock = 64;
  const std::size_t width = static_cast<std::size_t>(dtype_bits(out) / 8);
  for (std::int64_t k0 = 0; k0 < t.rows; k0 += kBlock) {
    const std::int64_t k1 = std::min(t.rows, k0 + kBlock);
    for (std::int64_t n0 = 0; n0 < t.cols; n0 += kBlock) {
      const std::int64_t n1 = std::min(t.cols, n0 + kBlock);
      for (std::int64_t k = k0; k < k1; ++k) {
        const std::size_t g = sz(t.g_idx[sz(k)]) * sz(t.padded_cols);
        const std::uint8_t* q = t.codes.data() + sz(k) * sz(t.padded_cols);
        const std::size_t feature = t.perm.empty() ? sz(k) : sz(t.perm[sz(k)]);
        for (std::int64_t c = n0; c < n1; ++c) {
          const float v =
              t.scales[g + sz(c)] * static_cast<float>(static_cast<std::int32_t>(q[c]) - t.zeros[g + sz(c)]);
          store_value(v, out, dst.data() + (sz(c) * sz(t.rows) + feature) * width);
        }
      }
    }
  }
}

Status write_dense(std::span<const float> values, DType out, std::span<std::uint8_t> dst) {
  store_values(values, out, dst.data());
  return {};
}

}  // namespace

Status dequantize_intq(const container::Reader& reader, const container::TensorEntry& entry, DType out_dtype,
                       std::span<std::uint8_t> dst) {
  const Where w{reader, entry};
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16 && out_dtype != DType::kF16) {
    return make_error(ErrorCode::kInvalidArgument,
                      "dequantize_intq: tensor '" + entry.name + "': output dtype must be F32, BF16 or F16");
  }
  const std::uint64_t n = entry.element_count();
  const std::uint64_t width = static_cast<std::uint64_t>(dtype_bits(out_dtype) / 8);
  if (n > kMaxElements || dst.size() != n * width) {
    return make_error(ErrorCode::kInvalidArgument, "dequantize_intq: tensor '" + entry.name + "': destination has " +
                                                       std::to_string(dst.size()) + " bytes, expected " +
                                                       std::to_string(n * width));
  }
  EPK_TRY_ASSIGN(Params p, read_params(w));
  std::vector<float> dense;
  switch (p.kind) {
    case Kind::kInt: {
      EPK_TRY_ASSIGN(QuantTensor t, read_int(reader, entry));
      if (static_cast<std::uint64_t>(t.rows) * static_cast<std::uint64_t>(t.cols) != n) {
        return w.bad("shape", "element count does not match the params");
      }
      write_int_dense(t, out_dtype, dst);
      return {};
    }
    case Kind::kGguf: {
      EPK_TRY_ASSIGN(GgufStored g, read_gguf_entry(w, p.j));
      auto d = gguf::dequantize(g.type, g.blocks, g.n);
      if (!d && d.error().code == ErrorCode::kUnsupported) return d.error();
      if (!d) return w.bad("buffers.blocks", d.error().message);
      dense = std::move(*d);
      break;
    }
    case Kind::kBnb4: {
      EPK_TRY_ASSIGN(BnbStored s, read_bnb_views(w, p.j));
      auto state = bnb::read_state(s.views);
      if (!state) return w.bad("buffers", state.error().message);
      const auto shape = u64_shape(state->shape);
      EPK_TRY(check_shape(w, shape));
      auto d = bnb::dequantize_f32(s.views.weight, *state);
      if (!d) return w.bad("buffers.weight", d.error().message);
      dense = std::move(*d);
      break;
    }
  }
  if (dense.size() != n) return w.bad("shape", "element count does not match the stored weights");
  return write_dense(dense, out_dtype, dst);
}

}  // namespace epk::layouts::intq
