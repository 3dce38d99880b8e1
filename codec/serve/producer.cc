#include "codec/serve/producer.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "codec/decode/decode_slice.h"
#include "codec/decode/decode_tensor.h"
#include "codec/serve/intq_producer.h"
#include "codec/serve/lattice_rans_producer.h"
#include "codec/serve/shard_slice.h"

namespace epk::serve {
namespace {

// The element type a layout asks for, given the tensor's source dtype; nullopt for layouts with no dense form.
std::optional<DType> layout_dtype(Layout layout, DType source) {
  switch (layout) {
    case Layout::kStored: return source;
    case Layout::kDenseBF16: return DType::kBF16;
    case Layout::kDenseF16: return DType::kF16;
    case Layout::kDenseF32: return DType::kF32;
    default: return std::nullopt;
  }
}

rans::RowwiseType rowwise_type(Layout layout) {
  return layout == Layout::kRowwiseI8 ? rans::RowwiseType::kInt8 : rans::RowwiseType::kF8E4M3;
}

// Raw tensors: the stored bytes, or converted between float dtypes; shards slice the stored bytes.
class RawProducer final : public Producer {
 public:
  RawProducer(const container::Reader& reader, const container::TensorEntry& entry, std::string origin)
      : Producer(reader, entry, std::move(origin)) {}

