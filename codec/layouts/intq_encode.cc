// intq_io.h's writers: encode_int, encode_gguf and encode_bnb4. Each refuses, naming the tensor, what the readers
// would refuse, so import never writes an entry that a later step cannot read.
#include "codec/layouts/intq_io.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "codec/layouts/intq_codes.h"
#include "codec/layouts/intq_entry.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts::intq {

using namespace detail;  // the internals of intq_entry.h, intq_codes.h

namespace {

std::vector<std::uint8_t> i32_bytes(std::span<const std::int32_t> v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  for (std::size_t i = 0; i < v.size(); ++i) store_le<std::int32_t>(out.data() + 4 * i, v[i]);
  return out;
}

std::vector<std::uint8_t> float_bytes(std::span<const float> v, DType dtype) {
  std::vector<std::uint8_t> out(v.size() * static_cast<std::size_t>(dtype_bits(dtype) / 8));
  store_values(v, dtype, out.data());
  return out;
}

}  // namespace

Result<Encoded> encode_int(const QuantTensor& t, std::string name, DType dense_dtype, std::string source,
                           CodeForm form) {
  auto invalid = [&](const std::string& what) {
    return make_error(ErrorCode::kInvalidArgument, "intq tensor '" + name + "': " + what);
  };
  if (auto st = validate(t); !st) return invalid(st.error().message);
  if (t.padded_rows > kMaxExtent || t.padded_cols > kMaxExtent ||
      static_cast<std::uint64_t>(t.padded_rows) * static_cast<std::uint64_t>(t.padded_cols) > kMaxElements) {
    return invalid("too large");
  }
  if (t.padded_rows - t.rows > kMaxPadding || t.padded_cols - t.cols > kMaxPadding) {
    return invalid("more than 4096 rows or columns of padding (readers refuse it)");
  }
  if (dense_dtype != DType::kF16 && dense_dtype != DType::kBF16 && dense_dtype != DType::kF32) {
    return invalid("dense dtype must be F16, BF16 or F32");
  }
  if (!t.perm.empty()) {
    std::vector<bool> seen(sz(t.rows), false);
    for (std::int64_t k = 0; k < t.rows; ++k) {
      const std::int32_t p = t.perm[sz(k)];
      if (p < 0 || p >= t.rows || seen[sz(p)]) return invalid("perm is not a permutation of the logical rows");
      seen[sz(p)] = true;
    }
  }
  const bool sym = is_symmetric(t);
  const bool static_groups = has_static_groups(t);
  Encoded e;
  e.spec.name = std::move(name);
  e.spec.shape = {static_cast<std::uint64_t>(t.cols), static_cast<std::uint64_t>(t.rows)};
  e.spec.dtype = dense_dtype;
  e.spec.encoding = container::Encoding::kIntq;
  json p = {{"version", kParamsVersion},
            {"kind", "int"},
            {"bits", t.bits},
            {"rows", t.rows},
            {"cols", t.cols},
            {"padded_rows", t.padded_rows},
            {"padded_cols", t.padded_cols},
            {"group_size", t.group_size},
            {"num_groups", t.num_groups},
            {"scale_dtype", std::string(dtype_name(t.scale_dtype))},
            {"codes", "packed"},
            {"zeros", sym ? "symmetric" : "packed"},
            {"g_idx", !static_groups},
            {"perm", !t.perm.empty()},
            {"source", source}};

  const std::uint64_t packed_bytes = packed_words(t.codes.size(), t.bits) * 4;
  std::optional<rans::symbols::Encoded> coded;
  if (form != CodeForm::kPacked) {
    auto c = rans::symbols::encode(t.codes, t.bits);
    if (!c) return invalid(c.error().message);
    if (form == CodeForm::kRans || c->stored_bytes() < packed_bytes) coded = std::move(*c);
  }
  if (coded) {
    add_rans_codes(e, p, std::move(*coded));
  } else {
    EPK_TRY(add_packed(e, "codes", t.codes, t.bits));
  }
  e.spec.params_json = p.dump();
  std::vector<std::uint8_t> scale_bytes = float_bytes(t.scales, t.scale_dtype);
  const std::size_t scale_width = static_cast<std::size_t>(dtype_bits(t.scale_dtype) / 8);
  for (std::size_t i = 0; i < t.scales.size(); ++i) {
    // read_int refuses a non-finite scale (every weight of its group would be NaN or infinite), so import must too;
    // checked as stored, since a finite f32 scale can overflow the scale dtype.
    if (!std::isfinite(load_float(scale_bytes.data() + i * scale_width, t.scale_dtype))) {
      const std::size_t cols = static_cast<std::size_t>(std::max<std::int64_t>(t.padded_cols, 1));
      return make_error(ErrorCode::kBadInput, "intq tensor '" + e.spec.name + "': scales entry " + std::to_string(i) +
                                                  " (group " + std::to_string(i / cols) + ", column " +
                                                  std::to_string(i % cols) + ") is not finite in " +
                                                  std::string(dtype_name(t.scale_dtype)));
    }
  }
  add_buffer(e, "scales", std::move(scale_bytes));
  if (!sym) {
    std::vector<std::uint8_t> z(t.zeros.size());
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<std::uint8_t>(t.zeros[i]);
    EPK_TRY(add_packed(e, "zeros", z, t.bits));
  }
  if (!static_groups) add_buffer(e, "g_idx", i32_bytes(t.g_idx));
  if (!t.perm.empty()) add_buffer(e, "perm", i32_bytes(t.perm));
  return e;
}

