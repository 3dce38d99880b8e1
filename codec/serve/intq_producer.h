// intq tensors (FORMAT.md 11) in the serving layer (codec/serve/producer.h): dense layouts through
// decode::decode_tensor like `epk decompress`, and, for kind "int", the packed integer serving layouts (gptq,
// gptq-v2, awq, marlin): the slot's parts are what codec/layouts' CPU writers make from the stored logical tensor
// (layouts::write_layout), placed by packed_parts (codec/serve/layout.h).
//
// The params are read once, at make_producer (no buffer), so slot() answers an acquire from what it kept. A layout
// that cannot hold a tensor exactly (AWQ of an act-order tensor, whose activations would need a permutation AWQ
// cannot carry; Marlin of an asymmetric one; a bit width the layout lacks) is kUnsupported naming the tensor, from
// slot(); one that only the codes can refuse (gptq v1 with a zero point of 0) from produce().
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "codec/container/reader.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "codec/serve/producer.h"

namespace epk::serve {

// What write_layout makes of a tensor in a packed layout, from its params alone: the padded geometry and the parts
// as packed_parts places them (slot() sizes the slot by it; the device path writes the same parts).
struct PackedPlan {
  PackedGeometry geometry;
  std::array<PackedPart, kMaxPackedParts> parts{};
  std::size_t count = 0;
  std::uint64_t bytes = 0;
};
// kUnsupported naming `origin`, tensor `name` and the layout where the layout cannot hold the tensor (see above).
Result<PackedPlan> packed_plan(const layouts::intq::IntHeader& h, const std::string& origin, const std::string& name,
                               Layout layout);
// The codec/layouts target that writes a packed serving layout (layout_alignment gives its padding).
layouts::Layout target_of(Layout layout);

// The params of an intq kind "int" entry (read_int_header; no buffer is read); nullopt for other entries; an error
// for an int entry whose params are malformed.
Result<std::optional<layouts::intq::IntHeader>> intq_params(const container::Reader& reader,
                                                            const container::TensorEntry& entry);

// Tensor-parallel shards of packed layouts (shm/shard.h; the entry's shape is [N, K], out x in). The logical tensor
// is cut first and the layout written from the cut, so every part follows its layout's packing rule:
//   rows (N, column-parallel): codes' and scales'/zeros' columns [n0, n1); g_idx and every group travel whole.
//   cols (K, row-parallel): codes' rows [k0, k1) and their g_idx. Static groups (g_idx[k] = k / G): the shard keeps
//     its groups [k0 / G, ceil(k1 / G)) when k0 and k1 fall on group boundaries (k1 may be K); elsewhere only gptq and
//     gptq-v2 (which carry g_idx) can take it, keeping every group, and awq / marlin refuse naming the boundary.
//     Act-order groups (a g_idx buffer): every group's scales and zeros travel with the shard and its g_idx rows
//     index them. A tensor with a perm (rows stored in another order than the input features) refuses K shards.
// The shard's own padding is the layout's (write_layout pads the cut). shard_slot answers from the params alone.
class IntqProducer final : public Producer {
 public:
  // header: read_int_header's answer for kind "int" tensors, nullopt for the other kinds (no packed layouts).
  IntqProducer(const container::Reader& reader, const container::TensorEntry& entry, std::string origin,
               std::optional<layouts::intq::IntHeader> header)
      : Producer(reader, entry, std::move(origin)), header_(std::move(header)) {}

  Result<Slot> slot(Layout layout) const override;
  Result<Slot> shard_slot(Layout layout, const ShardRange& shard) const override;
  Status produce(Layout layout, std::span<std::uint8_t> dst) const override;
  Status produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const override;
  const IntqProducer* intq() const override { return this; }

  // The params of a kind "int" tensor (nullptr for other kinds), and its packed plan for `layout`.
  const layouts::intq::IntHeader* header() const { return header_ ? &*header_ : nullptr; }
  Result<PackedPlan> packed_plan(Layout layout) const;
  // The logical tensor read from the stored buffers (rANS-coded codes decoded): what the device path uploads.
  Result<layouts::QuantTensor> read() const;

 private:
  std::optional<layouts::intq::IntHeader> header_;
};

}  // namespace epk::serve
