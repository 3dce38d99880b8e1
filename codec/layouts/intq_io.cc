#include "codec/layouts/intq_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "codec/common/alloc.h"
#include "codec/common/bytes.h"
#include "codec/common/half.h"
#include "codec/layouts/pack_bits.h"
#include "codec/rans/symbol_coder.h"

namespace epk::layouts::intq {
namespace {

using nlohmann::json;

// Bounds on stored extents: far above any real layer, low enough that products of two stay inside 64 bits.
constexpr std::int64_t kMaxExtent = std::int64_t{1} << 31;
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;
constexpr std::int64_t kMaxPadding = 4096;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::kInt:
      return "int";
    case Kind::kGguf:
      return "gguf";
    case Kind::kBnb4:
      return "bnb4";
  }
  return "?";
}

// Errors about a stored entry: "FILE: tensor 'NAME' intq FIELD: what".
struct Where {
  const container::Reader& reader;
  const container::TensorEntry& entry;
  Error bad(std::string_view field, const std::string& what) const {
    return make_error(ErrorCode::kBadInput,
                      reader.path() + ": tensor '" + entry.name + "' intq " + std::string(field) + ": " + what);
  }
};

std::vector<std::uint8_t> words_to_bytes(const std::vector<std::uint32_t>& w) {
  std::vector<std::uint8_t> out(w.size() * 4);
  for (std::size_t i = 0; i < w.size(); ++i) store_le<std::uint32_t>(out.data() + 4 * i, w[i]);
  return out;
}

std::vector<std::uint8_t> i32_bytes(std::span<const std::int32_t> v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  for (std::size_t i = 0; i < v.size(); ++i) store_le<std::int32_t>(out.data() + 4 * i, v[i]);
  return out;
}

// v as one element of `out` at p: f16 and bf16 rounded to nearest even, any other dtype as f32.
void store_value(float v, DType out, std::uint8_t* p) {
  if (out == DType::kF16)
    store_le<std::uint16_t>(p, f32_to_f16(v));
  else if (out == DType::kBF16)
    store_le<std::uint16_t>(p, f32_to_bf16(v));
  else
    store_le<float>(p, v);
}

// values[i] as element i of `out` from dst on (2 bytes an element for f16 and bf16, else 4).
void store_values(std::span<const float> values, DType out, std::uint8_t* dst) {
  const std::size_t width = out == DType::kF16 || out == DType::kBF16 ? 2 : 4;
  for (std::size_t i = 0; i < values.size(); ++i) store_value(values[i], out, dst + width * i);
}

std::vector<std::uint8_t> float_bytes(std::span<const float> v, DType dtype) {
  std::vector<std::uint8_t> out(v.size() * static_cast<std::size_t>(dtype_bits(dtype) / 8));
  store_values(v, dtype, out.data());
  return out;
}

float load_float(const std::uint8_t* p, DType dtype) {
  if (dtype == DType::kF16) return f16_to_f32(load_le<std::uint16_t>(p));
  if (dtype == DType::kBF16) return bf16_to_f32(load_le<std::uint16_t>(p));
  return load_le<float>(p);
}

void add_buffer(Encoded& e, std::string name, std::vector<std::uint8_t> bytes) {
  e.storage.push_back(std::move(bytes));
  e.names.push_back(std::move(name));
}

std::vector<std::uint64_t> u64_shape(std::span<const std::int64_t> s) {
  return std::vector<std::uint64_t>(s.begin(), s.end());
}

Result<json> parse_params(const Where& w) {
  json j = json::parse(w.entry.params_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return w.bad("params", "not a JSON object");
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_unsigned() || v->get<std::uint64_t>() != kParamsVersion) {
    return w.bad("params.version", "missing or not " + std::to_string(kParamsVersion));
  }
  return j;
}

