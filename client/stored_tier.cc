#include "client/stored_tier.h"

#include <optional>
#include <unordered_map>

#include "codec/container/reader.h"
#include "codec/cuda/decode/decode.h"
#include "codec/serve/device_tier.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"
#include "shm/host_tier.h"

namespace epk::client {
namespace {

// One host-to-device copy of a staged batch: bytes from the host tier at src to the device at dst.
struct StageCopy {
  DeviceAddress dst;
  const std::byte* src = nullptr;
  std::uint64_t bytes = 0;
};

// The copies of `jobs`' inputs (host tier offsets and sizes, device destinations), in job order, a run whose next
// input starts where the previous one's span would reach in both places (the gap between two adjacent tensors of the
// tier, zeros, copied along) merged into one copy.
std::vector<StageCopy> stage_copies(const std::byte* region,
                                    std::span<const std::pair<StoredTier::Span, DeviceAddress>> staged) {
  std::vector<StageCopy> out;
  for (const auto& [span, dst] : staged) {
    const std::byte* src = region + span.offset;
    if (!out.empty()) {
      StageCopy& last = out.back();
      const std::uint64_t src_gap = static_cast<std::uint64_t>(src - (last.src + last.bytes));
      const std::uint64_t dst_end = (last.dst + last.bytes).value;
      if (src >= last.src + last.bytes && dst.value >= dst_end && dst.value - dst_end == src_gap &&
          src_gap < cuda::kTierAlign) {
        last.bytes += src_gap + span.bytes;
        continue;
      }
    }
    out.push_back({dst, src, span.bytes});
  }
  return out;
}

class CudaDecodeBatch final : public DecodeBatch {
 public:
  CudaDecodeBatch(cuda::DecodePlan plan, shm::DeviceBuffer scratch, int device,
                  std::vector<std::pair<DeviceAddress, std::uint64_t>> zero_ranges, std::vector<StageCopy> copies)
      : plan_(std::move(plan)),
        scratch_(std::move(scratch)),
        device_(device),
        zero_ranges_(std::move(zero_ranges)),
        copies_(std::move(copies)) {}

  Status enqueue(void* stream) override {
    EPK_TRY(shm::make_device_current(device_));
    // Rowwise outputs: the gap between values and scales holds zeros, as in epkd's slots.
    for (const auto& [at, bytes] : zero_ranges_) EPK_TRY(shm::fill_device_async(at, 0, bytes, stream, device_));
    return cuda::decode(plan_, scratch_.address().as<void>(), static_cast<cuda::Stream>(stream));
  }
  Status check(void* stream) override {
    EPK_TRY(shm::make_device_current(device_));
    return cuda::read_status(plan_, scratch_.address().as<const void>(), static_cast<cuda::Stream>(stream));
  }
  Status enqueue_copy(void* stream) override {
    for (const StageCopy& c : copies_) EPK_TRY(shm::copy_to_device_async(c.dst, c.src, c.bytes, stream, device_));
    return {};
  }
  std::uint64_t scratch_bytes() const override { return scratch_.size(); }

