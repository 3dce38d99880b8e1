// The daemon's view of one opened model: tensor metadata, the size and shape a tensor takes in a serving layout, and a
// producer that decodes or copies it into a slot. The registry holds these; the decode scheduler calls produce() on
// its worker threads, so implementations must be safe to call concurrently (const, no shared mutable state).
//
// Implementations: SyntheticSource (synthetic_source.h, deterministic tensors for tests and benchmarks) and the .epk
// reader (epk_source.h: the seam where the serving layer, codec/serve/producer.h, plugs in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/serve/slot.h"
#include "daemon/service/dims.h"
#include "shm/layout.h"
#include "shm/shard.h"

namespace epk::serve {
class Producer;
}

namespace epk::daemon {

struct TensorMeta {
  std::string name;
  std::vector<std::uint64_t> shape;
  DType dtype = DType::kF32;  // as stored (source dtype)
  std::uint64_t stored_bytes = 0;
  std::string encoding;  // as stored: "raw", "lattice-rans", "intq", ... ("synthetic" for SyntheticSource)
};

// What a client receives for a tensor in a layout: the slot size and how to read it (codec/serve/slot.h).
using ServedTensor = serve::Slot;
using serve::row_major_strides;

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
  // defaults (codec/serve/shard_slice.h) slice what served() and produce() give for the whole tensor: produce_shard
  // decodes the whole tensor into a temporary and copies the shard out, the plain reference that sources with
  // cheaper paths are tested against. A whole ShardRange is served() / produce() exactly. served_shard must not
  // allocate when it succeeds (it runs on every shard acquire); a layout a source cannot shard is kUnsupported.
  virtual Result<ServedTensor> served_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard) const;
  virtual Status produce_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                               std::span<std::uint8_t> dst) const;
  // Whether the bytes behind the source may have changed under it (a file truncated or unreadable under its map:
  // codec/common/map_faults.h). Checked after every produce: what was read since cannot be trusted.
  virtual bool damaged() const { return false; }

  // The serving layer's producer of `tensor` (codec/serve/producer.h; valid while the source lives), or nullptr for
  // a source without one (SyntheticSource). The GPU path plans from it: lattice-rans tensors decode on the device,
  // intq "int" tensors are repacked there (daemon/lanes/gpu_backend.h).
  virtual const serve::Producer* producer(std::size_t /*tensor*/) const { return nullptr; }
  // Checks the tensor's stored bytes (checksums) without decoding: the GPU path calls it before it keeps them resident
  // on the device, since its decodes skip produce()'s after-decode check.
  virtual Status verify_stored(std::size_t /*tensor*/) const { return {}; }
};

}  // namespace epk::daemon