  Result<Slot> slot(Layout layout) const override {
    if (is_packed_int(layout)) return not_packed_int(layout);
    return dense_slot(layout);
  }
  Status produce(Layout layout, std::span<std::uint8_t> dst) const override {
    EPK_TRY_ASSIGN(Slot s, slot(layout));
    return decode::decode_tensor(reader_, entry_, s.dtype, dst);
  }
  Status produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const override {
    if (shard.whole()) return produce(layout, dst);
    EPK_TRY_ASSIGN(Slot s, shard_slot(layout, shard));
    if (dst.size() != s.bytes) {
      return make_error(ErrorCode::kInvalidArgument, origin_ + ": shard output size does not match the shard");
    }
    if (decode::can_decode_slice(entry_, s.dtype, shard.axis())) {
      return decode::decode_tensor_slice(reader_, entry_, s.dtype, {shard.axis(), shard.begin, shard.end}, dst);
    }
    return produce_shard_by_slicing(layout, shard, dst);
  }
};

}  // namespace

void Producer::index_layouts() {
  layouts_ = 0;
  for (std::uint32_t code = 0; code < kLayoutCount; ++code) {
    const auto l = static_cast<Layout>(code);
    if (slot(l)) layouts_ |= layout_bit(l);
  }
}

std::string Producer::what() const { return origin_ + ": tensor '" + entry_.name + "'"; }

Error Producer::not_packed_int(Layout layout) const {
  return make_error(ErrorCode::kUnsupported,
                    what() + ": layout " + std::string(layout_name(layout)) +
                        ": served only from intq tensors of kind int (integer grids: GPTQ, AWQ, compressed-tensors, "
                        "GGUF Q4_0/Q8_0), not " + std::string(container::encoding_name(entry_.encoding)));
}

Result<Slot> Producer::dense_slot(Layout layout) const {
  std::optional<DType> dtype = layout_dtype(layout, entry_.dtype);
  if (!dtype || !decode::can_decode(entry_, *dtype)) {
    return make_error(ErrorCode::kUnsupported, what() + ": layout " + std::string(layout_name(layout)) +
                                                   " is not served for " +
                                                   std::string(container::encoding_name(entry_.encoding)) + " " +
                                                   std::string(dtype_name(entry_.dtype)));
  }
  Slot out;
  out.dtype = *dtype;
  out.shape = entry_.shape;
  out.strides = row_major_strides(entry_.shape);
  out.bytes = decode::decoded_bytes(entry_, *dtype);
  if (out.bytes == 0 && entry_.element_count() != 0) {
    return make_error(ErrorCode::kUnsupported, what() + ": no whole-byte size");
  }
  return out;
}

Result<Slot> Producer::shard_slot(Layout layout, const ShardRange& shard) const {
  EPK_TRY_ASSIGN(Slot whole, slot(layout));
  if (shard.whole()) return whole;
  return serve::shard_slot(whole, layout, shard, origin_, entry_.name);
}

Status Producer::produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const {
  if (shard.whole()) return produce(layout, dst);
  return produce_shard_by_slicing(layout, shard, dst);
}

Status Producer::produce_shard_by_slicing(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const {
  EPK_TRY_ASSIGN(Slot whole, slot(layout));
  std::vector<std::uint8_t> all(whole.bytes);
  EPK_TRY(produce(layout, all));
  return slice_served(whole, layout, shard, all, dst);
}

Result<Slot> LatticeRansProducer::slot(Layout layout) const {
  if (is_packed_int(layout)) return not_packed_int(layout);
  if (is_rowwise(layout) && decode::can_decode_rowwise(entry_)) {
    // Values then per-row scales in one slot (layout.h); from_container bounded rows * cols by the file.
    Slot out;
    out.dtype = layout == Layout::kRowwiseI8 ? DType::kI8 : DType::kF8E4M3;
    out.shape = entry_.shape;
    out.strides = row_major_strides(entry_.shape);
    out.bytes = rowwise_scales_offset(entry_.shape[0], entry_.shape[1]) + entry_.shape[0] * 4;
    return out;
  }
  return dense_slot(layout);
}

Status LatticeRansProducer::produce(Layout layout, std::span<std::uint8_t> dst) const {
  EPK_TRY_ASSIGN(Slot s, slot(layout));
  if (is_rowwise(layout)) {
    const std::uint64_t rows = entry_.shape[0], values = rows * entry_.shape[1];
    const std::uint64_t at = rowwise_scales_offset(rows, entry_.shape[1]);
    if (dst.size() != s.bytes) {
      return make_error(ErrorCode::kInvalidArgument, what() + ": output size does not match the rowwise slot");
    }
    // Slots start at the allocator's alignment (>= 64), so the scales are 4-byte aligned.
    std::span<float> scales(reinterpret_cast<float*>(dst.data() + at), rows);
    EPK_TRY(decode::decode_tensor_rowwise(reader_, entry_, rowwise_type(layout), dst.first(values), scales));
    std::fill(dst.begin() + values, dst.begin() + at, 0);  // padding: no stale bytes of an earlier slot
    return {};
  }
  return decode::decode_tensor(reader_, entry_, s.dtype, dst);
}

Status LatticeRansProducer::produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const {
  if (shard.whole()) return produce(layout, dst);
  EPK_TRY_ASSIGN(Slot st, shard_slot(layout, shard));
  if (dst.size() != st.bytes) {
    return make_error(ErrorCode::kInvalidArgument, origin_ + ": shard output size does not match the shard");
  }
  const decode::Slice slice{shard.axis(), shard.begin, shard.end};
  if (is_rowwise(layout)) {
    const std::uint64_t rows = st.shape[0], values = rows * st.shape[1];
    const std::uint64_t at = rowwise_scales_offset(rows, st.shape[1]);
    std::span<float> scales(reinterpret_cast<float*>(dst.data() + at), rows);
    EPK_TRY(decode::decode_tensor_rowwise_slice(reader_, entry_, rowwise_type(layout), slice, dst.first(values),
                                                scales));
    std::fill(dst.begin() + values, dst.begin() + at, 0);
    return {};
  }
  if (decode::can_decode_slice(entry_, st.dtype, slice.axis)) {
    return decode::decode_tensor_slice(reader_, entry_, st.dtype, slice, dst);
  }
  return produce_shard_by_slicing(layout, shard, dst);
}

Result<std::unique_ptr<Producer>> make_producer(const container::Reader& reader, const container::TensorEntry& entry,
                                                std::string origin) {
  std::unique_ptr<Producer> p;
  switch (entry.encoding) {
    case container::Encoding::kLatticeRans: {
      // Validated here once, so a malformed stream refuses the model instead of failing its first acquire.
      EPK_TRY_ASSIGN(rans::StoredStream st, rans::from_container(reader, entry));
      p = std::make_unique<LatticeRansProducer>(reader, entry, std::move(origin), std::move(st));
      break;
    }
    case container::Encoding::kIntq: {
      EPK_TRY_ASSIGN(auto header, intq_params(reader, entry));
      p = std::make_unique<IntqProducer>(reader, entry, std::move(origin), std::move(header));
      break;
    }
    default:
      p = std::make_unique<RawProducer>(reader, entry, std::move(origin));
      break;
  }
  p->index_layouts();
  return p;
}

}  // namespace epk::serve
