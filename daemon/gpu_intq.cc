#include "daemon/gpu_intq.h"

#include <algorithm>
#include <span>

#include "codec/cuda/intq_repack.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/pack_bits.h"

namespace epk::daemon::gpu_intq {
namespace {

namespace ci = cuda::intq;

cuda::Stream cs(const shm::CudaStream& s) { return static_cast<cuda::Stream>(s.get()); }

template <class T>
Result<shm::DeviceBuffer> put(std::span<const T> v, int device, const shm::CudaStream& stream) {
  EPK_TRY_ASSIGN(shm::DeviceBuffer b, shm::DeviceBuffer::alloc(v.size_bytes(), device));
  if (!v.empty()) EPK_TRY(shm::copy_to_device_async(b.ptr(), v.data(), v.size_bytes(), stream.get(), device));
  return b;
}

template <class T>
const T* as(const shm::DeviceBuffer& b) {
  return b.ptr() == 0 ? nullptr : reinterpret_cast<const T*>(b.ptr());
}

ci::DeviceIntq view_of(const Tensor& t, const Variant& v) {
  ci::DeviceIntq d;
  d.codes = as<std::uint32_t>(v.codes);
  d.scales = as<float>(v.scales);
  d.zeros = as<std::uint32_t>(v.zeros);
  d.g_idx = as<std::int32_t>(v.g_idx);
  d.perm = as<std::int32_t>(v.perm);
  d.bits = t.bits;
  d.rows = t.rows;
  d.cols = t.cols;
  d.padded_rows = v.padded_rows;
  d.padded_cols = v.padded_cols;
  d.group_size = t.group_size;
  d.num_groups = v.num_groups;
  return d;
}

// The logical form of q (whose intq_kernel_traits are `traits`) in device memory, and the act-order row maps the repacks take.
Result<std::unique_ptr<Variant>> make_variant(const Tensor& t, const layouts::QuantTensor& q,
                                              const serve::IntqKernelTraits& traits, int device, const shm::CudaStream& stream) {
  // The act-order kernels below launch on the current context: make it this device's, whoever calls.
  EPK_TRY(shm::make_device_current(device));
  auto v = std::make_unique<Variant>();
  static_cast<serve::IntqKernelTraits&>(*v) = traits;
  std::vector<std::uint32_t> words(layouts::packed_words(q.codes.size(), q.bits));
  EPK_TRY(layouts::pack_bits(q.codes, q.bits, words));
  EPK_TRY_ASSIGN(v->codes, put(std::span<const std::uint32_t>(words), device, stream));
  EPK_TRY_ASSIGN(v->scales, put(std::span<const float>(q.scales), device, stream));
  std::vector<std::uint32_t> zwords;
  if (!layouts::is_symmetric(q)) {  // symmetric: the kernels take 2^(bits-1), as the CPU writers do
    std::vector<std::uint8_t> z8(q.zeros.begin(), q.zeros.end());
    zwords.resize(layouts::packed_words(z8.size(), q.bits));
    EPK_TRY(layouts::pack_bits(z8, q.bits, zwords));
    EPK_TRY_ASSIGN(v->zeros, put(std::span<const std::uint32_t>(zwords), device, stream));
  }
  if (!v->static_groups) {
    EPK_TRY_ASSIGN(v->g_idx, put(std::span<const std::int32_t>(q.g_idx), device, stream));
  }
  if (v->has_perm) {
    EPK_TRY_ASSIGN(v->perm, put(std::span<const std::int32_t>(q.perm), device, stream));
  }
  const std::uint64_t map_bytes = static_cast<std::uint64_t>(q.padded_rows) * 4;
  const ci::DeviceIntq d = view_of(t, *v);
  if (v->has_perm) {
    EPK_TRY_ASSIGN(v->inv_perm, shm::DeviceBuffer::alloc(map_bytes, device));
    EPK_TRY(ci::invert_perm(d, reinterpret_cast<std::int32_t*>(v->inv_perm.ptr()), cs(stream)));
  }
  if (!v->static_groups || v->has_perm) {
    EPK_TRY_ASSIGN(v->order, shm::DeviceBuffer::alloc(map_bytes, device));
    EPK_TRY(ci::group_order(d, reinterpret_cast<std::int32_t*>(v->order.ptr()), nullptr, cs(stream)));
  }
  EPK_TRY(stream.synchronize());  // words, zwords and q's vectors are read by the copies
  v->bytes = v->codes.size() + v->scales.size() + v->zeros.size() + v->g_idx.size() + v->perm.size() +
             v->inv_perm.size() + v->order.size();
  return v;
}

Variant* find(const Tensor& t, std::uint64_t padded_rows, std::uint64_t padded_cols) {
  for (const auto& v : t.variants) {
    if (static_cast<std::uint64_t>(v->padded_rows) == padded_rows &&
        static_cast<std::uint64_t>(v->padded_cols) == padded_cols) {
      return v.get();
    }
  }
  return nullptr;
}

std::optional<ci::DenseType> dense_type(DType d) {
  if (d == DType::kBF16) return ci::DenseType::kBf16;
  if (d == DType::kF16) return ci::DenseType::kFp16;
  return std::nullopt;
}

// The dense type the dequantize kernel writes for `layout` of t (nullopt: not a dense layout the kernels write).
std::optional<ci::DenseType> dense_layout(const Tensor& t, shm::Layout layout) {
  const std::optional<DType> d = serve::intq_kernel_dense(layout, t.dense);
  return d ? dense_type(*d) : std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Tensor>> upload(const serve::IntqProducer& p, int device, const shm::CudaStream& stream) {
  EPK_TRY_ASSIGN(layouts::QuantTensor q, p.read());
  auto t = std::make_unique<Tensor>();
  t->name = p.entry().name;
  t->dense = p.entry().dtype;
  t->scale = q.scale_dtype;
  t->bits = q.bits;
  t->rows = q.rows;
  t->cols = q.cols;
  t->group_size = q.group_size;
  EPK_TRY_ASSIGN(std::unique_ptr<Variant> v, make_variant(*t, q, serve::intq_kernel_traits(q), device, stream));
  t->variants.push_back(std::move(v));
  return t;
}

Result<bool> covers(Tensor& t, const serve::IntqProducer& p, shm::Layout layout, int device,
                    const shm::CudaStream& stream, std::uint64_t* added) {
  *added = 0;
  if (!shm::is_packed_int(layout)) return dense_layout(t, layout).has_value();
  if (p.header() == nullptr || !dense_type(t.scale)) return false;
  const std::uint32_t layout_bit = 1u << static_cast<std::uint32_t>(layout);
  static_assert(shm::kLayoutCount <= 32);
  if ((t.refused & layout_bit) != 0) return false;
  Result<serve::PackedPlan> plan = p.packed_plan(layout);
  if (!plan) return false;  // the CPU path answers with the same refusal
  const shm::PackedGeometry& g = plan->geometry;
  Variant* v = find(t, g.padded_rows, g.padded_cols);
  if (v == nullptr) {
    // write_layout's padding for this layout, made once on the host from the stored tensor.
    EPK_TRY_ASSIGN(layouts::QuantTensor q, p.read());
    EPK_TRY(serve::pad_for_layout(q, layout));
    if (static_cast<std::uint64_t>(q.padded_rows) != g.padded_rows ||
        static_cast<std::uint64_t>(q.padded_cols) != g.padded_cols) {
      return false;  // not the geometry the slot was sized by: let the CPU path report it
    }
    // A layout the kernels refuse for this tensor (AWQ or Marlin of an act-order tensor, say) uploads nothing.
    const serve::IntqKernelTraits traits = serve::intq_kernel_traits(q);
    if (!serve::intq_kernels_write(traits, layout, g)) {
      t.refused |= layout_bit;  // the same tensor and layout give the same answer next time
      return false;
    }
    EPK_TRY_ASSIGN(std::unique_ptr<Variant> made, make_variant(t, q, traits, device, stream));
    *added = made->bytes;
    v = made.get();
    t.variants.push_back(std::move(made));
  }
  return serve::intq_kernels_write(*v, layout, g);
}

Status produce(const Tensor& t, const serve::IntqProducer& p, shm::Layout layout, std::uint64_t dst,
               std::uint64_t bytes, int device, const shm::CudaStream& stream) {
  const cuda::Stream s = cs(stream);
  if (std::optional<ci::DenseType> d = dense_layout(t, layout)) {
    if (static_cast<std::uint64_t>(t.rows) * static_cast<std::uint64_t>(t.cols) * 2 != bytes) {
      return make_error(ErrorCode::kInternal, "tensor '" + t.name + "': dense intq slot size");
    }
    return ci::dequantize_dense(view_of(t, *t.variants[0]), *d, reinterpret_cast<void*>(dst), s);
  }
  EPK_TRY_ASSIGN(serve::PackedPlan plan, p.packed_plan(layout));
  const Variant* v = find(t, plan.geometry.padded_rows, plan.geometry.padded_cols);
  if (v == nullptr || plan.bytes != bytes) {
    return make_error(ErrorCode::kInternal, "tensor '" + t.name + "': packed intq slot without its device form");
  }
  // The gaps between parts (and nothing past the slot): zero, as the CPU path leaves them.
  for (std::size_t i = 0; i < plan.count; ++i) {
    const std::uint64_t end = plan.parts[i].offset + plan.parts[i].bytes;
    const std::uint64_t next = i + 1 < plan.count ? plan.parts[i + 1].offset : plan.bytes;
    if (next > end) EPK_TRY(shm::fill_device_async(dst + end, 0, next - end, stream.get(), device));
  }
  const ci::DeviceIntq d = view_of(t, *v);
  const ci::DenseType st = *dense_type(t.scale);
  auto part = [&](std::size_t i) { return dst + plan.parts[i].offset; };
  auto* inv = v->has_perm ? reinterpret_cast<const std::int32_t*>(v->inv_perm.ptr()) : nullptr;
  auto* order = v->order.ptr() != 0 ? reinterpret_cast<const std::int32_t*>(v->order.ptr()) : nullptr;
  switch (layout) {
    case shm::Layout::kGptq:
    case shm::Layout::kGptqV2:
      EPK_TRY(ci::repack_gptq_qweight(d, reinterpret_cast<std::uint32_t*>(part(0)), s, inv));
      if (layout == shm::Layout::kGptq) {
        EPK_TRY(ci::repack_gptq_qzeros_v1(d, reinterpret_cast<std::uint32_t*>(part(1)), nullptr, s));
      } else {
        EPK_TRY(ci::repack_gptq_qzeros_v2(d, reinterpret_cast<std::uint32_t*>(part(1)), s));
      }
      EPK_TRY(ci::convert_scales(d, st, reinterpret_cast<void*>(part(2)), s));
      return ci::gptq_g_idx(d, inv, reinterpret_cast<std::int32_t*>(part(3)), s);
    case shm::Layout::kAwq:
      EPK_TRY(ci::repack_awq_qweight(d, reinterpret_cast<std::uint32_t*>(part(0)), s));
      EPK_TRY(ci::repack_awq_qzeros(d, reinterpret_cast<std::uint32_t*>(part(1)), s));
      return ci::convert_scales(d, st, reinterpret_cast<void*>(part(2)), s);
    case shm::Layout::kMarlin:
      EPK_TRY(ci::repack_marlin_qweight(d, reinterpret_cast<std::uint32_t*>(part(0)), s, order));
      EPK_TRY(ci::repack_marlin_scales(d, st, reinterpret_cast<void*>(part(1)), s));
      if (order == nullptr) return {};
      return ci::marlin_g_idx_perm(d, order, reinterpret_cast<std::int32_t*>(part(2)),
                                   reinterpret_cast<std::int32_t*>(part(3)), s);
    default:
      return make_error(ErrorCode::kInternal, "tensor '" + t.name + "': not an intq layout the kernels write");
  }
}

}  // namespace epk::daemon::gpu_intq
