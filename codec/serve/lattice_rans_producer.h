// Lattice-rans tensors in the serving layer (codec/serve/producer.h): the stream validated once at make_producer
// (rans::from_container: params, buffer sizes, tables, tile offsets), decoded on the host by the CPU decoder through
// decode::decode_tensor, and planned on a device from the same view (codec/serve/device_plan.h).
#pragma once

#include "codec/rans/container_io.h"
#include "codec/serve/producer.h"

namespace epk::serve {

class LatticeRansProducer final : public Producer {
 public:
  LatticeRansProducer(const container::Reader& reader, const container::TensorEntry& entry, std::string origin,
                      rans::StoredStream stored)
      : Producer(reader, entry, std::move(origin)), stored_(std::move(stored)) {}

  Result<Slot> slot(Layout layout) const override;
  Status produce(Layout layout, std::span<std::uint8_t> dst) const override;
  Status produce_shard(Layout layout, const ShardRange& shard, std::span<std::uint8_t> dst) const override;
  const LatticeRansProducer* lattice_rans() const override { return this; }

  // The validated view (spans into the reader's bytes, valid while the reader lives) and the source dtype.
  const rans::LatticeRansStream& stream() const { return stored_.stream; }
  DType source_dtype() const { return stored_.dtype; }

 private:
  rans::StoredStream stored_;
};

}  // namespace epk::serve
