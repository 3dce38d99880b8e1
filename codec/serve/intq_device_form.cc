#include "codec/serve/intq_device_form.h"

#include <cstring>
#include <optional>
#include <span>

#include "codec/common/bytes.h"
#include "codec/cuda/decode/tier_layout.h"
#include "codec/cuda/intq/intq_repack.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/pack_bits.h"
#include "codec/serve/device_tier.h"

namespace epk::serve {

namespace {

namespace ci = cuda::intq;

std::optional<ci::DenseType> dense_type(DType d) {
  if (d == DType::kBF16) return ci::DenseType::kBf16;
  if (d == DType::kF16) return ci::DenseType::kFp16;
  return std::nullopt;
}

}  // namespace

IntqDeviceForm::~IntqDeviceForm() = default;

std::uint64_t IntqDeviceForm::bytes() const {
  std::uint64_t n = 0;
  for (const auto& v : variants_) n += v->bytes();
  return n;
}

std::uint64_t IntqDeviceForm::host_bytes() const {
  std::uint64_t n = 0;
  for (const auto& v : variants_) n += v->host.size();
  return n;
}

bool IntqDeviceForm::may_cover(const IntqProducer& p, Layout layout) {
  const layouts::intq::IntHeader* h = p.header();
  if (h == nullptr) return false;
  if (!is_packed_int(layout)) return intq_kernel_dense(layout, p.entry().dtype).has_value();
  return dense_type(h->shape.scale_dtype).has_value();
}

std::uint64_t IntqDeviceForm::stored_bytes(const layouts::intq::IntHeader& h) {
  const layouts::QuantTensor& t = h.shape;
  const auto rows = static_cast<std::uint64_t>(t.padded_rows), cols = static_cast<std::uint64_t>(t.padded_cols);
  const auto groups = static_cast<std::uint64_t>(t.num_groups), bits = static_cast<std::uint64_t>(t.bits);
  auto packed = [bits](std::uint64_t n) { return (n * bits + 31) / 32 * 4; };
  auto block = [](std::uint64_t n) { return align_up(n, cuda::kTierAlign); };
  std::uint64_t n = block(packed(rows * cols)) + block(groups * cols * 4);
  if (!h.symmetric) n += block(packed(groups * cols));
  if (h.has_g_idx) n += block(rows * 4);
  if (h.has_perm) n += 2 * block(rows * 4);   // perm and its inverse
  if (h.has_g_idx || h.has_perm) n += rows * 4;  // the group order
  return n;
}

Result<std::unique_ptr<IntqDeviceForm>> IntqDeviceForm::make(const IntqProducer& p, int device, cuda::Stream stream,
                                                             StagingArea* staging) {
  EPK_TRY_ASSIGN(layouts::QuantTensor q, p.read());
  std::unique_ptr<IntqDeviceForm> t(new IntqDeviceForm(p, device, staging));
  t->dense_ = p.entry().dtype;
  t->scale_ = q.scale_dtype;
  t->bits_ = q.bits;
  t->rows_ = q.rows;
  t->cols_ = q.cols;
  t->group_size_ = q.group_size;
  EPK_TRY(t->add_variant(q, intq_kernel_traits(q), stream));
  return t;
}

ci::DeviceIntq IntqDeviceForm::view(const Variant& v, DeviceAddress staged_at) const {
  auto at = [&](Buffer b) -> DeviceAddress {
    if (!staged()) return v.device[b].address();
    return v.at[b] == kAbsent || !staged_at ? DeviceAddress() : staged_at + v.at[b];
  };
  ci::DeviceIntq d;
  d.codes = at(kCodes).as<const std::uint32_t>();
  d.scales = at(kScales).as<const float>();
  d.zeros = at(kZeros).as<const std::uint32_t>();
  d.g_idx = at(kGIdx).as<const std::int32_t>();
  d.perm = at(kPerm).as<const std::int32_t>();
  d.bits = bits_;
  d.rows = rows_;
  d.cols = cols_;
  d.padded_rows = v.padded_rows;
  d.padded_cols = v.padded_cols;
  d.group_size = group_size_;
  d.num_groups = v.num_groups;
  return d;
}

Result<DeviceAddress> IntqDeviceForm::stage(const Variant& v, cuda::Stream stream) const {
  EPK_TRY_ASSIGN(DeviceAddress at, staging_->reserve(v.host.size()));
  EPK_TRY(cuda::copy_to_device_async(at, v.host.data(), v.host.size(), stream,
                                     "intq tensor '" + producer_.entry().name + "': its staged copy"));
  return at;
}

Status IntqDeviceForm::add_variant(const layouts::QuantTensor& q, const IntqKernelTraits& traits,
                                   cuda::Stream stream) {
  // The act-order kernels below launch on the current device: make it this one, whoever calls.
  EPK_TRY(cuda::set_device(device_));
  const std::string what = "intq tensor '" + producer_.entry().name + "' on device " + std::to_string(device_);
  auto v = std::make_unique<Variant>();
  static_cast<IntqKernelTraits&>(*v) = traits;
  std::vector<std::uint32_t> words(layouts::packed_words(q.codes.size(), q.bits));
  EPK_TRY(layouts::pack_bits(q.codes, q.bits, words));
  std::vector<std::uint32_t> zwords;
  if (!layouts::is_symmetric(q)) {  // symmetric: the kernels take 2^(bits-1), as the CPU writers do
    std::vector<std::uint8_t> z8(q.zeros.begin(), q.zeros.end());
    zwords.resize(layouts::packed_words(z8.size(), q.bits));
    EPK_TRY(layouts::pack_bits(z8, q.bits, zwords));
  }
  std::array<std::span<const std::byte>, kBuffers> parts;
  parts[kCodes] = std::as_bytes(std::span<const std::uint32_t>(words));
  parts[kScales] = std::as_bytes(std::span<const float>(q.scales));
  parts[kZeros] = std::as_bytes(std::span<const std::uint32_t>(zwords));
  if (!v->static_groups) parts[kGIdx] = std::as_bytes(std::span<const std::int32_t>(q.g_idx));
  if (v->has_perm) parts[kPerm] = std::as_bytes(std::span<const std::int32_t>(q.perm));
  DeviceAddress staged_at;
  if (!staged()) {
    for (std::size_t b = 0; b < kBuffers; ++b) {
      if (parts[b].empty()) continue;
      EPK_TRY_ASSIGN(v->device[b], cuda::DeviceAllocation::create(parts[b].size(), device_, what));
      EPK_TRY(cuda::copy_to_device_async(v->device[b].address(), parts[b].data(), parts[b].size(), stream, what));
    }
  } else {
    // One block, each buffer 256-byte aligned in it (the kernels' loads want no less than the codes' alignment).
    std::uint64_t end = 0;
    for (std::size_t b = 0; b < kBuffers; ++b) {
      v->at[b] = parts[b].empty() ? kAbsent : end;
      if (!parts[b].empty()) end = align_up(end + parts[b].size(), cuda::kTierAlign);
    }
    EPK_TRY_ASSIGN(v->host, cuda::PinnedAllocation::create(end, what + ": pinned host copy"));
    if (end != 0) std::memset(v->host.data(), 0, end);
    for (std::size_t b = 0; b < kBuffers; ++b) {
      if (!parts[b].empty()) std::memcpy(v->host.data() + v->at[b], parts[b].data(), parts[b].size());
    }
    if (v->has_perm || !v->static_groups) {  // the row maps are computed from a copy on the device
      EPK_TRY_ASSIGN(staged_at, stage(*v, stream));
    }
  }
  const std::uint64_t map_bytes = static_cast<std::uint64_t>(q.padded_rows) * 4;
  const ci::DeviceIntq d = view(*v, staged_at);
  Status maps = [&]() -> Status {
    if (v->has_perm) {
      EPK_TRY_ASSIGN(v->inv_perm, cuda::DeviceAllocation::create(map_bytes, device_, what));
      EPK_TRY(ci::invert_perm(d, v->inv_perm.address().as<std::int32_t>(), stream));
    }
    if (!v->static_groups || v->has_perm) {
      EPK_TRY_ASSIGN(v->order, cuda::DeviceAllocation::create(map_bytes, device_, what));
      EPK_TRY(ci::group_order(d, v->order.address().as<std::int32_t>(), nullptr, stream));
    }
    return {};
  }();
  // Always: the copies read words, zwords, q's vectors and v's pinned block, which go with this scope or with v.
  Status synced = cuda::synchronize(stream, what);
  EPK_TRY(maps);
  EPK_TRY(synced);
  variants_.push_back(std::move(v));
  return {};
}

const IntqDeviceForm::Variant* IntqDeviceForm::find(std::uint64_t padded_rows, std::uint64_t padded_cols) const {
  for (const auto& v : variants_) {
    if (static_cast<std::uint64_t>(v->padded_rows) == padded_rows &&
        static_cast<std::uint64_t>(v->padded_cols) == padded_cols) {
      return v.get();
    }
  }
  return nullptr;
}

std::optional<ci::DenseType> IntqDeviceForm::dense_layout(Layout layout) const {
  const std::optional<DType> d = intq_kernel_dense(layout, dense_);
  return d ? dense_type(*d) : std::nullopt;
}

Result<bool> IntqDeviceForm::covers(Layout layout, cuda::Stream stream, std::uint64_t* added) {
  *added = 0;
  if (!may_cover(producer_, layout)) return false;  // from the params: a dense type or scales the kernels lack
  if (!is_packed_int(layout)) return true;
  const std::uint32_t layout_bit = 1u << static_cast<std::uint32_t>(layout);
  static_assert(kLayoutCount <= 32);
  if ((refused_ & layout_bit) != 0) return false;
  Result<PackedPlan> plan = producer_.packed_plan(layout);
  if (!plan) return false;  // the host path answers with the same refusal
  const PackedGeometry& g = plan->geometry;
  const Variant* v = find(g.padded_rows, g.padded_cols);
  if (v == nullptr) {
    // write_layout's padding for this layout, made once on the host from the stored tensor.
    EPK_TRY_ASSIGN(layouts::QuantTensor q, producer_.read());
    EPK_TRY(pad_for_layout(q, layout));
    if (static_cast<std::uint64_t>(q.padded_rows) != g.padded_rows ||
        static_cast<std::uint64_t>(q.padded_cols) != g.padded_cols) {
      return false;  // not the geometry the slot was sized by: let the host path report it
    }
    // A layout the kernels refuse for this tensor (AWQ or Marlin of an act-order tensor, say) uploads nothing.
    const IntqKernelTraits traits = intq_kernel_traits(q);
    if (!intq_kernels_write(traits, layout, g)) {
      refused_ |= layout_bit;  // the same tensor and layout give the same answer next time
      return false;
    }
    EPK_TRY(add_variant(q, traits, stream));
    v = variants_.back().get();
    *added = v->bytes();
  }
  return intq_kernels_write(*v, layout, g);
}

Status IntqDeviceForm::produce(Layout layout, DeviceAddress dst, std::uint64_t bytes, cuda::Stream s,
                               std::uint64_t* staged_bytes) const {
  const std::string& name = producer_.entry().name;
  // The variant's buffers where the kernels read them: a staged one copied in first (each produce is synchronised
  // before the next, so the staging area holds one copy at a time).
  auto device_view = [&](const Variant& v) -> Result<ci::DeviceIntq> {
    if (!staged()) return view(v);
    EPK_TRY_ASSIGN(DeviceAddress at, stage(v, s));
    if (staged_bytes != nullptr) *staged_bytes += v.host.size();
    return view(v, at);
  };
  if (std::optional<ci::DenseType> d = dense_layout(layout)) {
    if (static_cast<std::uint64_t>(rows_) * static_cast<std::uint64_t>(cols_) * 2 != bytes) {
      return make_error(ErrorCode::kInternal, "tensor '" + name + "': dense intq slot size");
    }
    EPK_TRY_ASSIGN(const ci::DeviceIntq dense, device_view(*variants_[0]));
    return ci::dequantize_dense(dense, *d, dst.as<void>(), s);
  }
  EPK_TRY_ASSIGN(PackedPlan plan, producer_.packed_plan(layout));
  const Variant* v = find(plan.geometry.padded_rows, plan.geometry.padded_cols);
  if (v == nullptr || plan.bytes != bytes) {
    return make_error(ErrorCode::kInternal, "tensor '" + name + "': packed intq slot without its device form");
  }
  // The gaps between parts (and nothing past the slot): zero, as the host path leaves them.
  for (std::size_t i = 0; i < plan.count; ++i) {
    const std::uint64_t end = plan.parts[i].offset + plan.parts[i].bytes;
    const std::uint64_t next = i + 1 < plan.count ? plan.parts[i + 1].offset : plan.bytes;
    if (next > end) EPK_TRY(cuda::zero_async(dst + end, next - end, s, "tensor '" + name + "': part gap"));
  }
  EPK_TRY_ASSIGN(const ci::DeviceIntq d, device_view(*v));
  const ci::DenseType st = *dense_type(scale_);
  auto part = [&](std::size_t i) { return dst + plan.parts[i].offset; };
  auto* inv = v->has_perm ? v->inv_perm.address().as<const std::int32_t>() : nullptr;
  auto* order = v->order.address() ? v->order.address().as<const std::int32_t>() : nullptr;
  switch (layout) {
    case Layout::kGptq:
    case Layout::kGptqV2:
      EPK_TRY(ci::repack_gptq_qweight(d, part(0).as<std::uint32_t>(), s, inv));
      if (layout == Layout::kGptq) {
        EPK_TRY(ci::repack_gptq_qzeros_v1(d, part(1).as<std::uint32_t>(), nullptr, s));
      } else {
        EPK_TRY(ci::repack_gptq_qzeros_v2(d, part(1).as<std::uint32_t>(), s));
      }
      EPK_TRY(ci::convert_scales(d, st, part(2).as<void>(), s));
      return ci::gptq_g_idx(d, inv, part(3).as<std::int32_t>(), s);
    case Layout::kAwq:
      EPK_TRY(ci::repack_awq_qweight(d, part(0).as<std::uint32_t>(), s));
      EPK_TRY(ci::repack_awq_qzeros(d, part(1).as<std::uint32_t>(), s));
      return ci::convert_scales(d, st, part(2).as<void>(), s);
    case Layout::kMarlin:
      EPK_TRY(ci::repack_marlin_qweight(d, part(0).as<std::uint32_t>(), s, order));
      EPK_TRY(ci::repack_marlin_scales(d, st, part(1).as<void>(), s));
      if (order == nullptr) return {};
      return ci::marlin_g_idx_perm(d, order, part(2).as<std::int32_t>(),
                                   part(3).as<std::int32_t>(), s);
    default:
      return make_error(ErrorCode::kInternal, "tensor '" + name + "': not an intq layout the kernels write");
  }
}

}  // namespace epk::serve
