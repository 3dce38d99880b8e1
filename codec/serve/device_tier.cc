#include "codec/serve/device_tier.h"

#include <algorithm>

#include "codec/common/bytes.h"

#include "codec/serve/intq_device_form.h"
#include "codec/serve/intq_producer.h"
#include "codec/serve/lattice_rans_producer.h"

namespace epk::serve {

bool in_device_region(const container::TensorEntry& entry) {
  return entry.encoding == container::Encoding::kLatticeRans;
}

Result<DeviceAddress> LaneBuffer::reserve(std::uint64_t bytes) {
  if (buf_.size() < bytes) {
    // The old buffer goes first (its bytes leave the count with it, whether or not the new one comes).
    account_(-static_cast<std::int64_t>(buf_.size()));
    buf_.reset();
    EPK_TRY_ASSIGN(buf_, cuda::DeviceAllocation::create(bytes, device_, what_));
    account_(static_cast<std::int64_t>(buf_.size()));
  }
  return buf_.address();
}

DeviceTier::DeviceTier(std::shared_ptr<const void> owner, std::vector<const Producer*> producers, int device,
                       DeviceAccount account)
    : owner_(std::move(owner)), producers_(std::move(producers)), device_(device), account_(std::move(account)) {
  const std::size_t n = producers_.size();
  lattice_ = std::vector<Lattice>(n);  // in place: a Lattice holds move-only plans
  intq_.resize(n);
  intq_placed_.assign(n, 0);
  intq_refused_.assign(n, 0);
  std::vector<const rans::LatticeRansStream*> streams(n, nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    lattice_[i].producer = producers_[i] != nullptr ? producers_[i]->lattice_rans() : nullptr;
    if (lattice_[i].producer != nullptr) streams[i] = &lattice_[i].producer->stream();
    intq_placed_[i] = intq_int(i) != nullptr ? 1 : 0;
  }
  layout_ = cuda::tier_layout(streams);
  device_layout_ = layout_;
}

std::uint64_t DeviceTier::footprint(std::size_t tensor) const {
  if (holds(tensor)) return align_up(span(tensor).bytes, cuda::kTierAlign);
  const IntqProducer* iq = intq_int(tensor);
  return iq != nullptr ? IntqDeviceForm::stored_bytes(*iq->header()) : 0;
}

const IntqProducer* DeviceTier::intq_int(std::size_t tensor) const {
  if (tensor >= producers_.size() || producers_[tensor] == nullptr) return nullptr;
  const IntqProducer* iq = producers_[tensor]->intq();
  return iq != nullptr && iq->header() != nullptr ? iq : nullptr;
}

std::uint64_t DeviceTier::tier_bytes() const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < producers_.size(); ++i) n += footprint(i);
  return n;
}

std::uint64_t DeviceTier::device_tier_bytes() const {
  std::uint64_t n = device_region_bytes();
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (intq_on_device(i)) n += footprint(i);
  }
  return n;
}

bool DeviceTier::intq_on_device(std::size_t tensor) const {
  return tensor < intq_placed_.size() && intq_placed_[tensor] != 0;
}

void DeviceTier::place(std::vector<bool> on_device) {
  std::vector<const rans::LatticeRansStream*> streams(producers_.size(), nullptr);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const bool kept = i < on_device.size() && on_device[i];
    if (holds(i) && kept) streams[i] = &lattice_[i].producer->stream();
    if (!holds(i) && footprint(i) != 0) intq_placed_[i] = kept ? 1 : 0;
  }
  device_layout_ = cuda::tier_layout(streams);
}

DeviceTier::~DeviceTier() = default;

cuda::DeviceBuffers DeviceTier::inputs(std::size_t tensor) const {
  if (on_device(tensor)) return cuda::tier_buffers(base_, *device_layout_.tensors[tensor]);
  // From the host tier: the staging buffer holds span(tensor), so the region is seen shifted to put that span's
  // start there.
  return cuda::tier_buffers(DeviceAddress(staging_.value - span(tensor).offset), *layout_.tensors[tensor]);
}