Result<std::int64_t> get_int(const Where& w, const json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    return w.bad(std::string("params.") + key, "missing or not an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) {
    return w.bad(std::string("params.") + key,
                 std::to_string(v) + " outside " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

Result<std::string> get_string(const Where& w, const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return w.bad(std::string("params.") + key, "missing or not a string");
  return it->get<std::string>();
}

Result<bool> get_bool(const Where& w, const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return w.bad(std::string("params.") + key, "missing or not a boolean");
  return it->get<bool>();
}

Result<Kind> parse_kind(const Where& w, const json& j) {
  EPK_TRY_ASSIGN(std::string k, get_string(w, j, "kind"));
  if (k == "int") return Kind::kInt;
  if (k == "gguf") return Kind::kGguf;
  if (k == "bnb4") return Kind::kBnb4;
  return make_error(ErrorCode::kUnsupported,
                    w.reader.path() + ": tensor '" + w.entry.name + "' intq params.kind: unknown kind '" + k + "'");
}

// The buffer `name` of exactly `size` bytes; every buffer of the entry must be one of `allowed`.
Result<std::span<const std::uint8_t>> need_buffer(const Where& w, std::string_view name, std::uint64_t size) {
  auto b = w.reader.buffer(w.entry, name);
  if (!b) return w.bad(std::string("buffers.") + std::string(name), "missing");
  if (b->size() != size) {
    return w.bad(std::string("buffers.") + std::string(name),
                 "size " + std::to_string(b->size()) + ", expected " + std::to_string(size));
  }
  return *b;
}

Status only_buffers(const Where& w, std::initializer_list<std::string_view> allowed) {
  for (const auto& b : w.entry.buffers) {
    if (std::find(allowed.begin(), allowed.end(), std::string_view(b.name)) == allowed.end()) {
      return w.bad("buffers." + b.name, "not a buffer of this kind");
    }
  }
  return {};
}

// Unpacks `n` codes of `bits` from LE words, refusing set bits past the last code (the writer leaves them zero).
Status unpack_checked(const Where& w, std::string_view field, std::span<const std::uint8_t> bytes, std::size_t n,
                      int bits, std::vector<std::uint8_t>* out) {
  std::vector<std::uint32_t> words(bytes.size() / 4);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = load_le<std::uint32_t>(bytes.data() + 4 * i);
  const std::size_t used_bits = n * static_cast<std::size_t>(bits);
  if (used_bits % 32 != 0 && !words.empty() && (words.back() >> (used_bits % 32)) != 0) {
    return w.bad(std::string("buffers.") + std::string(field), "bits set past the last value");
  }
  out->assign(n, 0);
  auto st = unpack_bits(words, bits, *out);
  if (!st) return w.bad(std::string("buffers.") + std::string(field), st.error().message);
  return {};
}

Status check_shape(const Where& w, std::span<const std::uint64_t> want) {
  if (!std::equal(w.entry.shape.begin(), w.entry.shape.end(), want.begin(), want.end())) {
    std::string s = "[";
    for (std::size_t i = 0; i < want.size(); ++i) s += (i ? ", " : "") + std::to_string(want[i]);
    return w.bad("shape", "does not match the params, expected " + s + "]");
  }
  return {};
}

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

// --- bnb4: the parts and their declared dtype/shape -------------------------------------------------------------

constexpr std::string_view kBnbParts[] = {"weight",        "absmax",           "quant_map",
                                          "nested_absmax", "nested_quant_map", "quant_state"};

struct BnbStored {
  std::vector<std::vector<std::int64_t>> shapes;  // per kBnbParts entry present
  bnb::Views views;
};

Result<BnbStored> read_bnb_views(const Where& w, const json& j) {
  auto parts = j.find("parts");
  if (parts == j.end() || !parts->is_object()) return w.bad("params.parts", "missing or not an object");
  BnbStored s;
  s.shapes.reserve(std::size(kBnbParts));
  for (const auto& b : w.entry.buffers) {
    if (std::find(std::begin(kBnbParts), std::end(kBnbParts), b.name) == std::end(kBnbParts) ||
        !parts->contains(b.name)) {
      return w.bad("buffers." + b.name, "not a declared bnb4 part");
    }
  }
  bool have_weight = false, have_absmax = false, have_state = false;
  for (std::string_view name : kBnbParts) {
    const std::string field = "params.parts." + std::string(name);
    auto it = parts->find(std::string(name));
    if (it == parts->end()) continue;
    if (!it->is_object()) return w.bad(field, "not an object");
    auto dt = it->find("dtype");
    auto sh = it->find("shape");
    if (dt == it->end() || !dt->is_string()) return w.bad(field + ".dtype", "missing");
    auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype || dtype_bits(*dtype) % 8 != 0) return w.bad(field + ".dtype", "not a byte-sized dtype");
    if (sh == it->end() || !sh->is_array() || sh->size() > 8) return w.bad(field + ".shape", "missing");
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0 ||
          !checked_mul(numel, static_cast<std::uint64_t>(d.get<std::int64_t>()), &numel) || numel > kMaxElements) {
        return w.bad(field + ".shape", "entry out of range");
      }
      shape.push_back(d.get<std::int64_t>());
    }
    EPK_TRY_ASSIGN(auto bytes, need_buffer(w, name, numel * static_cast<std::uint64_t>(dtype_bits(*dtype) / 8)));
    s.shapes.push_back(std::move(shape));
    TensorView v{w.entry.name, *dtype, s.shapes.back(), bytes};
    if (name == "weight")
      s.views.weight = v, have_weight = true;
    else if (name == "absmax")
      s.views.absmax = v, have_absmax = true;
    else if (name == "quant_map")
      s.views.quant_map = v;
    else if (name == "nested_absmax")
      s.views.nested_absmax = v;
    else if (name == "nested_quant_map")
      s.views.nested_quant_map = v;
    else
      s.views.quant_state = v, have_state = true;
  }
  if (!have_weight) return w.bad("params.parts.weight", "missing");
  if (!have_absmax) return w.bad("params.parts.absmax", "missing");
  if (!have_state) return w.bad("params.parts.quant_state", "missing");
  return s;
}