Result<Encoded> encode_gguf(const gguf::TensorInfo& info, std::span<const std::uint8_t> bytes, std::string name) {
  auto traits = gguf::type_traits(info.type);
  if (!traits) return make_error(ErrorCode::kUnsupported, "gguf tensor '" + name + "': unknown ggml type");
  if (!gguf::dequantize_supported(info.type)) {
    // Stored blocks that no later step could read would pass import and fail decompress, convert and serving.
    return make_error(ErrorCode::kUnsupported,
                      "gguf tensor '" + name + "': " + traits->name + " is not supported by this build");
  }
  if (bytes.size() != info.n_bytes || info.ne.empty() || info.ne[0] % traits->block_size != 0) {
    return make_error(ErrorCode::kInvalidArgument, "gguf tensor '" + name + "': bytes do not match its blocks");
  }
  EPK_TRY(gguf::check_block_scales(info.type, bytes, info.n_elements, "gguf tensor '" + name + "'"));
  Encoded e;
  e.spec.name = std::move(name);
  for (auto d : info.torch_shape()) e.spec.shape.push_back(static_cast<std::uint64_t>(d));
  e.spec.dtype = DType::kF32;
  e.spec.encoding = container::Encoding::kIntq;
  e.spec.params_json =
      json{{"version", kParamsVersion}, {"kind", "gguf"}, {"ggml_type", info.type}, {"ggml_name", traits->name}}.dump();
  add_buffer(e, "blocks", std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  return e;
}

Result<Encoded> encode_bnb4(const bnb::Views& views, std::string name) {
  EPK_TRY_ASSIGN(bnb::State state, bnb::read_state(views));
  Encoded e;
  e.spec.name = std::move(name);
  e.spec.shape = u64_shape(state.shape);
  e.spec.dtype = state.dtype;
  e.spec.encoding = container::Encoding::kIntq;
  json parts = json::object();
  auto put = [&](std::string_view part, const TensorView& v) {
    parts[std::string(part)] = {{"dtype", std::string(dtype_name(v.dtype))}, {"shape", v.shape}};
    add_buffer(e, std::string(part), std::vector<std::uint8_t>(v.bytes.begin(), v.bytes.end()));
  };
  put("weight", views.weight);
  put("absmax", views.absmax);
  if (views.quant_map) put("quant_map", *views.quant_map);
  if (views.nested_absmax) put("nested_absmax", *views.nested_absmax);
  if (views.nested_quant_map) put("nested_quant_map", *views.nested_quant_map);
  put("quant_state", views.quant_state);
  e.spec.params_json = json{
      {"version", kParamsVersion},
      {"kind", "bnb4"},
      {"quant_type", state.type == bnb::QuantType::kNf4 ? "nf4" : "fp4"},
      {"blocksize", state.blocksize},
      {"double_quant", state.double_quant},
      {"parts", parts}}.dump();
  return e;
}

}  // namespace epk::layouts::intq
