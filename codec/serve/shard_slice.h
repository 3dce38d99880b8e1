// Shards of served tensors (codec/serve/shard.h): the slot a shard takes, and the plain reference that cuts a shard
// out of the whole tensor's slot bytes. Producers without a cheaper path (producer.h) and epkd's sources without a
// file (daemon/sources/model_source.h) produce shards with these (the whole tensor, then the slice); the producers' decodes
// that touch only what a shard covers are held to this reference bit for bit by the tests.
//
// Layouts and what a shard of each holds:
//   stored, dense:*   the slice of the row-major tensor, compact: shape[axis] = extent, row-major strides
//   rowwise:*         [rows', cols'] values (the slice) then rows' fp32 scales at rowwise_scales_offset(rows',
//                     cols'): a row shard takes its rows' scales, a column shard every row's (scales are per row)
//   packed integer    not here: their parts follow the layouts' packing rules (codec/serve/intq_producer.h)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "codec/common/result.h"
#include "codec/serve/layout.h"
#include "codec/serve/shard.h"
#include "codec/serve/slot.h"

namespace epk::serve {

// The shard's Slot from the whole tensor's (`whole`, as Producer::slot answers). kUnsupported for packed integer
// layouts and for slices that do not fall on whole bytes (sub-byte element types). `origin` and `tensor` name it in
// errors. Does not allocate when it succeeds.
Result<Slot> shard_slot(const Slot& whole, Layout layout, const ShardRange& shard,
                  std::string_view origin, std::string_view tensor);

// Copies the shard out of `whole_bytes` (the whole tensor's slot, whole.bytes long) into dst (the shard's
// shard_slot().bytes long), zeroing the rowwise padding.
Status slice_served(const Slot& whole, Layout layout, const ShardRange& shard,
                    std::span<const std::uint8_t> whole_bytes, std::span<std::uint8_t> dst);

}  // namespace epk::serve