std::uint64_t DeviceTier::staging_bytes() const {
  std::uint64_t most = 0;
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (holds(i) && !on_device(i)) most = std::max(most, span(i).bytes);
  }
  return most;
}

DeviceTier::Span DeviceTier::span(std::size_t tensor) const {
  const cuda::TierPlacement& p = *layout_.tensors[tensor];
  return {p.payload, p.scales + lattice_[tensor].producer->stream().scales.size_bytes() - p.payload};
}

Result<LatticeJob> DeviceTier::job(std::size_t tensor, Layout layout, DeviceAddress out_dev,
                                   DeviceAddress inputs_at) const {
  if (!holds(tensor)) {
    return make_error(ErrorCode::kUnsupported, "tensor " + std::to_string(tensor) + " is not in the device tier");
  }
  if (!inputs_at.aligned(cuda::kTierAlign)) {
    return make_error(ErrorCode::kInvalidArgument, "tensor " + std::to_string(tensor) + ": staged inputs at " +
                                                       std::to_string(inputs_at.value) + " are not 256-byte aligned");
  }
  // A staged copy of span(i) is the region shifted so that the span's start lands at inputs_at.
  const cuda::DeviceBuffers in =
      inputs_at ? cuda::tier_buffers(DeviceAddress(inputs_at.value - span(tensor).offset), *layout_.tensors[tensor])
                : inputs(tensor);
  return lattice_job(*lattice_[tensor].producer, layout, in, out_dev);
}

std::vector<DeviceTier::HostPart> DeviceTier::host_parts() const {
  // tier_layout places the buffers in increasing offsets: only the gaps before each, and the tail, are zeroed (the
  // decoder reads up to kTierPayloadPad bytes past a payload), so each byte of the region is written once. Each held
  // tensor owns the bytes from the end of the previous one's buffers to the end of its own.
  std::vector<HostPart> parts;
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (!holds(i)) continue;
    HostPart& part = parts.emplace_back(HostPart{i, end, lattice_uploads(lattice_[i].producer->stream(),
                                                                         *layout_.tensors[i])});
    for (const Upload& u : part.uploads) end = u.offset + u.host.size();
  }
  return parts;
}

void DeviceTier::write_host_part(std::span<std::byte> region, const HostPart& part) {
  std::uint64_t at = part.from;
  for (const Upload& u : part.uploads) {
    std::fill(region.begin() + static_cast<std::ptrdiff_t>(at), region.begin() + static_cast<std::ptrdiff_t>(u.offset),
              std::byte{0});
    std::copy(u.host.begin(), u.host.end(), region.begin() + static_cast<std::ptrdiff_t>(u.offset));
    at = u.offset + u.host.size();
  }
}

void DeviceTier::zero_host_tail(std::span<std::byte> region, const std::vector<HostPart>& parts) {
  std::uint64_t end = 0;
  if (!parts.empty()) {
    const Upload& last = parts.back().uploads.back();
    end = last.offset + last.host.size();
  }
  std::fill(region.begin() + static_cast<std::ptrdiff_t>(end), region.end(), std::byte{0});
}

Status DeviceTier::upload(DeviceAddress base, cuda::Stream stream, const std::function<Status(std::size_t)>& verify,
                          std::optional<cuda::OutputFormat> ready, std::vector<std::string>* warnings) {
  base_ = base;
  const std::string what = "the device tier on device " + std::to_string(device_);
  EPK_TRY(cuda::set_device(device_));
  if (device_layout_.bytes != 0) EPK_TRY(cuda::zero_async(base, device_layout_.bytes, stream, what));
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (!on_device(i)) continue;
    EPK_TRY(verify(i));
    for (const Upload& u : lattice_uploads(lattice_[i].producer->stream(), *device_layout_.tensors[i])) {
      EPK_TRY(cuda::copy_to_device_async(base + u.offset, u.host.data(), u.host.size(), stream, what));
    }
  }
  EPK_TRY(make_ready_plans(ready, stream));
  EPK_TRY(cuda::synchronize(stream, what));  // the copies read the producers' host bytes
  return make_intq_forms(stream, verify, warnings);
}

