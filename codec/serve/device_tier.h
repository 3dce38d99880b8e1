// The serving layer's device half for one model on one device: its compressed tier (where each tensor's stored
// buffers sit in one device region), the plans kept per tensor, and the one decision of which device path writes a
// slot for any (encoding, layout, shard). epkd's device lanes (daemon/lanes/gpu_backend.cc), libepk's client-side decode
// (client/stored_tier.cc) and `epk decompress/verify --device cuda` (tools/epk/device_decode.cc) call it; none of
// them looks at a tensor's encoding.
//
//   DeviceTier tier(owner, producers, device, account);      // placement only: nothing allocated yet
//   alloc(tier.region_bytes());                              // the caller's region (epkd: a shareable VMM pool)
//   tier.upload(base, stream, verify, &warnings);             // epkd: region filled, first plans built
//   tier.bind(base);                                          // a client: the region epkd filled
//   auto w = tier.enqueue(i, layout, shard, dst, bytes, work, stream);   // kHost: nothing enqueued
//   sync(stream); tier.check();                               // kCorruptTile naming the tile, if any
//
// The paths, each bit for bit its producer's host produce() (codec/serve/producer.h):
//   kLatticeDecode  lattice-rans tensors in the layouts device_format() names: the whole tensor or a row shard by
//                   the fused decoder (a row shard decodes the tiles covering its rows), a column shard by a whole
//                   decode into the lane's ColumnWork and a 2-D copy of its columns;
//   kIntqKernels    intq "int" tensors: their logical form kept on the device (intq_device_form.h), dense layouts by
//                   the dequantize kernel, packed layouts by the repack kernels where intq_kernels_write says so;
//   kHost           everything else (raw tensors, shards of intq tensors, layouts no kernel writes): the caller
//                   produces the slot on the host and copies it.
//
// Threads: upload() and bind() before any other call; then enqueue()/check() from one thread at a time (a lane's
// GPU thread), each enqueue() followed by a synchronisation of its stream before the next. Built with CUDA only.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/cuda/decode/tier_layout.h"
#include "codec/cuda/device_allocation.h"
#include "codec/serve/device_plan.h"
#include "codec/serve/producer.h"

namespace epk::serve {

class IntqDeviceForm;

enum class DevicePath : std::uint8_t { kHost, kLatticeDecode, kIntqKernels };

// Whether a device tier holds the stored buffers of `entry`'s tensor in its region (lattice-rans tensors): a client decoding from
// epkd's tier checks every other buffer of such a tensor itself and reads its payload from the tier only.
bool in_device_region(const container::TensorEntry& entry);

// Device bytes kept beyond the region (plan scratch, intq device forms, column work): + when they come, - when they
// go. Not called when the tier itself is destroyed (its owner drops the whole count then).
using DeviceAccount = std::function<void(std::int64_t delta)>;

// Row-range plans kept per tensor: enough for every rank of one world size up to 8 in one format. Each holds device
// scratch outside any slot budget, and any client may ask for any row range, so the oldest goes past this.
inline constexpr std::size_t kMaxRangePlans = 8;

// A device buffer of a lane grown to the largest size asked and kept (the old one freed first, so a growth may move
// it), shared by every tier the lane serves. Same threading as DeviceTier::enqueue.
class LaneBuffer {
 public:
  LaneBuffer(int device, DeviceAccount account, const char* what)
      : device_(device), account_(std::move(account)), what_(what) {}
  Result<DeviceAddress> reserve(std::uint64_t bytes);

