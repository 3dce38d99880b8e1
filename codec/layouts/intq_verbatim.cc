#include "codec/layouts/intq_verbatim.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

#include "codec/layouts/gguf.h"

namespace epk::layouts::intq::detail {
namespace {

constexpr std::string_view kBnbParts[] = {"weight",        "absmax",           "quant_map",
                                          "nested_absmax", "nested_quant_map", "quant_state"};

}  // namespace

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

}  // namespace epk::layouts::intq::detail