Status DeviceTier::bind_host(std::span<const std::byte> host, StagingArea& area,
                             std::function<Status(std::size_t)> verify) {
  bool held_in_host = false;
  for (std::size_t i = 0; i < producers_.size(); ++i) held_in_host = held_in_host || (holds(i) && !on_device(i));
  const std::uint64_t want = held_in_host ? layout_.bytes : 0;
  if (host.size() != want) {
    return make_error(ErrorCode::kInvalidArgument, "host tier: " + std::to_string(host.size()) +
                                                       " bytes given where " + std::to_string(want) +
                                                       " are in host memory");
  }
  host_ = host;
  area_ = &area;
  verify_ = std::move(verify);
  return {};
}

Status DeviceTier::make_staging() {
  if (!staged()) return {};
  const std::uint64_t most = staging_bytes();
  if (most == 0) return {};  // every held tensor is on the device
  EPK_TRY_ASSIGN(DeviceAddress at, area_->reserve(most));
  if (at == staging_) return {};
  // The area is new to this tier or another tier grew it (which moved it): the plans that read the old address go.
  // Nothing uses them now (each enqueue is synchronised before the next).
  for (std::size_t i = 0; i < lattice_.size(); ++i) {
    if (!holds(i) || on_device(i)) continue;
    for (const auto& [key, plan] : lattice_[i].plans) account_(-static_cast<std::int64_t>(plan.scratch.size()));
    lattice_[i].plans.clear();
    lattice_[i].range_plans.clear();
  }
  pending_ = nullptr;
  staging_ = at;
  return {};
}

Status DeviceTier::make_ready_plans(std::optional<cuda::OutputFormat> ready, cuda::Stream stream) {
  if (!ready) return {};
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (!on_device(i)) continue;  // the others' plans read the staging buffer, made at their first decode
    EPK_TRY(plan_for(lattice_[i], i, PlanKey{*ready, 0, lattice_[i].producer->stream().rows}, stream));
  }
  return {};
}

Status DeviceTier::make_intq_forms(cuda::Stream stream, const std::function<Status(std::size_t)>& verify,
                                   std::vector<std::string>* warnings) {
  for (std::size_t i = 0; i < producers_.size(); ++i) {
    if (!intq_on_device(i)) continue;  // no form to make, or (staged) made in host memory at its first decode
    const IntqProducer* iq = intq_int(i);
    EPK_TRY(verify(i));
    Result<std::unique_ptr<IntqDeviceForm>> form = IntqDeviceForm::make(*iq, device_, stream);
    if (!form) {
      // One that cannot be uploaded (device memory) stays on the host path; the model's other tensors keep theirs.
      if (warnings != nullptr) {
        warnings->push_back("intq tensor '" + iq->entry().name + "' not resident (" + form.error().to_string() +
                            "); the host path serves it");
      }
      continue;
    }
    account_(static_cast<std::int64_t>((*form)->bytes()));
    intq_[i] = std::move(*form);
  }
  return {};
}

IntqDeviceForm* DeviceTier::intq_form(std::size_t tensor, Layout layout, cuda::Stream stream, std::string* note) {
  if (intq_[tensor] || !staged() || intq_on_device(tensor) || intq_refused_[tensor] != 0) return intq_[tensor].get();
  const IntqProducer* iq = intq_int(tensor);
  // None made for a layout only the host path writes: a model read only as fp32, say, pins nothing.
  if (iq == nullptr || !IntqDeviceForm::may_cover(*iq, layout)) return nullptr;
  Result<std::unique_ptr<IntqDeviceForm>> form = [&]() -> Result<std::unique_ptr<IntqDeviceForm>> {
    EPK_TRY(verify_(tensor));
    return IntqDeviceForm::make(*iq, device_, stream, area_);
  }();
  if (!form) {
    // The host path serves it and says what is wrong. Not tried again unless the device or the host's pinned memory
    // was short (kCuda), which may pass.
    if (form.error().code != ErrorCode::kCuda) intq_refused_[tensor] = 1;
    *note = "intq tensor '" + iq->entry().name + "': its form in host memory could not be made (" +
            form.error().to_string() + "); the host path serves it";
    return nullptr;
  }
  account_(static_cast<std::int64_t>((*form)->bytes()));
  intq_host_bytes_.fetch_add((*form)->host_bytes(), std::memory_order_relaxed);
  intq_[tensor] = std::move(*form);
  return intq_[tensor].get();
}

