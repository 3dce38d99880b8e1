// A ModelSource over a mapped .epk file: `epkd --model NAME=FILE.epk` opens models through open_epk_source().
//
// Open validates once: the container's header and index (container::Reader), and every lattice-rans stream's params,
// buffers and tables (daemon/epk_decode.h); a file that fails any of it is refused with an error naming the file,
// tensor and field, and nothing else is read until a tensor is asked for. produce() checks the tensor's buffer
// checksums (XXH3) on every decode, so corrupt bytes are an error, never served.
//
// Serving layouts:
//   raw tensors          stored (the bytes as stored); dense:{bf16,fp16,fp32} from F32, F16, BF16, F64, F8_E4M3 and
//                        F8_E5M2 (narrowing rounds to nearest even, as torch's .to())
//   lattice-rans tensors dense:{bf16,fp16,fp32} through the CPU decoder; stored is the dense form in the tensor's
//                        source dtype (what the reference's decompress returns)
//   intq tensors         not served yet (kUnsupported)
#pragma once

#include <memory>
#include <string>

#include "daemon/model_source.h"

namespace epk::daemon {

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path);

}  // namespace epk::daemon
