// The packed integer serving layouts (shm::Layout kGptq, kGptqV2, kAwq, kMarlin) of intq "int" tensors, for the .epk
// model source: the slot's parts are what codec/layouts' CPU writers make from the stored logical tensor
// (layouts::write_layout), placed by shm::packed_parts. Dense layouts of intq tensors need nothing here: they go
// through decode::decode_tensor like `epk decompress`.
//
// inspect() runs once per tensor at open and reads only the params (no buffer), so served() answers an acquire from
// what it kept. A layout that cannot hold a tensor exactly (AWQ of an act-order tensor, whose activations would need
// a permutation AWQ cannot carry; Marlin of an asymmetric one; a bit width the layout lacks) is kUnsupported naming
// the tensor, from served(); one that only the codes can refuse (gptq v1 with a zero point of 0) from produce().
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "codec/container/reader.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "daemon/model_source.h"
#include "shm/shard.h"

namespace epk::daemon::intq_serving {

// What write_layout makes of a tensor in a packed layout, from its params alone: the padded geometry and the parts
// as shm::packed_parts places them (served() sizes the slot by it; the GPU path writes the same parts).
struct Plan {
  shm::PackedGeometry geometry;
  std::array<shm::PackedPart, shm::kMaxPackedParts> parts{};
  std::size_t count = 0;
  std::uint64_t bytes = 0;
};
// kUnsupported naming `origin`, tensor `name` and the layout where the layout cannot hold the tensor (see above).
Result<Plan> packed_plan(const layouts::intq::IntHeader& h, const std::string& origin, const std::string& name,
                         shm::Layout layout);
// The codec/layouts target that writes a packed serving layout (layout_alignment gives its padding).
layouts::Layout target_of(shm::Layout layout);

// nullopt for tensors that are not intq kind "int" (their packed layouts are kUnsupported); an error for an int
// entry whose params are malformed (the model is refused at open).
Result<std::optional<layouts::intq::IntHeader>> inspect(const container::Reader& reader,
                                                        const container::TensorEntry& entry);

// The slot of `layout` (a packed integer layout) for the tensor; header is inspect()'s answer.
Result<ServedTensor> served(const std::optional<layouts::intq::IntHeader>& header, const std::string& origin,
                            const container::TensorEntry& entry, shm::Layout layout);

// Reads the logical tensor, writes the layout with the CPU writers and places the parts in dst (served().bytes).
Status produce(const container::Reader& reader, const container::TensorEntry& entry, shm::Layout layout,
               std::span<std::uint8_t> dst);

// Tensor-parallel shards of packed layouts (shm/shard.h; the entry's shape is [N, K], out x in). The logical tensor
// is cut first and the layout written from the cut, so every part follows its layout's packing rule:
//   rows (N, column-parallel): codes' and scales'/zeros' columns [n0, n1); g_idx and every group travel whole.
//   cols (K, row-parallel): codes' rows [k0, k1) and their g_idx. Static groups (g_idx[k] = k / G): the shard keeps
//     its groups [k0 / G, ceil(k1 / G)) when k0 and k1 fall on group boundaries (k1 may be K); elsewhere only gptq and
//     gptq-v2 (which carry g_idx) can take it, keeping every group, and awq / marlin refuse naming the boundary.
//     Act-order groups (a g_idx buffer): every group's scales and zeros travel with the shard and its g_idx rows
//     index them. A tensor with a perm (rows stored in another order than the input features) refuses K shards.
// The shard's own padding is the layout's (write_layout pads the cut). served_shard answers from the params alone.
Result<ServedTensor> served_shard(const std::optional<layouts::intq::IntHeader>& header, const std::string& origin,
                                  const container::TensorEntry& entry, shm::Layout layout,
                                  const shm::ShardRange& shard);
Status produce_shard(const container::Reader& reader, const container::TensorEntry& entry, shm::Layout layout,
                     const shm::ShardRange& shard, std::span<std::uint8_t> dst);

}  // namespace epk::daemon::intq_serving