Status DeviceTier::stage_inputs(std::size_t tensor, cuda::Stream stream) {
  if (!staged() || on_device(tensor)) return {};
  const Span s = span(tensor);
  EPK_TRY(cuda::copy_to_device_async(staging_, host_.data() + s.offset, s.bytes, stream,
                                     "the host tier's copy of tensor '" + lattice_[tensor].producer->entry().name +
                                         "'"));
  staged_bytes_ += s.bytes;
  return {};
}

Result<DeviceTier::Plan*> DeviceTier::plan_for(Lattice& t, std::size_t tensor, const PlanKey& key,
                                               cuda::Stream stream) {
  if (auto it = t.plans.find(key); it != t.plans.end()) return &it->second;
  const bool is_whole = key.row_begin == 0 && key.row_end == t.producer->stream().rows;
  if (!is_whole && t.range_plans.size() >= kMaxRangePlans) {
    // The oldest range plan goes: nothing still uses it (each enqueue is synchronised before the next).
    auto old = t.plans.find(t.range_plans.front());
    t.range_plans.pop_front();
    if (old != t.plans.end()) {
      const auto freed = static_cast<std::int64_t>(old->second.scratch.size());
      t.plans.erase(old);
      account_(-freed);
    }
  }
  const rans::LatticeRansStream& s = t.producer->stream();
  EPK_TRY_ASSIGN(LatticeDevicePlan plan,
                 LatticeDevicePlan::create(s, t.producer->entry().name, key.format, key.row_begin, key.row_end,
                                           inputs(tensor), device_));
  EPK_TRY_ASSIGN(cuda::DeviceAllocation scratch,
                 cuda::DeviceAllocation::create(plan.scratch_bytes(), device_,
                                                "tensor '" + t.producer->entry().name + "': decode plan"));
  EPK_TRY(plan.upload(scratch.address().as<void>(), stream));
  account_(static_cast<std::int64_t>(scratch.size()));
  if (!is_whole) t.range_plans.push_back(key);
  return &t.plans.emplace(key, Plan{std::move(plan), std::move(scratch)}).first->second;
}

Result<DeviceWrite> DeviceTier::enqueue(std::size_t tensor, Layout layout, const ShardRange& shard,
                                        DeviceAddress dst, std::uint64_t bytes, ColumnWork& work,
                                        cuda::Stream stream) {
  pending_ = nullptr;
  if (tensor >= producers_.size()) return make_error(ErrorCode::kInternal, "device tier: no such tensor");
  if (lattice_[tensor].producer != nullptr) {
    const std::optional<cuda::OutputFormat> format = device_format(layout, lattice_[tensor].producer->source_dtype());
    if (!format) return DeviceWrite{DevicePath::kHost, DevicePath::kLatticeDecode, {}};
    return enqueue_lattice(tensor, *format, shard, dst, bytes, work, stream);
  }
  // An intq "int" tensor has a device form, on the device or (staged) made in host memory at its first decode.
  const DevicePath kind = intq_int(tensor) != nullptr ? DevicePath::kIntqKernels : DevicePath::kHost;
  DeviceWrite w{DevicePath::kHost, kind, {}};
  if (!shard.whole()) return w;  // the kernels write whole tensors only
  IntqDeviceForm* q = intq_form(tensor, layout, stream, &w.note);
  if (q == nullptr) return w;
  std::uint64_t added = 0;
  const std::uint64_t host_before = q->host_bytes();
  // A layout the kernels cannot be set up for (its padded variant does not fit the device, say) goes to the host
  // path like any layout they do not cover.
  Result<bool> covered = q->covers(layout, stream, &added);
  if (added != 0) account_(static_cast<std::int64_t>(added));
  intq_host_bytes_.fetch_add(q->host_bytes() - host_before, std::memory_order_relaxed);
  if (!covered) {
    w.note = "intq tensor '" + producers_[tensor]->entry().name + "': the kernels' setup failed (" +
             covered.error().to_string() + "); the host path serves it";
    return w;
  }
  if (!*covered) return w;
  EPK_TRY(q->produce(layout, dst, bytes, stream, &staged_bytes_));
  w.path = DevicePath::kIntqKernels;
  return w;
}

