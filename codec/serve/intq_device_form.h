// intq "int" tensors (FORMAT.md 11) on a device: their stored logical form kept in device memory and the serving
// layouts codec/cuda's kernels write from it (codec/cuda/intq/intq_repack.h), bit for bit the host producer's
// (codec/serve/intq_producer.h for the packed layouts, decode_tensor/dequantize_intq for the dense ones). The
// device tier (device_tier.h) holds one per intq tensor; nothing else uses it.
//
// - Where the variants live: in device memory, or (a model its tier budget left in host memory, device_tier.h's
//   place()) in pinned host memory, each variant's buffers in one block that produce() copies into the lane's
//   staging area before the kernels read it there. The act-order row maps are computed on the device once per
//   variant and kept there either way (4 bytes a row each).
// - make() reads the tensor once (IntqProducer::read: rANS-coded codes are decoded there) and uploads its codes
//   (packed LSB-first, as FORMAT.md stores packed codes), float32 scales, packed zeros (asymmetric only), g_idx
//   (scattered groups only), perm, and the act-order row maps (invert_perm / group_order, computed on the device):
//   the "variant" of the stored padding. A packed layout needing other padding (write_layout pads to the layout's
//   multiples first) gets its own variant, padded on the host with layouts::pad_to on its first use and then kept.
// - covers() says whether the kernels write a layout, deciding by intq_device.h's rule before anything is issued:
//   not covered are fp32 dense, fp32 scales, a GPTQ v1 zero point of 0 and a padding row sorting into Marlin's
//   logical rows (both refused by the CPU writers with their own message), AWQ of scattered groups, and a Marlin
//   part count the params disagree with. produce() issues the kernels for one slot, the gaps between parts zeroed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "codec/cuda/decode/decode.h"
#include "codec/cuda/device_allocation.h"
#include "codec/cuda/intq/intq_repack.h"
#include "codec/serve/intq_device.h"
#include "codec/serve/intq_producer.h"

namespace epk::serve {

class StagingArea;

class IntqDeviceForm {
 public:
  // Reads the tensor p produces and uploads its stored variant on `stream` (synchronised before it returns: the
  // host copies it uploads from are its own). With `staging`, the variants stay in pinned host memory and are
  // copied into `staging` (which outlives the form) at each produce().
  static Result<std::unique_ptr<IntqDeviceForm>> make(const IntqProducer& p, int device, cuda::Stream stream,
                                                       StagingArea* staging = nullptr);
  // At least the bytes make() takes for the stored variant of a tensor of params `h` (device memory, or pinned host
  // memory when staged), from the params alone: what a tier budget counts for it before it is read.
  static std::uint64_t stored_bytes(const layouts::intq::IntHeader& h);

  // Whether the kernels may write `layout` of p's tensor, from its params alone (dense bf16/fp16, packed layouts with
  // bf16/fp16 scales): false for certain before a form is made, so none is made for a layout only the host path
  // writes. covers() has the final word.
  static bool may_cover(const IntqProducer& p, Layout layout);
  // Whether the kernels write `layout` (false: the host path). For packed layouts it may add a variant (reading the
  // tensor again); *added receives the device bytes that took.
  Result<bool> covers(Layout layout, cuda::Stream stream, std::uint64_t* added);
  // Writes `layout` into [dst, dst + bytes) on `stream`; covers() returned true for it. A staged form copies the
  // variant it reads into the staging area first and adds the bytes copied to *staged_bytes.
  Status produce(Layout layout, DeviceAddress dst, std::uint64_t bytes, cuda::Stream stream,
                 std::uint64_t* staged_bytes = nullptr) const;
  // The device bytes of every variant (a staged form's: its row maps), and the pinned host bytes of a staged one.
  std::uint64_t bytes() const;
  std::uint64_t host_bytes() const;
  bool staged() const { return staging_ != nullptr; }

  ~IntqDeviceForm();

 private:
  // The buffers of a padding of the tensor's logical form, in this order: packed codes, float32 scales, packed
  // zeros (asymmetric only), g_idx (scattered groups only), perm (only with one).
  enum Buffer : std::size_t { kCodes, kScales, kZeros, kGIdx, kPerm, kBuffers };
  // One padding of the tensor's logical form: its buffers in device memory (`device`), or staged: at `at` in the
  // pinned block `host` (kAbsent: a buffer it lacks), in device memory only while a produce() reads the copy.
  static constexpr std::uint64_t kAbsent = ~std::uint64_t{0};
  struct Variant : IntqKernelTraits {
    std::array<cuda::DeviceAllocation, kBuffers> device;
    cuda::PinnedAllocation host;
    std::array<std::uint64_t, kBuffers> at{};
    cuda::DeviceAllocation inv_perm, order;  // the act-order row maps, on the device either way
    std::uint64_t bytes() const {
      std::uint64_t n = inv_perm.size() + order.size();
      for (const cuda::DeviceAllocation& b : device) n += b.size();
      return n;
    }
  };

  IntqDeviceForm(const IntqProducer& p, int device, StagingArea* staging)
      : producer_(p), device_(device), staging_(staging) {}
  // q (whose traits are `traits`) uploaded (or kept staged) as a new variant, with the act-order row maps the
  // repacks take.
  Status add_variant(const layouts::QuantTensor& q, const IntqKernelTraits& traits, cuda::Stream stream);
  const Variant* find(std::uint64_t padded_rows, std::uint64_t padded_cols) const;
  // Where v's buffers are on the device now: its own, or (staged) a copy of its block at `staged_at`.
  cuda::intq::DeviceIntq view(const Variant& v, DeviceAddress staged_at = DeviceAddress()) const;
  // A staged variant's block copied into the staging area on `stream`: where it is.
  Result<DeviceAddress> stage(const Variant& v, cuda::Stream stream) const;
  // The dense type the dequantize kernel writes for `layout` (nullopt: not a dense layout the kernels write).
  std::optional<cuda::intq::DenseType> dense_layout(Layout layout) const;

  const IntqProducer& producer_;
  const int device_;
  StagingArea* const staging_;  // null: the variants are in device memory
  DType dense_ = DType::kF32;  // the index dtype: what kStored dequantizes to
  DType scale_ = DType::kF16;  // the scales' dtype (the packed layouts' scales part)
  int bits_ = 4;
  std::int64_t rows_ = 0, cols_ = 0, group_size_ = 0;
  std::vector<std::unique_ptr<Variant>> variants_;  // [0]: the stored padding
  std::uint32_t refused_ = 0;  // packed layouts the kernels refused (bit 1 << Layout): not read and padded again
};

}  // namespace epk::serve