 private:
  cuda::DecodePlan plan_;
  shm::DeviceBuffer scratch_;
  int device_;
  std::vector<std::pair<DeviceAddress, std::uint64_t>> zero_ranges_;
  std::vector<StageCopy> copies_;
};

class CudaStoredTier final : public StoredTier {
 public:
  static Result<std::unique_ptr<StoredTier>> open(Client& client, const std::string& model, std::uint32_t device) {
    EPK_TRY_ASSIGN(Client::StoredFds fds, client.open_stored(model, device));
    std::unique_ptr<CudaStoredTier> t(new CudaStoredTier());
    t->device_ = static_cast<int>(device);
    t->model_ = model;
    EPK_TRY_ASSIGN(t->reader_, container::Reader::open_fd(fds.file.get(), "model '" + model + "' (epkd's file)"));
    const auto& entries = t->reader_.tensors();
    t->producers_.resize(entries.size());
    std::vector<const serve::Producer*> held(entries.size(), nullptr);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const container::TensorEntry& e = entries[i];
      if (!serve::in_device_region(e)) continue;
      // The tables, offsets and scales come from this map: they must be the bytes epkd checked and uploaded. The
      // payload is read from epkd's tier, on the device or in host memory (checksummed there), so its pages here are
      // not read at all.
      for (std::size_t b = 0; b < e.buffers.size(); ++b) {
        if (e.buffers[b].name != rans::kPayloadBuffer) EPK_TRY(t->reader_.verify_buffer(e, b));
      }
      // The serving layer validates the stream (its tables and tile offsets) as epkd's does.
      EPK_TRY_ASSIGN(t->producers_[i], serve::make_producer(t->reader_, e, "model '" + model + "'"));
      held[i] = t->producers_[i].get();
      t->index_.emplace(e.name, i);
    }
    // The same placement as epkd's (from the same file), bound to epkd's region on the device or in host memory.
    t->tier_ = std::make_unique<serve::DeviceTier>(nullptr, std::move(held), t->device_, [](std::int64_t) {});
    if (t->tier_->region_bytes() > fds.tier_bytes || (fds.host && t->tier_->region_bytes() != fds.tier_bytes)) {
      return make_error(ErrorCode::kBadInput, "model '" + model + "': its streams need a " +
                                                  std::to_string(t->tier_->region_bytes()) +
                                                  "-byte tier but epkd's is " + std::to_string(fds.tier_bytes) +
                                                  " bytes (the file changed?)");
    }
    if (fds.host) {
      EPK_TRY(t->map_host_tier(std::move(fds.tier), fds.tier_bytes));
      return std::unique_ptr<StoredTier>(std::move(t));
    }
    EPK_TRY_ASSIGN(t->region_, shm::import_device_pool(std::move(fds.tier), fds.tier_bytes, t->device_));
    t->tier_->bind(t->region_.device_ptr());
    return std::unique_ptr<StoredTier>(std::move(t));
  }

  Result<std::uint64_t> decoded_bytes(std::string_view tensor, shm::Layout layout) const override {
    EPK_TRY_ASSIGN(serve::LatticeJob j, job(tensor, layout, DeviceAddress(), DeviceAddress()));
    return j.bytes;
  }
  bool holds(std::string_view tensor) const override { return index_.count(std::string(tensor)) != 0; }
  Result<Span> span(std::string_view tensor) const override {
    EPK_TRY_ASSIGN(std::size_t i, held_index(tensor));
    const serve::DeviceTier::Span s = tier_->span(i);
    return Span{s.offset, s.bytes};
  }
  bool host_tier() const override { return host_.data() != nullptr; }
  bool host_tier_shared() const override { return host_registration_.registered(); }
  Result<std::vector<std::uint64_t>> shape(std::string_view tensor) const override {
    const container::TensorEntry* e = reader_.find(tensor);
    if (e == nullptr) {
      return make_error(ErrorCode::kNotFound, "model '" + model_ + "': no tensor '" + std::string(tensor) + "'");
    }
    return e->shape;
  }

  Result<std::unique_ptr<DecodeBatch>> plan(std::span<const Job> jobs) const override {
    if (jobs.empty()) return make_error(ErrorCode::kInvalidArgument, "client-side decode: a batch with no tensor");
    std::vector<cuda::DecodeJob> decode_jobs;
    std::vector<std::pair<DeviceAddress, std::uint64_t>> zero_ranges;
    std::vector<std::pair<Span, DeviceAddress>> staged;
    for (const Job& j : jobs) {
      if (!j.out_dev || !j.out_dev.aligned(16)) {
        EPK_TRY(job(j.tensor, j.layout, DeviceAddress(), DeviceAddress()));  // an unknown tensor or layout first
        return make_error(ErrorCode::kInvalidArgument, "client-side decode: tensor '" + j.tensor +
                                                           "': the output address must be a 16-byte aligned device "
                                                           "address");
      }
      if (j.inputs_at && !host_tier()) {
        return make_error(ErrorCode::kInvalidArgument, "client-side decode: tensor '" + j.tensor +
                                                           "': staged inputs need a host tier (epkd keeps this "
                                                           "model's tier on the device: decode from it in place)");
      }
      EPK_TRY_ASSIGN(serve::LatticeJob d, job(j.tensor, j.layout, j.out_dev, j.inputs_at));
      if (j.inputs_at) staged.emplace_back(*span(j.tensor), j.inputs_at);
      if (d.gap_bytes != 0) zero_ranges.emplace_back(d.gap_at, d.gap_bytes);
      decode_jobs.push_back(std::move(d.job));
    }
    EPK_TRY(shm::make_device_current(device_));
    cuda::DecodeOptions options;
    options.device = device_;
    EPK_TRY_ASSIGN(cuda::DecodePlan plan, cuda::DecodePlan::create(decode_jobs, options));
    EPK_TRY_ASSIGN(shm::DeviceBuffer scratch, shm::DeviceBuffer::alloc(plan.scratch_bytes(), device_));
    // upload() waits for its copy (the plan's host image must outlive it), so the null stream serves.
    EPK_TRY(cuda::upload(plan, scratch.address().as<void>(), plan.scratch_bytes(), nullptr));
    const std::byte* region = host_.data();
    return std::unique_ptr<DecodeBatch>(new CudaDecodeBatch(std::move(plan), std::move(scratch), device_,
                                                            std::move(zero_ranges), stage_copies(region, staged)));
  }

