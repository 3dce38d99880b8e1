#include "client/stored_tier.h"

#include <optional>
#include <unordered_map>

#include "codec/container/reader.h"
#include "codec/cuda/decode/decode.h"
#include "codec/serve/device_tier.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"

namespace epk::client {
namespace {

class CudaDecodeBatch final : public DecodeBatch {
 public:
  CudaDecodeBatch(cuda::DecodePlan plan, shm::DeviceBuffer scratch, int device,
                  std::vector<std::pair<std::uint64_t, std::uint64_t>> zero_ranges)
      : plan_(std::move(plan)), scratch_(std::move(scratch)), device_(device), zero_ranges_(std::move(zero_ranges)) {}

  Status enqueue(void* stream) override {
    EPK_TRY(shm::make_device_current(device_));
    // Rowwise outputs: the gap between values and scales holds zeros, as in epkd's slots.
    for (const auto& [at, bytes] : zero_ranges_) EPK_TRY(shm::fill_device_async(at, 0, bytes, stream, device_));
    return cuda::decode(plan_, reinterpret_cast<void*>(scratch_.ptr()), static_cast<cuda::Stream>(stream));
  }
  Status check(void* stream) override {
    EPK_TRY(shm::make_device_current(device_));
    return cuda::read_status(plan_, reinterpret_cast<const void*>(scratch_.ptr()), static_cast<cuda::Stream>(stream));
  }
  std::uint64_t scratch_bytes() const override { return scratch_.size(); }

 private:
  cuda::DecodePlan plan_;
  shm::DeviceBuffer scratch_;
  int device_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> zero_ranges_;
};

class CudaStoredTier final : public StoredTier {
 public:
  static Result<std::unique_ptr<StoredTier>> open(Client& client, const std::string& model, std::uint32_t device) {
    EPK_TRY_ASSIGN(Client::StoredFds fds, client.open_stored(model, device));
    std::unique_ptr<CudaStoredTier> t(new CudaStoredTier());
    t->device_ = static_cast<int>(device);
    EPK_TRY_ASSIGN(t->reader_, container::Reader::open_fd(fds.file.get(), "model '" + model + "' (epkd's file)"));
    const auto& entries = t->reader_.tensors();
    t->producers_.resize(entries.size());
    std::vector<const serve::Producer*> held(entries.size(), nullptr);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const container::TensorEntry& e = entries[i];
      if (!serve::in_device_region(e)) continue;
      // The tables, offsets and scales come from this map: they must be the bytes epkd checked and uploaded. The
      // payload is read only from epkd's tier (checksummed there), so its pages here are not read at all.
      for (std::size_t b = 0; b < e.buffers.size(); ++b) {
        if (e.buffers[b].name != rans::kPayloadBuffer) EPK_TRY(t->reader_.verify_buffer(e, b));
      }
      // The serving layer validates the stream (its tables and tile offsets) as epkd's does.
      EPK_TRY_ASSIGN(t->producers_[i], serve::make_producer(t->reader_, e, "model '" + model + "'"));
      held[i] = t->producers_[i].get();
      t->index_.emplace(e.name, i);
    }
    // The same placement as epkd's (from the same file), bound to epkd's region.
    t->tier_ = std::make_unique<serve::DeviceTier>(nullptr, std::move(held), t->device_, [](std::int64_t) {});
    if (t->tier_->region_bytes() > fds.tier_bytes) {
      return make_error(ErrorCode::kBadInput, "model '" + model + "': its streams need a " +
                                                  std::to_string(t->tier_->region_bytes()) +
                                                  "-byte tier but epkd's is " + std::to_string(fds.tier_bytes) +
                                                  " bytes (the file changed?)");
    }
    EPK_TRY_ASSIGN(t->region_, shm::import_device_pool(std::move(fds.tier), fds.tier_bytes, t->device_));
    t->tier_->bind(t->region_.device_ptr());
    t->model_ = model;
    return std::unique_ptr<StoredTier>(std::move(t));
  }

  Result<std::uint64_t> decoded_bytes(std::string_view tensor, shm::Layout layout) const override {
    EPK_TRY_ASSIGN(serve::LatticeJob j, job(tensor, layout, 0));
    return j.bytes;
  }
  bool holds(std::string_view tensor) const override { return index_.count(std::string(tensor)) != 0; }
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
    std::vector<std::pair<std::uint64_t, std::uint64_t>> zero_ranges;
    for (const Job& j : jobs) {
      if (j.out_dev == 0 || j.out_dev % 16 != 0) {
        EPK_TRY(job(j.tensor, j.layout, 0));  // an unknown tensor or layout is named first
        return make_error(ErrorCode::kInvalidArgument, "client-side decode: tensor '" + j.tensor +
                                                           "': the output address must be a 16-byte aligned device "
                                                           "address");
      }
      EPK_TRY_ASSIGN(serve::LatticeJob d, job(j.tensor, j.layout, j.out_dev));
      if (d.gap_bytes != 0) zero_ranges.emplace_back(d.gap_at, d.gap_bytes);
      decode_jobs.push_back(std::move(d.job));
    }
    EPK_TRY(shm::make_device_current(device_));
    cuda::DecodeOptions options;
    options.device = device_;
    EPK_TRY_ASSIGN(cuda::DecodePlan plan, cuda::DecodePlan::create(decode_jobs, options));
    EPK_TRY_ASSIGN(shm::DeviceBuffer scratch, shm::DeviceBuffer::alloc(plan.scratch_bytes(), device_));
    // upload() waits for its copy (the plan's host image must outlive it), so the null stream serves.
    EPK_TRY(cuda::upload(plan, reinterpret_cast<void*>(scratch.ptr()), plan.scratch_bytes(), nullptr));
    return std::unique_ptr<DecodeBatch>(
        new CudaDecodeBatch(std::move(plan), std::move(scratch), device_, std::move(zero_ranges)));
  }

  std::uint64_t tier_bytes() const override { return region_.size(); }
  int device() const override { return device_; }

 private:
  CudaStoredTier() = default;

  // The serving layer's job for `tensor` in `layout` into out_dev (0: only its size is wanted).
  Result<serve::LatticeJob> job(std::string_view tensor, shm::Layout layout, std::uint64_t out_dev) const {
    auto it = index_.find(std::string(tensor));
    if (it == index_.end()) {
      if (reader_.find(tensor) == nullptr) {
        return make_error(ErrorCode::kNotFound, "model '" + model_ + "': no tensor '" + std::string(tensor) + "'");
      }
      return make_error(ErrorCode::kUnsupported, "model '" + model_ + "': tensor '" + std::string(tensor) +
                                                     "' is not in the device tier: acquire it from epkd instead");
    }
    return tier_->job(it->second, layout, out_dev);
  }

  std::string model_;
  int device_ = 0;
  container::Reader reader_;
  std::vector<std::unique_ptr<serve::Producer>> producers_;  // the tier's tensors' (null for the others)
  std::unordered_map<std::string, std::size_t> index_;       // the tier's tensors by name
  std::unique_ptr<serve::DeviceTier> tier_;
  shm::DeviceMapping region_;
};

}  // namespace

Result<std::unique_ptr<StoredTier>> StoredTier::open(Client& client, const std::string& model, std::uint32_t device) {
  return CudaStoredTier::open(client, model, device);
}

}  // namespace epk::client