 private:
  const int device_;
  const DeviceAccount account_;
  const char* const what_;
  cuda::DeviceAllocation buf_;
};

// The work buffer for column shards (the whole decode they copy their columns from).
class ColumnWork : public LaneBuffer {
 public:
  ColumnWork(int device, DeviceAccount account) : LaneBuffer(device, std::move(account), "column shard work") {}
};

// The staging buffer of the tiers a lane decodes from host memory (DeviceTier::bind_host): one tensor's compressed
// inputs at a time, as large as the largest such tensor of any of them. A tier whose plans read it at an address it
// has moved from rebuilds them (DeviceTier::make_staging).
class StagingArea : public LaneBuffer {
 public:
  StagingArea(int device, DeviceAccount account) : LaneBuffer(device, std::move(account), "host tier staging") {}
};

struct DeviceWrite {
  DevicePath path = DevicePath::kHost;  // what wrote the slot (kHost: nothing was enqueued)
  DevicePath form = DevicePath::kHost;  // the tensor's device form, if any (kHost: none)
  std::string note;  // why a tensor with a device form took the host path when something failed (else empty)
};

class DeviceTier {
 public:
  // The tier of a model whose tensor i is served by producers[i] (null: none), on `device`. `owner` keeps the
  // producers valid (epkd's ModelSource, a client's reader). Placement only.
  DeviceTier(std::shared_ptr<const void> owner, std::vector<const Producer*> producers, int device,
             DeviceAccount account);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  // The bytes of the whole region (0: no tensor of this model is in it): a device region that holds every held
  // tensor (what a client binds), or a host tier.
  std::uint64_t region_bytes() const { return layout_.bytes; }
  // Whether tensor i's stored buffers are in the region.
  bool holds(std::size_t tensor) const { return tensor < layout_.tensors.size() && layout_.tensors[tensor]; }
  // The bytes tensor i's compressed form takes on the device: a held tensor's in a region, alignment included (a
  // device region of some held tensors takes the sum of theirs); an intq "int" tensor's device form, its stored
  // padding (IntqDeviceForm::stored_bytes: an upper bound); 0 for the others.
  std::uint64_t footprint(std::size_t tensor) const;
  // The footprints of every tensor, and of those on the device (place()).
  std::uint64_t tier_bytes() const;
  std::uint64_t device_tier_bytes() const;

  // epkd's split of a model between the device and host memory: only the tensors with on_device[i] keep their
  // compressed form on the device: held tensors their inputs in the device region, placed compactly in tensor order
  // (device_region_bytes()), intq tensors their device forms (upload()); the others are decoded from host memory
  // (bind_host). Before upload() or bind_host(); by default every tensor is on the device and the device region is
  // the whole region (the only form a client binds).
  void place(std::vector<bool> on_device);
  bool on_device(std::size_t tensor) const { return holds(tensor) && device_layout_.tensors[tensor].has_value(); }
  // Whether tensor i has an intq device form to make (kind "int") and place() kept it on the device.
  bool intq_on_device(std::size_t tensor) const;
  std::uint64_t device_region_bytes() const { return device_layout_.bytes; }
  std::size_t tensors() const { return producers_.size(); }

