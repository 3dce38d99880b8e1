// intq "int" tensors (FORMAT.md 11) on a device lane (issue 6): their stored logical form kept in device memory and
// the serving layouts codec/cuda's kernels write from it (codec/cuda/intq_repack.h), bit for bit the CPU path's
// (codec/serve/intq_producer.h for the packed layouts, decode_tensor/dequantize_intq for the dense ones).
//
// - At add_model the tensor is read once (serve::IntqProducer::read: rANS-coded codes are decoded there) and its codes
//   (packed LSB-first, as FORMAT.md stores packed codes), float32 scales, packed zeros (asymmetric only), g_idx
//   (scattered groups only), perm, and the act-order row maps (invert_perm / group_order, computed on the device) are
//   uploaded: the "variant" of the stored padding. A packed layout needing other padding (write_layout pads to the
//   layout's multiples first) gets its own variant, padded on the host with layouts::pad_to on its first use and then
//   kept, as the lattice decode plans are.
// - produce() issues the kernels for one slot on the lane's stream, the gaps between parts zeroed, and nothing else:
//   the caller records the ring event after it. Where the kernels do not cover a case (the rule is the serving
//   layer's, codec/serve/intq_device.h) `covers` returns false before anything is issued, and the caller takes the
//   CPU path: fp32 dense, fp32 scales, a GPTQ v1 zero point of 0 and a padding row sorting into Marlin's logical rows
//   (both refused by the CPU writers with their own message), AWQ of scattered groups, and a Marlin part count the
//   params disagree with.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/serve/intq_device.h"
#include "codec/serve/intq_producer.h"
#include "shm/cuda_event.h"
#include "shm/layout.h"

namespace epk::daemon::gpu_intq {

// One padding of a tensor's logical form in device memory.
struct Variant : serve::IntqKernelTraits {
  shm::DeviceBuffer codes, scales, zeros, g_idx, perm, inv_perm, order;
  std::uint64_t bytes = 0;
};

struct Tensor {
  std::string name;
  DType dense = DType::kF32;     // the index dtype: what kStored dequantizes to
  DType scale = DType::kF16;     // the scales' dtype (the packed layouts' scales part)
  int bits = 4;
  std::int64_t rows = 0, cols = 0, group_size = 0;
  std::vector<std::unique_ptr<Variant>> variants;  // [0]: the stored padding. GPU thread only after add_model
  std::uint32_t refused = 0;  // packed layouts the kernels refused (bit 1 << shm::Layout): not read and padded again
};

// Reads the tensor `p` produces (an intq "int" tensor) and uploads its stored variant on `stream` (synchronised
// before it returns: the host copies it uploads from are its own).
Result<std::unique_ptr<Tensor>> upload(const serve::IntqProducer& p, int device, const shm::CudaStream& stream);

// Whether the kernels write `layout` for t (false: the CPU path). For packed layouts it may add a variant (reading
// the tensor again); *added receives the device bytes that took.
Result<bool> covers(Tensor& t, const serve::IntqProducer& p, shm::Layout layout, int device,
                    const shm::CudaStream& stream, std::uint64_t* added);

// Writes `layout` of t into the device range [dst, dst + bytes) on `stream`; covers() returned true for it.
Status produce(const Tensor& t, const serve::IntqProducer& p, shm::Layout layout, std::uint64_t dst,
               std::uint64_t bytes, int device, const shm::CudaStream& stream);

}  // namespace epk::daemon::gpu_intq
