#include "daemon/gpu_lattice.h"

#include <algorithm>

#include "codec/cuda/tier_layout.h"

namespace epk::daemon::gpu_lattice {
namespace {

cuda::Stream cs(const shm::CudaStream& s) { return static_cast<cuda::Stream>(s.get()); }

Result<Tensor::Plan> make_plan(const Tensor& t, shm::Layout layout, const PlanKey& key, int device,
                               const shm::CudaStream& stream) {
  EPK_TRY_ASSIGN(serve::LatticeDevicePlan plan, serve::LatticeDevicePlan::create(*t.producer, layout, key.row_begin,
                                                                                 key.row_end, t.dev, device));
  EPK_TRY_ASSIGN(shm::DeviceBuffer scratch, shm::DeviceBuffer::alloc(plan.scratch_bytes(), device));
  EPK_TRY(plan.upload(reinterpret_cast<void*>(scratch.ptr()), cs(stream)));
  return Tensor::Plan{std::move(plan), std::move(scratch)};
}

PlanKey whole(const Tensor& t, cuda::OutputFormat f) { return {f, 0, t.producer->stream().rows}; }

}  // namespace

Result<Tier> upload_tier(std::uint32_t model_id, const std::shared_ptr<const ModelSource>& src, int device,
                         const shm::CudaStream& stream) {
  Tier out;
  const std::size_t n = src->tensors().size();
  out.tensors.resize(n);
  std::vector<const serve::LatticeRansProducer*> producers(n, nullptr);
  std::vector<const rans::LatticeRansStream*> streams(n, nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    const serve::Producer* p = src->producer(i);
    producers[i] = p != nullptr ? p->lattice_rans() : nullptr;
    if (producers[i] != nullptr) streams[i] = &producers[i]->stream();
  }
  const cuda::TierLayout layout = cuda::tier_layout(streams);
  if (layout.bytes == 0) return out;
  EPK_TRY_ASSIGN(std::unique_ptr<shm::DevicePool> pool, shm::DevicePool::create(device, layout.bytes));
  out.region = std::move(pool);
  EPK_TRY(shm::fill_device_async(out.region->device_ptr(), 0, out.region->size(), stream.get(), device));
  out.bytes += out.region->size();
  const std::uint64_t base = out.region->device_ptr();
  for (std::size_t i = 0; i < n; ++i) {
    if (producers[i] == nullptr) continue;
    EPK_TRY(src->verify_stored(i));  // resident bytes decode without produce()'s after-decode checksum
    auto t = std::make_shared<Tensor>();
    t->model = model_id;
    t->source_model = src;
    t->producer = producers[i];
    t->tier = out.region;
    const cuda::TierPlacement& at = *layout.tensors[i];
    for (const serve::Upload& u : serve::lattice_uploads(*streams[i], at)) {
      if (u.host.empty()) continue;
      EPK_TRY(shm::copy_to_device_async(base + u.offset, u.host.data(), u.host.size(), stream.get(), device));
    }
    t->dev = cuda::tier_buffers(base, at);
    const PlanKey key = whole(*t, cuda::OutputFormat::kBf16);
    EPK_TRY_ASSIGN(Tensor::Plan plan, make_plan(*t, shm::Layout::kDenseBF16, key, device, stream));
    out.bytes += plan.scratch.size();
    t->plans.emplace(key, std::move(plan));
    out.tensors[i] = std::move(t);
  }
  EPK_TRY(stream.synchronize());  // the uploads read host memory owned by the source and the plans
  return out;
}

bool Decoder::serves(const Tensor& t, shm::Layout layout) {
  return serve::device_format(layout, t.producer->source_dtype()).has_value();
}

Result<Tensor::Plan*> Decoder::plan_for(Tensor& t, shm::Layout layout, const PlanKey& key,
                                        const shm::CudaStream& stream) {
  if (auto it = t.plans.find(key); it != t.plans.end()) return &it->second;
  const bool is_whole = key.row_begin == 0 && key.row_end == t.producer->stream().rows;
  if (!is_whole && t.range_plans.size() >= kMaxRangePlans) {
    // The oldest range plan goes: nothing still uses it (each produce() synchronises the stream before returning).
    auto old = t.plans.find(t.range_plans.front());
    t.range_plans.pop_front();
    if (old != t.plans.end()) {
      const auto freed = static_cast<std::int64_t>(old->second.scratch.size());
      t.plans.erase(old);
      account_(t.model, -freed);
    }
  }
  EPK_TRY_ASSIGN(Tensor::Plan made, make_plan(t, layout, key, device_, stream));
  account_(t.model, static_cast<std::int64_t>(made.scratch.size()));
  if (!is_whole) t.range_plans.push_back(key);
  return &t.plans.emplace(key, std::move(made)).first->second;
}

Status Decoder::enqueue(Tensor& t, shm::Layout layout, const shm::ShardRange& shard, std::uint64_t dst,
                        std::uint64_t bytes, const shm::CudaStream& stream) {
  pending_ = nullptr;
  const std::optional<cuda::OutputFormat> format = serve::device_format(layout, t.producer->source_dtype());
  if (!format) return make_error(ErrorCode::kInternal, "tensor '" + t.producer->entry().name + "': no device format");
  if (shard.dim == shm::ShardDim::kCols) {
    EPK_TRY_ASSIGN(Tensor::Plan * p, plan_for(t, layout, whole(t, *format), stream));
    if (work_.size() < p->plan.work_bytes()) {
      // The old buffer goes first (its bytes leave the count with it, whether or not the new one comes).
      account_(std::nullopt, -static_cast<std::int64_t>(work_.size()));
      work_ = shm::DeviceBuffer();
      EPK_TRY_ASSIGN(work_, shm::DeviceBuffer::alloc(p->plan.work_bytes(), device_));
      account_(std::nullopt, static_cast<std::int64_t>(work_.size()));
    }
    EPK_TRY(p->plan.enqueue_columns(shard, dst, bytes, work_.ptr(), reinterpret_cast<void*>(p->scratch.ptr()),
                                    cs(stream)));
    pending_ = p;
    return {};
  }
  const PlanKey key = shard.whole() ? whole(t, *format)
                                    : PlanKey{*format, static_cast<std::uint32_t>(shard.begin),
                                              static_cast<std::uint32_t>(shard.end)};
  EPK_TRY_ASSIGN(Tensor::Plan * p, plan_for(t, layout, key, stream));
  if (p->plan.output_bytes() != bytes) {  // never write past a slot
    return make_error(ErrorCode::kInternal, "tensor '" + t.producer->entry().name + "': slot size");
  }
  EPK_TRY(p->plan.enqueue(dst, reinterpret_cast<void*>(p->scratch.ptr()), cs(stream)));
  pending_ = p;
  return {};
}

Status Decoder::check(const shm::CudaStream& stream) {
  Tensor::Plan* p = pending_;
  pending_ = nullptr;
  if (p == nullptr) return {};
  return p->plan.check(reinterpret_cast<const void*>(p->scratch.ptr()), cs(stream));
}

}  // namespace epk::daemon::gpu_lattice