  // Fills the device region at `base` (device memory of device_region_bytes() on this tier's device): zeros, then
  // each tensor on the device's stored buffers after verify(i) (epkd's checksum: device decodes skip the host path's
  // after-decode check), with its whole-tensor plan in format `ready` built now when given (epkd: bf16, so that the
  // first acquire only patches and launches; other plans are built on first use); then the device form of every
  // intq "int" tensor on the device (verify(i) first). A tensor whose device form cannot be made (no device memory)
  // keeps the host path: a line naming it goes to *warnings. Synchronises `stream` before it returns (the copies read
  // the producers' host bytes).
  Status upload(DeviceAddress base, cuda::Stream stream, const std::function<Status(std::size_t)>& verify,
                std::optional<cuda::OutputFormat> ready, std::vector<std::string>* warnings);
  // A region another process filled by upload() from the same file (client-side decode); builds nothing.
  void bind(DeviceAddress base) { base_ = base; }
  // epkd's tier with tensors place() left in host memory. `host`: the model's host tier, the whole region in host
  // memory (region_bytes(), laid out as host_parts() says, best registered with the driver so that copies from it run
  // at the copy engine's speed), empty when every held tensor is on the device. Every decode of a held tensor that
  // is not on the device first copies its span() into the lane's staging area (grown to staging_bytes() at the first
  // such decode; `area` outlives this tier) on the decode's stream, then decodes from there: the decoder never reads
  // host memory in place. An intq tensor not on the device gets its form in pinned host memory at its first decode
  // (verify(i) first), copied into the same area before each (intq_device_form.h). Nothing decodes on the CPU, and
  // nothing is allocated on the device here: those tensors' plans are built on first use.
  Status bind_host(std::span<const std::byte> host, StagingArea& area, std::function<Status(std::size_t)> verify);
  bool staged() const { return area_ != nullptr; }
  // The largest span() of a held tensor not on the device (place()): what this tier needs of the staging area.
  std::uint64_t staging_bytes() const;
  // Bytes copied from host memory to the staging buffer so far (same thread as enqueue()).
  std::uint64_t staged_bytes() const { return staged_bytes_; }
  // The pinned host bytes of the intq forms made in host memory so far (any thread).
  std::uint64_t intq_host_bytes() const { return intq_host_bytes_.load(std::memory_order_relaxed); }
  // The region's bytes in host memory (epkd's host tier, daemon/lanes/host_tiers.h), for a host tier that serves
  // while it is being filled: zeros, then each held tensor's stored buffers exactly as upload() lays them on a
  // device. Part k is one held tensor's stored buffers and the zeros between the previous part's end (`from`) and
  // them, in tensor order; parts write disjoint bytes, so any thread may write any part at any time
  // (write_host_part, after the tensor's checksum), the tail after the last part once (zero_host_tail). `region`
  // is region_bytes() long. The uploads read the producers' bytes: valid while this tier's owner lives.
  struct HostPart {
    std::size_t tensor = 0;
    std::uint64_t from = 0;
    std::array<Upload, 4> uploads;
  };
  std::vector<HostPart> host_parts() const;
  static void write_host_part(std::span<std::byte> region, const HostPart& part);
  static void zero_host_tail(std::span<std::byte> region, const std::vector<HostPart>& parts);

  // Held tensor i's inputs as one span of the region: what a copy of [offset, offset + bytes) to a 256-aligned
  // device address A holds, A given to job() as inputs_at (a staged decode).
  struct Span {
    std::uint64_t offset = 0, bytes = 0;
  };
  Span span(std::size_t tensor) const;

  // Held tensor i's decode inputs in the region (after upload or bind).
  cuda::DeviceBuffers inputs(std::size_t tensor) const;
  // A batched decode's job for the whole of held tensor i in `layout` into out_dev (client-side decode), reading the
  // inputs from the bound region, or (inputs_at set) from a copy of span(i) at inputs_at, 256-byte aligned.
  Result<LatticeJob> job(std::size_t tensor, Layout layout, DeviceAddress out_dev,
                         DeviceAddress inputs_at = DeviceAddress()) const;

  // Writes `shard` (resolved; whole for the whole tensor) of tensor i in `layout` into [dst, dst + bytes) on
  // `stream` by a device path, or returns path kHost having enqueued nothing. dst is 16-byte aligned device memory
  // of this tier's device; bytes is the producer's shard_slot() size.
  Result<DeviceWrite> enqueue(std::size_t tensor, Layout layout, const ShardRange& shard, DeviceAddress dst,
                              std::uint64_t bytes, ColumnWork& work, cuda::Stream stream);
  // The whole of held tensor i in `format`, any the decoder writes (the CLI's --dtype, beyond the serving
  // layouts), into [dst, dst + bytes): kInvalidArgument when bytes is not the decode's size.
  Status enqueue_format(std::size_t tensor, cuda::OutputFormat format, DeviceAddress dst, std::uint64_t bytes,
                        cuda::Stream stream);
  // After the stream has synchronised past the last enqueue: kCorruptTile naming the tensor and tile, once; with
  // `faults`, every corrupt tile is appended there.
  Status check(cuda::Stream stream, std::vector<rans::TileFaultRecord>* faults = nullptr);
  // The last enqueue failed: nothing to check.
  void forget() { pending_ = nullptr; }

