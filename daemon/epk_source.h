// A ModelSource over a mapped .epk file: `epkd --model NAME=FILE.epk` opens models through open_epk_source().
//
// Open validates once: the container's header and index (container::Reader) and every lattice-rans tensor's params,
// buffers and stream tables (rans::from_container); a file that fails any of it is refused with an error naming the
// file, tensor and field, and no tensor data is read until a tensor is asked for. produce() decodes through the one
// per-encoding dispatch (codec/decode/decode_tensor.h) and then checks the tensor's buffer checksums (XXH3): a corrupt
// tile is reported by tile number, and corrupt bytes that still decode fail their checksum; neither is ever served.
//
// Serving layouts (what decode::can_decode allows):
//   raw tensors          stored (the bytes as stored); dense:{bf16,fp16,fp32} from F32, F16, BF16, F8_E4M3, F8_E5M2
//                        (and I8 as integers); narrowing rounds to nearest even, overflow to infinity (torch's .to())
//   lattice-rans tensors dense:{bf16,fp16,fp32} through the CPU decoder; stored is the dense form in the tensor's
//                        source dtype (what the reference's decompress returns); rowwise:{int8,fp8_e4m3} (2-D):
//                        values then per-row fp32 scales in one slot (shm/layout.h), rans::decode_rowwise's output
//   intq tensors         dense:{bf16,fp16,fp32} and stored (dense in the source dtype) through decode_tensor, bit for
//                        bit what `epk decompress` writes; kind "int" also gptq, gptq-v2, awq, marlin: the CPU
//                        writers' parts in one slot (daemon/intq_serving.h, shm/layout.h); params checked at open
//
// With `resident` (config resident_compressed = true) open() also reads every tensor section into epkd's memory and
// checksums it there (daemon/resident_model.h); produce() then decodes from that memory and the file is unmapped.
// Without it, tensors are read through the file's map when asked for.
#pragma once

#include <memory>
#include <string>

#include "daemon/model_source.h"
#include "daemon/resident_model.h"

namespace epk::daemon {

struct EpkSourceOptions {
  bool resident = false;
  ResidentOptions resident_options;
};

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path, const EpkSourceOptions& options = {});

}  // namespace epk::daemon
