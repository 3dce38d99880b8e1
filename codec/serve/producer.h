// The serving layer: one producer per stored tensor, chosen by its encoding, that says which serving layouts
// (codec/serve/layout.h) the tensor is served in and their slots (codec/serve/slot.h), and writes a layout on the
// host into a destination, whole or as a tensor-parallel shard (codec/serve/shard.h). epkd (daemon/sources/epk_source.cc),
// the `epk` CLI and libepk call it; the device half (a decode or repack enqueued into a device address) is
// codec/serve/device_plan.h.
//
//   auto p = make_producer(reader, entry, "model.epk");   // validates the tensor once: stream tables, intq params
//   auto slot = (*p)->slot(Layout::kDenseBF16);            // bytes, dtype, shape, strides (no allocation)
//   (*p)->produce(Layout::kDenseBF16, dst);                 // dst: exactly slot->bytes of host memory
//
// Layouts by encoding (a layout not listed is kUnsupported, the message naming the tensor and why):
//   raw           stored (the bytes as stored); dense:{bf16,fp16,fp32} from F32, F16, BF16, F8_E4M3, F8_E5M2 (and I8
//                 as integers): narrowing rounds to nearest even, overflow to infinity (torch's .to())
//   lattice-rans  dense:{bf16,fp16,fp32} and stored (dense in the source dtype, what the reference's decompress
//                 returns) through the CPU decoder; rowwise:{int8,fp8_e4m3} of 2-D tensors: values then per-row fp32
//                 scales in one slot (layout.h), rans::decode_rowwise's output
//   intq          dense:{bf16,fp16,fp32} and stored (dense in the source dtype), bit for bit what `epk decompress`
//                 writes; kind "int" also gptq, gptq-v2, awq, marlin: the CPU writers' parts in one slot
//                 (codec/serve/intq_producer.h)
// Shards: raw tensors slice their stored bytes, lattice-rans row shards decode the tiles of their rows and column
// shards every row in bands keeping their columns (codec/decode/decode_slice.h); intq packed layouts cut the logical
// tensor first (intq_producer.h); what has no cheaper path (intq dense layouts) decodes the whole tensor and slices
// it (codec/serve/shard_slice.h: the plain reference the others are tested against).
//
// A producer reads through the reader it was made from (which must outlive it) and holds no mutable state: its
// calls are safe from several threads at once. It does not check buffer checksums: the caller decides when
// (container::Reader::verify), since it knows whether the bytes were checked already.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/serve/layout.h"
#include "codec/serve/shard.h"
#include "codec/serve/slot.h"

namespace epk::serve {

// A set of layouts: bit (1 << code) for each.
using LayoutSet = std::uint32_t;
inline constexpr LayoutSet layout_bit(Layout l) { return LayoutSet{1} << static_cast<std::uint32_t>(l); }
static_assert(kLayoutCount <= 32);

class LatticeRansProducer;
class IntqProducer;

class Producer {
 public:
  virtual ~Producer() = default;
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  const container::TensorEntry& entry() const { return entry_; }
  const std::string& origin() const { return origin_; }
  // The layouts slot() answers for (computed once, at make_producer).
  LayoutSet layouts() const { return layouts_; }
  bool serves(Layout l) const { return (layouts_ & layout_bit(l)) != 0; }

  // The whole tensor's slot in `layout`; kUnsupported naming the origin, the tensor and the reason where it is not
  // served. Does not allocate when it succeeds (epkd calls it on every acquire).
  virtual Result<Slot> slot(Layout layout) const = 0;
  // A resolved shard's slot (whole: slot(layout)); kUnsupported where the layout cannot be cut there. Does not
  // allocate when it succeeds.
  virtual Result<Slot> shard_slot(Layout layout, const ShardRange& shard) const;
  // Writes the whole tensor in `layout` into dst (host memory, exactly slot(layout)->bytes). Errors name the tensor;
  // a corrupt tile is kCorruptTile, and dst is then not to be served.
  virtual Status produce(Layout layout, std::span<std::uint8_t> dst) const = 0;
  // Writes the shard into dst (exactly shard_slot()->bytes); whole: produce().
  virtual Status produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const;

  // The encoding's own producer, or nullptr: what the device path plans from (device_plan.h).
  virtual const LatticeRansProducer* lattice_rans() const { return nullptr; }
  virtual const IntqProducer* intq() const { return nullptr; }

 protected:
  Producer(const container::Reader& reader, const container::TensorEntry& entry, std::string origin)
      : reader_(reader), entry_(entry), origin_(std::move(origin)) {}
  // Sets layouts() from slot(): called once by make_producer, after construction.
  void index_layouts();
  friend Result<std::unique_ptr<Producer>> make_producer(const container::Reader&, const container::TensorEntry&,
                                                         std::string);

  // The slot of the dense layouts (and stored) every encoding serves through decode::decode_tensor, and its
  // refusal; packed integer layouts refused with the message of a tensor that is not intq kind "int".
  Result<Slot> dense_slot(Layout layout) const;
  Error not_packed_int(Layout layout) const;
  // The plain shard reference: the whole tensor produced into a temporary, the shard copied out.
  Status produce_shard_by_slicing(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const;
  // "ORIGIN: tensor 'NAME'" for messages.
  std::string what() const;

  const container::Reader& reader_;
  const container::TensorEntry& entry_;
  const std::string origin_;
  LayoutSet layouts_ = 0;
};

// The producer for `entry` of `reader`, by its encoding, after validating what it will read: a lattice-rans
// stream's params, buffers and tables (rans::from_container), an intq "int" tensor's params (read_int_header; no
// buffer is read). Errors name `origin` (the file, in messages), the tensor and the field. The reader and the entry
// must outlive the producer.
Result<std::unique_ptr<Producer>> make_producer(const container::Reader& reader, const container::TensorEntry& entry,
                                                std::string origin);

}  // namespace epk::serve
