#include "codec/serve/shard.h"

#include <string>

namespace epk::serve {
namespace {

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string_view shard_dim_name(ShardDim d) {
  switch (d) {
    case ShardDim::kNone: return "none";
    case ShardDim::kRows: return "rows";
    case ShardDim::kCols: return "cols";
  }
  return "?";
}

SplitBounds split_range(std::uint64_t extent, std::uint64_t rank, std::uint64_t world) {
  const std::uint64_t chunk = extent / world + (extent % world != 0 ? 1 : 0);
  // rank < world, so rank * chunk < world * chunk < extent + world: no overflow for any extent a shape can hold.
  const std::uint64_t begin = rank * chunk;
  const std::uint64_t end = begin + chunk < extent ? begin + chunk : extent;
  return {begin, end};
}

std::string describe(const ShardRange& r) {
  if (r.whole()) return "whole";
  return std::string(shard_dim_name(r.dim)) + " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

std::string describe(const ShardSpec& s) {
  if (s.whole()) return "whole";
  if (s.form == ShardForm::kSplit) {
    return std::string(shard_dim_name(s.dim)) + " rank " + std::to_string(s.a) + " of " + std::to_string(s.b);
  }
  if (s.form == ShardForm::kRange) {
    return std::string(shard_dim_name(s.dim)) + " [" + std::to_string(s.a) + ", " + std::to_string(s.b) + ")";
  }
  return "form " + std::to_string(static_cast<std::uint32_t>(s.form));
}

Result<ShardRange> resolve_shard(const ShardSpec& spec, std::span<const std::uint64_t> shape, std::string_view tensor) {
  if (spec.dim == ShardDim::kNone) return ShardRange{};
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(tensor) + "' of shape " +
                                                       shape_text(shape) + ": shard " + describe(spec) + ": " + why);
  };
  if (spec.dim != ShardDim::kRows && spec.dim != ShardDim::kCols) {
    return bad("unknown shard dimension " + std::to_string(static_cast<std::uint32_t>(spec.dim)) +
               " (rows = 1, cols = 2)");
  }
  const std::size_t axis = spec.dim == ShardDim::kCols ? 1 : 0;
  if (shape.size() <= axis) {
    return bad(shape.empty() ? "a scalar cannot be sharded"
                             : "a 1-D tensor has no columns (shard its rows: dimension 0)");
  }
  const std::uint64_t extent = shape[axis];
  ShardRange r{spec.dim, 0, 0};
  switch (spec.form) {
    case ShardForm::kRange:
      r.begin = spec.a;
      r.end = spec.b;
      break;
    case ShardForm::kSplit: {
      if (spec.b == 0) return bad("world size 0");
      if (spec.a >= spec.b) return bad("rank " + std::to_string(spec.a) + " is not below world size " +
                                       std::to_string(spec.b));
      const SplitBounds s = split_range(extent, spec.a, spec.b);
      if (s.end <= s.begin) {
        return bad("rank " + std::to_string(spec.a) + "'s share is empty: " + std::to_string(extent) + " " +
                   std::string(shard_dim_name(spec.dim)) + " in shards of ceil(" + std::to_string(extent) + " / " +
                   std::to_string(spec.b) + ") = " + std::to_string(extent / spec.b + (extent % spec.b != 0)) +
                   " run out before it");
      }
      r.begin = s.begin;
      r.end = s.end;
      break;
    }
    default:
      return bad("unknown shard form " + std::to_string(static_cast<std::uint32_t>(spec.form)) +
                 " (range = 0, split = 1)");
  }
  if (r.begin >= r.end) return bad("empty or reversed range (begin must be below end)");
  if (r.end > extent) {
    return bad("range ends past the tensor's " + std::to_string(extent) + " " + std::string(shard_dim_name(spec.dim)));
  }
  return r;
}

SliceGeometry slice_geometry(std::span<const std::uint64_t> shape, std::size_t axis) {
  SliceGeometry g;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < axis) g.outer *= shape[i];
    else if (i == axis) g.extent = shape[i];
    else g.inner *= shape[i];
  }
  return g;
}

}  // namespace epk::serve
