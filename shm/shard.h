// Tensor-parallel shards as the wire and its users name them (epk::shm). What a shard request means and how it
// resolves against a shape is codec/serve/shard.h's (the serving layer in codec/ produces shards, and codec/ may not
// include shm/); this header only brings those names into epk::shm, where the protocol uses them.
#pragma once

#include "codec/serve/shard.h"

namespace epk::shm {

using serve::describe;
using serve::resolve_shard;
using serve::shard_dim_name;
using serve::ShardDim;
using serve::ShardForm;
using serve::ShardRange;
using serve::ShardSpec;
using serve::slice_geometry;
using serve::SliceGeometry;
using serve::split_range;
using serve::SplitBounds;

}  // namespace epk::shm
