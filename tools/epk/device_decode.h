// `--device cuda` for epk decompress and verify: one tensor written on the GPU by the serving layer's device tier
// (codec/serve/device_tier.h), where a device path writes it in the asked dtype. Built with CUDA only where
// EPK_HAVE_CUDA; elsewhere every call says that this build has no CUDA.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/rans/tile_fault.h"
#include "codec/serve/producer.h"

namespace epk::cli {

enum class Device { kCpu, kCuda };

// "cpu", "cuda" or "" (the default: cuda when a GPU is present, else cpu). Errors: an unknown name, or cuda asked for
// where this build has no CUDA or no GPU is visible (a message that says which).
Result<Device> choose_device(std::string_view name);

// Writes the tensor p serves into dst as dense `out` (BF16, F16, F32, F8_E4M3 or F8_E5M2) on the current GPU:
// true when a device path wrote it, false when none covers it (nothing written: the CPU decodes it). Corrupt tiles:
// appended to faults when given, and the call returns kCorruptTile naming the tensor and first tile. The caller has
// checked the tensor's buffers (Reader::verify).
Result<bool> gpu_decode(const serve::Producer& p, DType out, std::span<std::uint8_t> dst,
                        std::vector<rans::TileFaultRecord>* faults = nullptr);

}  // namespace epk::cli