// --- gguf: type and block bytes ----------------------------------------------------------------------------------

struct GgufStored {
  std::uint32_t type = 0;
  std::uint64_t n = 0;
  std::span<const std::uint8_t> blocks;
};

Result<GgufStored> read_gguf_entry(const Where& w, const json& j) {
  EPK_TRY(only_buffers(w, {"blocks"}));
  EPK_TRY_ASSIGN(std::int64_t type, get_int(w, j, "ggml_type", 0, 1 << 16));
  auto traits = gguf::type_traits(static_cast<std::uint32_t>(type));
  if (!traits || !gguf::dequantize_supported(static_cast<std::uint32_t>(type))) {
    // A well-formed entry of a block type this build cannot read (a newer writer's): unsupported, not corrupt.
    return make_error(ErrorCode::kUnsupported, w.reader.path() + ": tensor '" + w.entry.name +
                                                   "' intq params.ggml_type: " +
                                                   (traits ? std::string(traits->name) : std::to_string(type)) +
                                                   " is not supported by this build");
  }
  GgufStored g;
  g.type = static_cast<std::uint32_t>(type);
  g.n = w.entry.element_count();
  if (w.entry.shape.empty() || g.n > kMaxElements || g.n % traits->block_size != 0 ||
      w.entry.shape.back() % traits->block_size != 0) {
    return w.bad("shape", "innermost extent not a multiple of the " + std::string(traits->name) + " block");
  }
  EPK_TRY_ASSIGN(g.blocks, need_buffer(w, "blocks", g.n / traits->block_size * traits->type_size));
  if (auto st = gguf::check_block_scales(g.type, g.blocks, g.n, "blocks"); !st) {
    return w.bad("buffers.blocks", st.error().message);
  }
  return g;
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
    p["codes"] = "rans";
    p["code_prob_bits"] = coded->prob_bits;
    p["code_tile_symbols"] = coded->tile_symbols;
    std::vector<std::uint8_t> freqs(coded->freqs.size() * 2), tiles(coded->tile_bytes.size() * 4);
    for (std::size_t i = 0; i < coded->freqs.size(); ++i) {
      store_le<std::uint16_t>(freqs.data() + 2 * i, coded->freqs[i]);
    }
    for (std::size_t i = 0; i < coded->tile_bytes.size(); ++i) {
      store_le<std::uint32_t>(tiles.data() + 4 * i, coded->tile_bytes[i]);
    }
    add_buffer(e, "codes", std::move(coded->payload));
    add_buffer(e, "code_freqs", std::move(freqs));
    add_buffer(e, "code_tiles", std::move(tiles));
  } else {
    std::vector<std::uint32_t> words(packed_words(t.codes.size(), t.bits));
    EPK_TRY(pack_bits(t.codes, t.bits, words));
    add_buffer(e, "codes", words_to_bytes(words));
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
    std::vector<std::uint32_t> zw(packed_words(z.size(), t.bits));
    EPK_TRY(pack_bits(z, t.bits, zw));
    add_buffer(e, "zeros", words_to_bytes(zw));
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

Result<Kind> kind_of(const container::Reader& reader, const container::TensorEntry& entry) {
  const Where w{reader, entry};
  if (entry.encoding != container::Encoding::kIntq) return w.bad("encoding", "not intq");
  EPK_TRY_ASSIGN(json j, parse_params(w));
  return parse_kind(w, j);
}

Result<IntHeader> read_int_header(const container::Reader& reader, const container::TensorEntry& entry) {
  const Where w{reader, entry};
  if (entry.encoding != container::Encoding::kIntq) return w.bad("encoding", "not intq");
  EPK_TRY_ASSIGN(json j, parse_params(w));
  EPK_TRY_ASSIGN(Kind kind, parse_kind(w, j));
  if (kind != Kind::kInt) return w.bad("params.kind", "'" + std::string(kind_name(kind)) + "', not 'int'");
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
    // Sizes are checked by the decoder against each other; the buffers exist or the entry is malformed.
    auto codes = reader.buffer(entry, "codes");
    auto freqs = reader.buffer(entry, "code_freqs");
    auto tiles = reader.buffer(entry, "code_tiles");
    if (!codes) return w.bad("buffers.codes", "missing");
    if (!freqs) return w.bad("buffers.code_freqs", "missing");
    if (!tiles) return w.bad("buffers.code_tiles", "missing");
    rans::symbols::StreamView v;
    v.bits = t.bits;
    v.prob_bits = h.code_prob_bits;
    v.tile_symbols = h.code_tile_symbols;
    v.count = n_codes;
    v.freqs = *freqs;
    v.tile_bytes = *tiles;
    v.payload = *codes;
    const std::string what = reader.path() + ": tensor '" + entry.name + "' intq buffers.codes (rans)";
    // A few bytes of a skewed table may code up to 2^40 codes (FORMAT.md 11.2): the allocation is the bound.
    EPK_TRY(resize_for_tensor(t.codes, n_codes, what));
    EPK_TRY(rans::symbols::decode(v, t.codes, what));
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
  if (entry.encoding != container::Encoding::kIntq) return w.bad("encoding", "not intq");
  EPK_TRY_ASSIGN(json j, parse_params(w));
  EPK_TRY_ASSIGN(Kind kind, parse_kind(w, j));
  std::vector<float> dense;
  switch (kind) {
    case Kind::kInt: {
      EPK_TRY_ASSIGN(QuantTensor t, read_int(reader, entry));
      if (static_cast<std::uint64_t>(t.rows) * static_cast<std::uint64_t>(t.cols) != n) {
        return w.bad("shape", "element count does not match the params");
      }
      write_int_dense(t, out_dtype, dst);
      return {};
    }
    case Kind::kGguf: {
      EPK_TRY_ASSIGN(GgufStored g, read_gguf_entry(w, j));
      auto d = gguf::dequantize(g.type, g.blocks, g.n);
      if (!d && d.error().code == ErrorCode::kUnsupported) return d.error();
      if (!d) return w.bad("buffers.blocks", d.error().message);
      dense = std::move(*d);
      break;
    }
    case Kind::kBnb4: {
      EPK_TRY_ASSIGN(BnbStored s, read_bnb_views(w, j));
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
  EPK_TRY_ASSIGN(Kind kind, kind_of(reader, entry));
  Footprint f;
  f.weights = entry.element_count();
  if (kind == Kind::kGguf) {
    EPK_TRY_ASSIGN(json j, parse_params(w));
    EPK_TRY_ASSIGN(GgufStored g, read_gguf_entry(w, j));
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
