#include "codec/serve/intq_producer.h"

#include <algorithm>
#include <cstring>

#include "codec/common/bytes.h"
#include "codec/decode/decode_tensor.h"
#include "codec/layouts/convert.h"

namespace epk::serve {
namespace {

Error unsupported(const std::string& origin, const std::string& name, Layout layout, const std::string& why) {
  return make_error(ErrorCode::kUnsupported, origin + ": tensor '" + name + "': layout " +
                                                 std::string(layout_name(layout)) + ": " + why);
}

// What write_layout produces, from the params alone: the same refusals and the same padding (pad_to adds the
// groups that new rows need; sort_groups keeps their count).
Result<PackedGeometry> geometry(const layouts::intq::IntHeader& h, const std::string& origin,
                                const std::string& e, Layout layout) {
  const layouts::QuantTensor& t = h.shape;
  const std::string bits = std::to_string(t.bits) + "-bit codes";
  PackedGeometry g;
  switch (layout) {
    case Layout::kGptq:
    case Layout::kGptqV2:
      if (t.bits != 2 && t.bits != 3 && t.bits != 4 && t.bits != 8) {
        return unsupported(origin, e, layout, bits + " (GPTQ packs 2, 3, 4 or 8)");
      }
      g.flags = kPackedGIdx;
      break;
    case Layout::kAwq:
      if (t.bits != 4) return unsupported(origin, e, layout, bits + " (AWQ packs 4)");
      if (h.has_g_idx || h.has_perm) {
        return unsupported(origin, e, layout,
                           "act-order rows (g_idx/perm): AWQ has no g_idx, and sorting the groups would need the "
                           "activations permuted, which an AWQ kernel does not do; ask for gptq or marlin");
      }
      break;
    case Layout::kMarlin:
      if (t.bits != 4 && t.bits != 8) return unsupported(origin, e, layout, bits + " (Marlin packs 4 or 8)");
      if (!h.symmetric) {
        return unsupported(origin, e, layout, "asymmetric zero points (the GPTQ Marlin path is symmetric only)");
      }
      if (h.has_g_idx || h.has_perm) g.flags = kPackedGIdx | kPackedPerm;
      break;
    default:
      return make_error(ErrorCode::kInternal, "intq producer: not a packed integer layout");
  }
  std::int64_t rm = 1, cm = 1;
  layouts::layout_alignment(target_of(layout), t, &rm, &cm);
  const std::uint64_t kp = align_up(static_cast<std::uint64_t>(t.padded_rows), static_cast<std::uint64_t>(rm));
  const std::uint64_t np = align_up(static_cast<std::uint64_t>(t.padded_cols), static_cast<std::uint64_t>(cm));
  std::uint64_t ng = static_cast<std::uint64_t>(t.num_groups);
  if (kp > static_cast<std::uint64_t>(t.padded_rows)) {
    ng = std::max(ng, (kp - 1) / static_cast<std::uint64_t>(t.group_size) + 1);
  }
  g.rows = static_cast<std::uint64_t>(t.rows);
  g.cols = static_cast<std::uint64_t>(t.cols);
  g.padded_rows = kp;
  g.padded_cols = np;
  g.bits = static_cast<std::uint64_t>(t.bits);
  g.group_size = static_cast<std::uint64_t>(t.group_size);
  g.num_groups = ng;
  return g;
}

}  // namespace

layouts::Layout target_of(Layout l) {
  switch (l) {
    case Layout::kGptqV2: return layouts::Layout::kGptqV2;
    case Layout::kAwq: return layouts::Layout::kAwq;
    case Layout::kMarlin: return layouts::Layout::kMarlin;
    default: return layouts::Layout::kGptqV1;
  }
}

Result<PackedPlan> packed_plan(const layouts::intq::IntHeader& h, const std::string& origin, const std::string& name,
                         Layout layout) {
  PackedPlan p;
  EPK_TRY_ASSIGN(p.geometry, geometry(h, origin, name, layout));
  p.count = packed_parts(layout, p.geometry, h.shape.scale_dtype, &p.parts, &p.bytes);
  if (p.count == 0) return unsupported(origin, name, layout, "too large or not divisible as the layout needs");
  return p;
}

Result<std::optional<layouts::intq::IntHeader>> intq_params(const container::Reader& reader,
                                                            const container::TensorEntry& entry) {
  if (entry.encoding != container::Encoding::kIntq) return std::optional<layouts::intq::IntHeader>();
  EPK_TRY_ASSIGN(layouts::intq::Kind kind, layouts::intq::kind_of(reader, entry));
  if (kind != layouts::intq::Kind::kInt) return std::optional<layouts::intq::IntHeader>();
  EPK_TRY_ASSIGN(layouts::intq::IntHeader h, layouts::intq::read_int_header(reader, entry));
  return std::optional<layouts::intq::IntHeader>(std::move(h));
}

namespace {

// The slot of packed `layout` for a tensor with params h: the slot's bytes, and the geometry as its shape.
Result<Slot> packed_slot(const layouts::intq::IntHeader& h, const std::string& origin, const std::string& name,
                         Layout layout) {
  EPK_TRY_ASSIGN(PackedPlan p, packed_plan(h, origin, name, layout));
  Slot out;
  out.bytes = p.bytes;
  out.dtype = h.shape.scale_dtype;
  const auto shape = p.geometry.to_shape();
  out.shape.assign(std::span<const std::uint64_t>(shape.data(), shape.size()));
  out.strides.resize(shape.size());  // all 0: a descriptor, not an array (layout.h)
  std::fill(out.strides.begin(), out.strides.end(), 0);
  return out;
}

// Writes `layout` from t and places its parts in dst as plan p says.
Status place(const layouts::QuantTensor& t, const std::string& origin, const std::string& name, Layout layout,
             const PackedPlan& p, std::span<std::uint8_t> dst) {
  if (dst.size() != p.bytes) {
    return make_error(ErrorCode::kInvalidArgument, origin + ": tensor '" + name + "': slot holds " +
                                                       std::to_string(dst.size()) + " bytes, the layout needs " +
                                                       std::to_string(p.bytes));
  }
  auto conv = layouts::write_layout(t, target_of(layout));
  if (!conv) return unsupported(origin, name, layout, conv.error().message);
  if (!conv->activation_perm.empty()) {
    return unsupported(origin, name, layout, "the written layout needs its activations permuted");
  }
  if (conv->tensors.size() != p.count) {
    return make_error(ErrorCode::kInternal, origin + ": tensor '" + name + "': layout " +
                                                std::string(layout_name(layout)) + " wrote " +
                                                std::to_string(conv->tensors.size()) + " parts, planned " +
                                                std::to_string(p.count));
  }
  std::fill(dst.begin(), dst.end(), std::uint8_t{0});  // the gaps between parts: no stale bytes of an earlier slot
  for (std::size_t i = 0; i < p.count; ++i) {
    const PackedPart& part = p.parts[i];
    const layouts::Tensor& w = conv->tensors[i];
    const bool same_shape =
        w.shape.size() == part.ndim && static_cast<std::uint64_t>(w.shape[0]) == part.shape[0] &&
        (part.ndim == 1 || static_cast<std::uint64_t>(w.shape[1]) == part.shape[1]);
    if (w.name != part.name || w.dtype != part.dtype || !same_shape || w.bytes.size() != part.bytes) {
      return make_error(ErrorCode::kInternal, origin + ": tensor '" + name + "': layout " +
                                                  std::string(layout_name(layout)) + " part " + w.name +
                                                  " does not match the planned " + std::string(part.name));
    }
    if (!w.bytes.empty()) std::memcpy(dst.data() + part.offset, w.bytes.data(), w.bytes.size());
  }
  return {};
}

// A shard's params (sizes only, as IntHeader holds them) and, when cut from data, its logical tensor.
struct Cut {
  layouts::intq::IntHeader header;
  layouts::QuantTensor tensor;
};

// The shard `s` of the tensor (see the header for the rules): from h alone when data is null, else from data too.
// Errors name the tensor, the layout, the shard and the boundary.
Result<Cut> cut(const layouts::intq::IntHeader& h, const layouts::QuantTensor* data, const std::string& origin,
                const std::string& name, Layout layout, const ShardRange& s) {
  const layouts::QuantTensor& t = data != nullptr ? *data : h.shape;
  auto refuse = [&](const std::string& why) {
    return unsupported(origin, name, layout, "shard " + describe(s) + ": " + why);
  };
  Cut c;
  c.header = h;
  layouts::QuantTensor o;
  o.bits = t.bits;
  o.group_size = t.group_size;
  o.scale_dtype = t.scale_dtype;
  const std::int64_t K = t.rows, N = t.cols, G = t.group_size, PC = t.padded_cols;
  const auto b = static_cast<std::int64_t>(s.begin), e = static_cast<std::int64_t>(s.end);
  std::int64_t k0 = 0, n0 = 0, n1 = N, g0 = 0, g1 = t.num_groups;
  if (s.dim == ShardDim::kRows) {  // output features: columns of codes, scales and zeros; rows travel whole
    n0 = b;
    n1 = e;
    o.rows = K;
    o.padded_rows = t.padded_rows;
  } else {  // input features: rows of codes and g_idx
    if (h.has_perm) {
      return refuse("its rows are stored in another order than the input features (a perm), so a range of input "
                    "features is not a range of rows");
    }
    const bool aligned = b % G == 0 && (e % G == 0 || e == K);
    const bool carries_g_idx = layout == Layout::kGptq || layout == Layout::kGptqV2;
    k0 = b;
    if (!h.has_g_idx && aligned) {  // static groups on group boundaries: the shard's own groups
      g0 = b / G;
      g1 = (e + G - 1) / G;
    } else if (!h.has_g_idx && !carries_g_idx) {
      return refuse("starts or ends inside a group of " + std::to_string(G) + " input features (group boundaries: "
                    "multiples of " + std::to_string(G) + ", or the end at " + std::to_string(K) + "); " +
                    std::string(layout_name(layout)) + " has no g_idx to carry a partial group (gptq does)");
    } else {
      c.header.has_g_idx = true;  // every group travels; the shard's g_idx rows index them
    }
    o.rows = e - b;
    o.padded_rows = e - b;
  }
  o.cols = n1 - n0;
  o.padded_cols = n1 - n0;
  o.num_groups = g1 - g0;
  if (data != nullptr) {
    const auto rows = static_cast<std::size_t>(o.padded_rows), cols = static_cast<std::size_t>(o.padded_cols);
    const auto groups = static_cast<std::size_t>(o.num_groups);
    o.codes.resize(rows * cols);
    o.g_idx.resize(rows);
    o.scales.resize(groups * cols);
    o.zeros.resize(groups * cols);
    for (std::size_t k = 0; k < rows; ++k) {
      const auto src = static_cast<std::size_t>(k0) + k;
      std::memcpy(o.codes.data() + k * cols, t.codes.data() + src * static_cast<std::size_t>(PC) +
                                                 static_cast<std::size_t>(n0), cols);
      o.g_idx[k] = t.g_idx[src] - static_cast<std::int32_t>(g0);
    }
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t src = (static_cast<std::size_t>(g0) + g) * static_cast<std::size_t>(PC) +
                              static_cast<std::size_t>(n0);
      std::copy_n(t.scales.begin() + static_cast<std::ptrdiff_t>(src), cols,
                  o.scales.begin() + static_cast<std::ptrdiff_t>(g * cols));
      std::copy_n(t.zeros.begin() + static_cast<std::ptrdiff_t>(src), cols,
                  o.zeros.begin() + static_cast<std::ptrdiff_t>(g * cols));
    }
    if (s.dim == ShardDim::kRows) o.perm = t.perm;  // rows unchanged: their feature order too
    EPK_TRY(layouts::validate(o));
    c.tensor = std::move(o);
    c.header.shape = c.tensor;
    c.header.shape.codes.clear();
    c.header.shape.scales.clear();
    c.header.shape.zeros.clear();
    c.header.shape.g_idx.clear();
    c.header.shape.perm.clear();
  } else {
    c.header.shape = std::move(o);
  }
  if (s.dim == ShardDim::kCols) c.header.has_perm = false;
  return c;
}

}  // namespace