  std::uint64_t tier_bytes() const override { return host_tier() ? host_.size() : region_.size(); }
  int device() const override { return device_; }

 private:
  CudaStoredTier() = default;

  // epkd's host tier (a sealed memfd): mapped read-only and page-locked with the driver, so that copies from it run
  // at the copy engine's speed and kernels may read it in place; bound at its device-visible address (the same as
  // the host one under unified addressing, which every 64-bit CUDA process has). Where the driver does not register
  // it (a device without read-only registration, or any refusal), a pinned copy of it is this process's instead
  // (host memory twice, the same bytes; host_tier_shared() says so).
  Status map_host_tier(shm::UniqueFd fd, std::uint64_t bytes) {
    EPK_TRY_ASSIGN(host_map_, shm::HostTierMemory::map(std::move(fd), bytes, "model '" + model_ + "'"));
    const std::span<const std::byte> mapped = host_map_.bytes();
    Result<shm::HostRegistration> reg = shm::HostRegistration::register_memory(mapped.data(), mapped.size(), true,
                                                                               device_);
    if (reg) {
      host_registration_ = std::move(*reg);
      host_ = mapped;
    } else {
      EPK_TRY_ASSIGN(host_copy_, shm::PinnedBuffer::alloc(mapped.size(), device_));
      std::copy(mapped.begin(), mapped.end(), reinterpret_cast<std::byte*>(host_copy_.data()));
      host_ = {reinterpret_cast<const std::byte*>(host_copy_.data()), mapped.size()};
      host_map_ = shm::HostTierMemory();
    }
    tier_->bind(DeviceAddress::of(host_.data()));
    return {};
  }

  // The index of held `tensor`: kNotFound for one the model lacks, kUnsupported for one not in the tier.
  Result<std::size_t> held_index(std::string_view tensor) const {
    auto it = index_.find(std::string(tensor));
    if (it == index_.end()) {
      if (reader_.find(tensor) == nullptr) {
        return make_error(ErrorCode::kNotFound, "model '" + model_ + "': no tensor '" + std::string(tensor) + "'");
      }
      return make_error(ErrorCode::kUnsupported, "model '" + model_ + "': tensor '" + std::string(tensor) +
                                                     "' is not in the device tier: acquire it from epkd instead");
    }
    return it->second;
  }
  // The serving layer's job for `tensor` in `layout` into out_dev (none: only its size is wanted), its inputs where
  // the tier is or (inputs_at set) staged there.
  Result<serve::LatticeJob> job(std::string_view tensor, shm::Layout layout, DeviceAddress out_dev,
                                DeviceAddress inputs_at) const {
    EPK_TRY_ASSIGN(std::size_t i, held_index(tensor));
    return tier_->job(i, layout, out_dev, inputs_at);
  }

  std::string model_;
  int device_ = 0;
  container::Reader reader_;
  std::vector<std::unique_ptr<serve::Producer>> producers_;  // the tier's tensors' (null for the others)
  std::unordered_map<std::string, std::size_t> index_;       // the tier's tensors by name
  std::unique_ptr<serve::DeviceTier> tier_;
  shm::DeviceMapping region_;  // epkd's device tier, or its host tier:
  std::span<const std::byte> host_;         // where it is read: host_map_ registered, or host_copy_
  shm::HostTierMemory host_map_;            // epkd's memfd mapped read-only
  shm::HostRegistration host_registration_;  // of host_map_ (destroyed before it: declared after)
  shm::PinnedBuffer host_copy_;             // a pinned copy where the device cannot register read-only memory
};

}  // namespace

Result<std::unique_ptr<StoredTier>> StoredTier::open(Client& client, const std::string& model, std::uint32_t device) {
  return CudaStoredTier::open(client, model, device);
}

}  // namespace epk::client