Result<DeviceWrite> DeviceTier::enqueue_lattice(std::size_t tensor, cuda::OutputFormat format,
                                                const ShardRange& shard, DeviceAddress dst, std::uint64_t bytes,
                                                ColumnWork& work, cuda::Stream stream) {
  Lattice& t = lattice_[tensor];
  const std::uint32_t rows = t.producer->stream().rows;
  const DeviceWrite done{DevicePath::kLatticeDecode, DevicePath::kLatticeDecode, {}};
  // Before the plan of a tensor decoded from the host tier: it reads its inputs at the staging buffer's address. A
  // tensor on the device needs none (a split tier whose host part is never decoded allocates none).
  if (!on_device(tensor)) EPK_TRY(make_staging());
  if (shard.dim == ShardDim::kCols) {
    EPK_TRY_ASSIGN(Plan * p, plan_for(t, tensor, PlanKey{format, 0, rows}, stream));
    EPK_TRY(stage_inputs(tensor, stream));
    EPK_TRY_ASSIGN(DeviceAddress work_dev, work.reserve(p->plan.work_bytes()));
    EPK_TRY(p->plan.enqueue_columns(shard, dst, bytes, work_dev, p->scratch.address().as<void>(), stream));
    pending_ = p;
    return done;
  }
  const PlanKey key = shard.whole() ? PlanKey{format, 0, rows}
                                    : PlanKey{format, static_cast<std::uint32_t>(shard.begin),
                                              static_cast<std::uint32_t>(shard.end)};
  EPK_TRY(enqueue_plan(t, tensor, key, dst, bytes, stream));
  return done;
}

Status DeviceTier::enqueue_plan(Lattice& t, std::size_t tensor, const PlanKey& key, DeviceAddress dst,
                                std::uint64_t bytes, cuda::Stream stream) {
  EPK_TRY_ASSIGN(Plan * p, plan_for(t, tensor, key, stream));
  if (p->plan.output_bytes() != bytes) {  // never write past the destination (every caller sized it as the plan)
    return make_error(ErrorCode::kInternal, "tensor '" + t.producer->entry().name + "': output of " +
                                                       std::to_string(bytes) + " bytes, the decode writes " +
                                                       std::to_string(p->plan.output_bytes()));
  }
  EPK_TRY(stage_inputs(tensor, stream));
  EPK_TRY(p->plan.enqueue(dst, p->scratch.address().as<void>(), stream));
  pending_ = p;
  return {};
}

Status DeviceTier::enqueue_format(std::size_t tensor, cuda::OutputFormat format, DeviceAddress dst,
                                  std::uint64_t bytes, cuda::Stream stream) {
  pending_ = nullptr;
  if (!holds(tensor)) {
    return make_error(ErrorCode::kUnsupported, "tensor " + std::to_string(tensor) + " is not in the device tier");
  }
  Lattice& t = lattice_[tensor];
  if (!on_device(tensor)) EPK_TRY(make_staging());
  return enqueue_plan(t, tensor, PlanKey{format, 0, t.producer->stream().rows}, dst, bytes, stream);
}

Status DeviceTier::check(cuda::Stream stream, std::vector<rans::TileFaultRecord>* faults) {
  Plan* p = pending_;
  pending_ = nullptr;
  if (p == nullptr) return {};
  const void* scratch = p->scratch.address().as<const void>();
  Status st = p->plan.check(scratch, stream);
  if (!st && faults != nullptr) {
    EPK_TRY_ASSIGN(std::vector<rans::TileFaultRecord> bad,
                   cuda::read_tile_faults(p->plan.decode_plan(), scratch, stream));
    faults->insert(faults->end(), bad.begin(), bad.end());
  }
  return st;
}

}  // namespace epk::serve