 private:
  struct PlanKey {
    cuda::OutputFormat format;
    std::uint32_t row_begin = 0, row_end = 0;
    auto operator<=>(const PlanKey&) const = default;
  };
  struct Plan {
    LatticeDevicePlan plan;
    cuda::DeviceAllocation scratch;
  };
  struct Lattice {
    const LatticeRansProducer* producer = nullptr;
    std::map<PlanKey, Plan> plans;
    std::deque<PlanKey> range_plans;  // the row-range plans among them, oldest first
  };

  Result<Plan*> plan_for(Lattice& t, std::size_t tensor, const PlanKey& key, cuda::Stream stream);
  // The plan of `key` (built on first use) enqueued into [dst, dst + bytes), which must be what it writes.
  Status enqueue_plan(Lattice& t, std::size_t tensor, const PlanKey& key, DeviceAddress dst, std::uint64_t bytes,
                      cuda::Stream stream);
  // A staged tier: the staging area reserved (before any plan is built against it; the plans built against an
  // address it has since moved from are dropped, to be rebuilt), and the copy of tensor's span into it on `stream`
  // (nothing otherwise).
  Status make_staging();
  Status stage_inputs(std::size_t tensor, cuda::Stream stream);
  Status make_ready_plans(std::optional<cuda::OutputFormat> ready, cuda::Stream stream);
  Status make_intq_forms(cuda::Stream stream, const std::function<Status(std::size_t)>& verify,
                         std::vector<std::string>* warnings);
  // Tensor i's producer when it is an intq "int" tensor (the kind with a device form), else null.
  const IntqProducer* intq_int(std::size_t tensor) const;
  // Tensor's intq form, made in host memory at its first decode in a layout the kernels may write when it has none
  // on the device (null: the host path serves it; *note says why when the making failed).
  IntqDeviceForm* intq_form(std::size_t tensor, Layout layout, cuda::Stream stream, std::string* note);
  Result<DeviceWrite> enqueue_lattice(std::size_t tensor, cuda::OutputFormat format, const ShardRange& shard,
                                      DeviceAddress dst, std::uint64_t bytes, ColumnWork& work, cuda::Stream stream);

  const std::shared_ptr<const void> owner_;
  const std::vector<const Producer*> producers_;
  const int device_;
  const DeviceAccount account_;
  cuda::TierLayout layout_;          // every held tensor: the host tier's and a client's view
  cuda::TierLayout device_layout_;   // those kept on the device (place()); layout_ by default
  DeviceAddress base_;                  // the region on the device (not staged)
  std::span<const std::byte> host_;     // staged: the host tier region
  StagingArea* area_ = nullptr;         // staged: the lane's, one tensor's inputs at a time
  DeviceAddress staging_;               // where this tier's staged plans read their inputs (from the first decode)
  std::uint64_t staged_bytes_ = 0;
  std::vector<Lattice> lattice_;                         // per tensor (producer null where not held)
  std::vector<std::unique_ptr<IntqDeviceForm>> intq_;   // per tensor (null: no form made)
  std::vector<std::uint8_t> intq_placed_;               // per tensor: 1 where an intq form goes on the device
  std::vector<std::uint8_t> intq_refused_;              // per tensor: 1 where its host form cannot be made
  std::function<Status(std::size_t)> verify_;           // staged: checks a tensor before its host form is made
  std::atomic<std::uint64_t> intq_host_bytes_{0};
  Plan* pending_ = nullptr;                              // whose status the last enqueue copied back
};

}  // namespace epk::serve
