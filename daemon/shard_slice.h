// Shards of served tensors (shm/shard.h) in the daemon: the slot a shard takes, and the plain reference that cuts a
// shard out of the whole tensor's slot bytes. ModelSource's default served_shard / produce_shard are built on these
// (decode the whole tensor, then slice); EpkSource overrides produce_shard with decodes that touch only what the
// shard covers, and the tests hold those to this reference bit for bit.
//
// Layouts and what a shard of each holds:
//   stored, dense:*   the slice of the row-major tensor, compact: shape[axis] = extent, row-major strides
//   rowwise:*         [rows', cols'] values (the slice) then rows' fp32 scales at rowwise_scales_offset(rows',
//                     cols'): a row shard takes its rows' scales, a column shard every row's (scales are per row)
//   packed integer    not here: their parts follow the layouts' packing rules (daemon/intq_serving.h)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "codec/common/result.h"
#include "daemon/model_source.h"
#include "shm/layout.h"
#include "shm/shard.h"

namespace epk::daemon {

// The shard's ServedTensor from the whole tensor's (`whole`, as served(tensor, layout) answers). kUnsupported for
// packed integer layouts and for slices that do not fall on whole bytes (sub-byte element types). `origin` and
// `tensor` name it in errors. Does not allocate when it succeeds.
Result<ServedTensor> shard_served(const ServedTensor& whole, shm::Layout layout, const shm::ShardRange& shard,
                                  std::string_view origin, std::string_view tensor);

// Copies the shard out of `whole_bytes` (the whole tensor's slot, whole.bytes long) into dst (the shard's
// shard_served().bytes long), zeroing the rowwise padding.
Status slice_served(const ServedTensor& whole, shm::Layout layout, const shm::ShardRange& shard,
                    std::span<const std::uint8_t> whole_bytes, std::span<std::uint8_t> dst);

}  // namespace epk::daemon
