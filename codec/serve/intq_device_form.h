// intq "int" tensors (FORMAT.md 11) on a device: their stored logical form kept in device memory and the serving
// layouts codec/cuda's kernels write from it (codec/cuda/intq/intq_repack.h), bit for bit the host producer's
// (codec/serve/intq_producer.h for the packed layouts, decode_tensor/dequantize_intq for the dense ones). The
// device tier (device_tier.h) holds one per intq tensor; nothing else uses it.
//
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

class IntqDeviceForm {
 public:
  // Reads the tensor p produces and uploads its stored variant on `stream` (synchronised before it returns: the
  // host copies it uploads from are its own).
  static Result<std::unique_ptr<IntqDeviceForm>> make(const IntqProducer& p, int device, cuda::Stream stream);

  // Whether the kernels write `layout` (false: the host path). For packed layouts it may add a variant (reading the
  // tensor again); *added receives the device bytes that took.
  Result<bool> covers(Layout layout, cuda::Stream stream, std::uint64_t* added);
  // Writes `layout` into [dst, dst + bytes) on `stream`; covers() returned true for it.
  Status produce(Layout layout, DeviceAddress dst, std::uint64_t bytes, cuda::Stream stream) const;
  // The device bytes of every variant.
  std::uint64_t bytes() const;

  ~IntqDeviceForm();

 private:
  // One padding of the tensor's logical form in device memory.
  struct Variant : IntqKernelTraits {
    cuda::DeviceAllocation codes, scales, zeros, g_idx, perm, inv_perm, order;
    std::uint64_t bytes() const {
      return codes.size() + scales.size() + zeros.size() + g_idx.size() + perm.size() + inv_perm.size() +
             order.size();
    }
  };

  IntqDeviceForm(const IntqProducer& p, int device) : producer_(p), device_(device) {}
  // q (whose traits are `traits`) uploaded as a new variant, with the act-order row maps the repacks take.
  Status add_variant(const layouts::QuantTensor& q, const IntqKernelTraits& traits, cuda::Stream stream);
  const Variant* find(std::uint64_t padded_rows, std::uint64_t padded_cols) const;
  cuda::intq::DeviceIntq view(const Variant& v) const;
  // The dense type the dequantize kernel writes for `layout` (nullopt: not a dense layout the kernels write).
  std::optional<cuda::intq::DenseType> dense_layout(Layout layout) const;

  const IntqProducer& producer_;
  const int device_;
  DType dense_ = DType::kF32;  // the index dtype: what kStored dequantizes to
  DType scale_ = DType::kF16;  // the scales' dtype (the packed layouts' scales part)
  int bits_ = 4;
  std::int64_t rows_ = 0, cols_ = 0, group_size_ = 0;
  std::vector<std::unique_ptr<Variant>> variants_;  // [0]: the stored padding
  std::uint32_t refused_ = 0;  // packed layouts the kernels refused (bit 1 << Layout): not read and padded again
};

}  // namespace epk::serve
