// Tensor-parallel shards: the one place that says what a shard request means, checks it against a tensor's shape and
// resolves it into a range. epkd keys its cache by the resolved range, sizes slots by it and decodes only what it
// covers; libepk and the Python package build requests with it (docs/decisions/shards.md).
//
// A shard cuts one dimension of a tensor of shape [d0, d1, ...]:
//   rows     dimension 0: the output features of a torch Linear weight [out, in] (column-parallel layers:
//            q/k/v/gate/up), or the elements of a 1-D tensor (a bias)
//   cols     dimension 1: the input features of a Linear weight (row-parallel layers: o/down); rank >= 2 only
// and asks for it in one of two forms:
//   range    [begin, end) along that dimension, 0 <= begin < end <= extent
//   split    rank r of world n, by split_range() below
// The served tensor is the slice, compact and row-major: its shape is the whole shape with the cut dimension's
// extent replaced by end - begin.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "codec/common/result.h"

namespace epk::serve {

// Stored on the wire: never renumber.
enum class ShardDim : std::uint32_t { kNone = 0, kRows = 1, kCols = 2 };
enum class ShardForm : std::uint32_t { kRange = 0, kSplit = 1 };

// A request as a client states it (the wire carries it as is: u32 dim, u32 form, u64 a, u64 b).
struct ShardSpec {
  ShardDim dim = ShardDim::kNone;  // kNone: the whole tensor (a and b unused)
  ShardForm form = ShardForm::kRange;
  std::uint64_t a = 0;  // range: begin; split: rank
  std::uint64_t b = 0;  // range: end; split: world size

  static ShardSpec rows(std::uint64_t begin, std::uint64_t end) { return {ShardDim::kRows, ShardForm::kRange, begin, end}; }
  static ShardSpec cols(std::uint64_t begin, std::uint64_t end) { return {ShardDim::kCols, ShardForm::kRange, begin, end}; }
  static ShardSpec split(ShardDim dim, std::uint64_t rank, std::uint64_t world) {
    return {dim, ShardForm::kSplit, rank, world};
  }
  bool whole() const { return dim == ShardDim::kNone; }
  bool operator==(const ShardSpec&) const = default;
};

// A resolved shard: [begin, end) along `dim`, checked against the tensor's shape. dim kNone: the whole tensor
// (begin = end = 0), so that a whole-tensor slot and every shard of the same tensor are distinct cache keys.
struct ShardRange {
  ShardDim dim = ShardDim::kNone;
  std::uint64_t begin = 0, end = 0;

  bool whole() const { return dim == ShardDim::kNone; }
  std::uint64_t extent() const { return end - begin; }
  // The index of the cut dimension (0 or 1); meaningless when whole().
  std::size_t axis() const { return dim == ShardDim::kCols ? 1 : 0; }
  bool operator==(const ShardRange&) const = default;
};

// The even-split rule for `split` shards: every rank but the last gets ceil(extent / world) indices, the last what
// is left. Where world divides extent (the only case vLLM's and Megatron-LM's linear layers accept: their divide()
// asserts it) this is their split exactly; otherwise it is torch.chunk's rule (ceil-sized shards, the last one
// smaller). A rank whose share would be empty (extent 5 over 4 ranks: chunk 2, rank 3 starts at 6) is refused by
// resolve_shard. Returns {begin, end}, end <= begin when empty; world > 0 and rank < world are the caller's.
struct SplitBounds {
  std::uint64_t begin = 0, end = 0;
};
SplitBounds split_range(std::uint64_t extent, std::uint64_t rank, std::uint64_t world);

// Checks `spec` against `shape` (tensor `tensor`, for the message) and resolves it. kInvalidArgument, naming the
// tensor, its shape and the range, for: an unknown dim or form, cols of a 1-D tensor, a rank-0 tensor, an empty or
// reversed range, a range past the extent, world 0, rank >= world, a split share that is empty. Allocates only when
// it fails.
Result<ShardRange> resolve_shard(const ShardSpec& spec, std::span<const std::uint64_t> shape, std::string_view tensor);

// "rows [0, 128)", "cols [64, 96)", "whole" (error and log messages).
std::string describe(const ShardRange& r);
std::string describe(const ShardSpec& s);
std::string_view shard_dim_name(ShardDim d);  // "rows", "cols", "none"

// Element counts of a row-major tensor of `shape` around the cut axis: outer (dimensions before it), inner (after).
// A slice is `outer` runs of extent() * inner contiguous elements, one every shape[axis] * inner.
struct SliceGeometry {
  std::uint64_t outer = 1, extent = 0, inner = 1;
};
SliceGeometry slice_geometry(std::span<const std::uint64_t> shape, std::size_t axis);

}  // namespace epk::serve
