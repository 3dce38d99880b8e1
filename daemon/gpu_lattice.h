// Lattice-rans tensors on a device lane (daemon/gpu_backend.h): the model's compressed tier and the decodes into
// slots, planned by the serving layer (codec/serve/device_plan.h).
//
// - upload_tier: every lattice-rans tensor's stored buffers, checksummed (ModelSource::verify_stored: the device
//   decodes skip produce()'s after-decode check), copied into one shareable region at cuda::tier_layout's places
//   (the rule libepk's client-side decode reads them by), with the whole tensor's bf16 plan (the common serving
//   layout) built and its scratch uploaded before the first acquire.
// - Decoder::enqueue: plans for the other formats and for row shards are built on a tensor's first decode in that
//   form and kept (row-range plans: at most kMaxRangePlans per tensor, the oldest freed, since any client may ask for
//   any row range and each holds device scratch outside the slot budget). A row shard decodes only the tiles covering
//   its rows; a column shard decodes the whole tensor into the lane's column work buffer (grown to the largest, kept)
//   and copies its columns. Every byte kept is reported through the Account, for epkd's resident-bytes figures.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/serve/device_plan.h"
#include "daemon/model_source.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"

namespace epk::daemon::gpu_lattice {

// Row-range plans kept per resident tensor: enough for every rank of one world size up to 8 in one format.
inline constexpr std::size_t kMaxRangePlans = 8;

struct PlanKey {
  cuda::OutputFormat format;
  std::uint32_t row_begin = 0, row_end = 0;
  auto operator<=>(const PlanKey&) const = default;
};

// One tensor's decode inputs on the device and the plans built for it (scratch uploaded), whole or a row shard's.
struct Tensor {
  struct Plan {
    serve::LatticeDevicePlan plan;
    shm::DeviceBuffer scratch;
  };
  std::uint32_t model = 0;                          // its model id (resident bytes are counted per model)
  std::shared_ptr<const ModelSource> source_model;  // keeps `producer` valid: a first use plans from it
  const serve::LatticeRansProducer* producer = nullptr;
  std::shared_ptr<const shm::DevicePool> tier;  // the model's compressed tier, which `dev` points into
  cuda::DeviceBuffers dev;
  std::map<PlanKey, Plan> plans;  // touched by the GPU thread only (and upload_tier before publication)
  std::deque<PlanKey> range_plans;  // the row-range plans among them, oldest first
};

struct Tier {
  std::shared_ptr<shm::DevicePool> region;       // null: the model has no lattice-rans tensor
  std::vector<std::shared_ptr<Tensor>> tensors;  // per tensor of the model; null where not lattice-rans
  std::uint64_t bytes = 0;                       // the region and the plans' scratch
};
// The tier of model `model_id` of src on `device`, uploaded on `stream` (synchronised before it returns).
Result<Tier> upload_tier(std::uint32_t model_id, const std::shared_ptr<const ModelSource>& src, int device,
                         const shm::CudaStream& stream);

// Resident bytes added (> 0) or freed (< 0) on the lane: for `model`, or the lane's own (nullopt: the column work).
using Account = std::function<void(std::optional<std::uint32_t> model, std::int64_t delta)>;

// The slot work of one lane's GPU thread (not thread-safe: that thread only).
class Decoder {
 public:
  Decoder(int device, Account account) : device_(device), account_(std::move(account)) {}

  // Whether t's `layout` decodes on the device (else the CPU path produces it).
  static bool serves(const Tensor& t, shm::Layout layout);
  // Enqueues `shard` (resolved; whole for the whole tensor) of t in `layout` into [dst, dst + bytes) on stream.
  Status enqueue(Tensor& t, shm::Layout layout, const shm::ShardRange& shard, std::uint64_t dst, std::uint64_t bytes,
                 const shm::CudaStream& stream);
  // After the stream has synchronised: the tile status of the last enqueue (kCorruptTile naming the tile), once.
  Status check(const shm::CudaStream& stream);
  // Nothing to check (the enqueue failed).
  void forget() { pending_ = nullptr; }

 private:
  Result<Tensor::Plan*> plan_for(Tensor& t, shm::Layout layout, const PlanKey& key, const shm::CudaStream& stream);

  const int device_;
  const Account account_;
  shm::DeviceBuffer work_;  // column shards' whole decode
  Tensor::Plan* pending_ = nullptr;  // whose status the last enqueue copied back, until check()
};

}  // namespace epk::daemon::gpu_lattice
