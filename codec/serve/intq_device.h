// The device half of intq "int" tensors in the serving layer (codec/serve/intq_producer.h): which serving layouts
// the intq kernels (codec/cuda/intq/intq_repack.h) write for a tensor, decided on the host from the logical tensor so that
// a refusal costs no upload, and the padding they read it in. The device tier (device_tier.h, intq_device_form.h)
// takes the kernels where this says they write a layout and the host producer elsewhere, which answers with the same bytes or
// the same refusal: the kernels never take a case the CPU writers refuse (a GPTQ v1 zero point of 0, a padding row
// sorting into Marlin's logical rows) or do not cover (AWQ of act-order groups, a group count the params disagree
// with). Host code only.
#pragma once

#include <cstdint>
#include <optional>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/serve/layout.h"

namespace epk::serve {

// What decides which packed layouts the kernels write from one padding of a tensor.
struct IntqKernelTraits {
  std::int64_t padded_rows = 0, padded_cols = 0, num_groups = 0;
  bool static_groups = true, has_perm = false;
  bool zero_point_zero = false;       // a zero point of 0 somewhere (GPTQ v1 cannot store it)
  bool padding_sorts_inside = false;  // sort_groups would refuse it (Marlin act-order)
};
IntqKernelTraits intq_kernel_traits(const layouts::QuantTensor& q);

// Whether the kernels write packed `layout` (its slot's geometry g, from packed_plan) from a padding with traits v.
bool intq_kernels_write(const IntqKernelTraits& v, Layout layout, const PackedGeometry& g);

// The dense element type the dequantize kernel writes for `layout` of a tensor whose index dtype is `index`: bf16 or
// fp16 (stored: the index dtype, when it is one of them); nullopt where it writes none (fp32: the host producer).
std::optional<DType> intq_kernel_dense(Layout layout, DType index);

// q padded as write_layout pads it for packed `layout` (the form the repack kernels read).
Status pad_for_layout(layouts::QuantTensor& q, Layout layout);

}  // namespace epk::serve
