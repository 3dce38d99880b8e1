// The daemon's view of one opened model: tensor metadata, the size and shape a tensor takes in a serving layout, and a
// producer that decodes or copies it into a slot. The registry holds these; the decode scheduler calls produce() on
// its worker threads, so implementations must be safe to call concurrently (const, no shared mutable state).
//
// Implementations: SyntheticSource (synthetic_source.h, deterministic tensors for tests and benchmarks) and the .epk
// reader (epk_source.h: the seam where the container and CPU codec plug in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "daemon/dims.h"
#include "shm/layout.h"
#include "shm/shard.h"

namespace epk::rans {
struct LatticeRansStream;
}
namespace epk::layouts {
struct QuantTensor;
namespace intq {
struct IntHeader;
}
}  // namespace epk::layouts

namespace epk::daemon {

struct TensorMeta {
  std::string name;
  std::vector<std::uint64_t> shape;
  DType dtype = DType::kF32;  // as stored (source dtype)
  std::uint64_t stored_bytes = 0;
  std::string encoding;  // as stored: "raw", "lattice-rans", "intq", ... ("synthetic" for SyntheticSource)
};

// What a client receives for a tensor in a layout: the slot size and how to read it. Fixed-size (no heap): served()
// runs on every acquire, cache hits included.
struct ServedTensor {
  std::uint64_t bytes = 0;
  DType dtype = DType::kF32;
  Shape shape;
  Strides strides;  // elements, row-major unless the layout says otherwise
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // Where the model came from, for log and error messages ("model.epk", "synthetic:...").
  virtual const std::string& origin() const = 0;
  virtual const std::vector<TensorMeta>& tensors() const = 0;
  // The model file, open read-only (-1 for a source without one): what a client that decodes in its own context maps
  // to read the streams' tables (open_stored).
  virtual int file_fd() const { return -1; }
  // The slot size, dtype, shape and strides of `tensor` in `layout`; kUnsupported if the layout is not servable or the
  // rank exceeds shm::kMaxDims. Called on every acquire: must not allocate when it succeeds.
  virtual Result<ServedTensor> served(std::size_t tensor, shm::Layout layout) const = 0;
  // Decodes or copies `tensor` in `layout` into dst (host memory of the pool, exactly served().bytes long) on the
  // calling thread. Errors name the tensor; a corrupt tile is an error, never served.
  virtual Status produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const = 0;
  // A shard of `tensor` (resolved against its shape, shm/shard.h): its slot size and shape, and its bytes. The
  // defaults (daemon/shard_slice.cc) slice what served() and produce() give for the whole tensor: produce_shard then
  // decodes the whole tensor into a temporary and copies the shard out, the plain reference that sources with
  // cheaper paths are tested against. A whole ShardRange is served() / produce() exactly. served_shard must not
  // allocate when it succeeds (it runs on every shard acquire); a layout a source cannot shard is kUnsupported.
  virtual Result<ServedTensor> served_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard) const;
  virtual Status produce_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                               std::span<std::uint8_t> dst) const;
  // Whether the bytes behind the source may have changed under it (a file truncated or unreadable under its map:
  // codec/common/map_faults.h). Checked after every produce: what was read since cannot be trusted.
  virtual bool damaged() const { return false; }

  // GPU path (daemon/gpu_backend.h): the validated view of a lattice-rans tensor (spans into the mapped file, or into
  // epkd's memory with the resident tier; valid while the source lives), or nullptr where the tensor has another
  // encoding or the source has no such view.
  virtual const rans::LatticeRansStream* lattice_stream(std::size_t /*tensor*/) const { return nullptr; }
  // Checks the tensor's stored bytes (checksums) without decoding: the GPU path calls it before it keeps them resident
  // on the device, since its decodes skip produce()'s after-decode check.
  virtual Status verify_stored(std::size_t /*tensor*/) const { return {}; }
  // GPU path for intq "int" tensors (FORMAT.md 11): the params kept at open (nullptr for other tensors), and the
  // logical tensor read from the stored buffers (rANS-coded codes decoded), which the device tier uploads once per
  // padding. read_intq fills *out and is called on the GPU path's threads only.
  virtual const layouts::intq::IntHeader* intq_header(std::size_t /*tensor*/) const { return nullptr; }
  virtual Status read_intq(std::size_t /*tensor*/, layouts::QuantTensor* /*out*/) const {
    return make_error(ErrorCode::kUnsupported, origin() + ": no intq tensors");
  }
};

// Row-major strides, in elements, for `shape` (at most shm::kMaxDims entries are used).
Strides row_major_strides(std::span<const std::uint64_t> shape);

}  // namespace epk::daemon