Result<Slot> IntqProducer::slot(Layout layout) const {
  if (!is_packed_int(layout)) return dense_slot(layout);
  if (!header_) return not_packed_int(layout);
  return packed_slot(*header_, origin_, entry_.name, layout);
}

Result<PackedPlan> IntqProducer::packed_plan(Layout layout) const {
  if (!header_) return not_packed_int(layout);
  return serve::packed_plan(*header_, origin_, entry_.name, layout);
}

Result<layouts::QuantTensor> IntqProducer::read() const {
  if (!header_) {
    return make_error(ErrorCode::kUnsupported, what() + ": not an intq int tensor");
  }
  return layouts::intq::read_int(reader_, entry_);
}

Status IntqProducer::produce(Layout layout, std::span<std::uint8_t> dst) const {
  if (!is_packed_int(layout)) {
    EPK_TRY_ASSIGN(Slot s, dense_slot(layout));
    return decode::decode_tensor(reader_, entry_, s.dtype, dst);
  }
  EPK_TRY_ASSIGN(PackedPlan p, packed_plan(layout));
  EPK_TRY_ASSIGN(layouts::QuantTensor t, layouts::intq::read_int(reader_, entry_));
  return place(t, origin_, entry_.name, layout, p, dst);
}

Result<Slot> IntqProducer::shard_slot(Layout layout, const ShardRange& shard) const {
  if (!is_packed_int(layout)) return Producer::shard_slot(layout, shard);
  if (shard.whole() || !header_) return slot(layout);
  EPK_TRY_ASSIGN(Cut c, cut(*header_, nullptr, origin_, entry_.name, layout, shard));
  return packed_slot(c.header, origin_, entry_.name, layout);
}

Status IntqProducer::produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const {
  if (shard.whole()) return produce(layout, dst);
  // Dense layouts have no cheaper path: the whole tensor dequantized, then the slice.
  if (!is_packed_int(layout)) return produce_shard_by_slicing(layout, shard, dst);
  if (!header_) return not_packed_int(layout);
  EPK_TRY_ASSIGN(Cut sizes, cut(*header_, nullptr, origin_, entry_.name, layout, shard));
  EPK_TRY_ASSIGN(PackedPlan p, serve::packed_plan(sizes.header, origin_, entry_.name, layout));
  EPK_TRY_ASSIGN(layouts::QuantTensor t, layouts::intq::read_int(reader_, entry_));
  EPK_TRY_ASSIGN(Cut c, cut(*header_, &t, origin_, entry_.name, layout, shard));
  return place(c.tensor, origin_, entry_.name, layout, p, dst);
}

}  // namespace epk::serve
