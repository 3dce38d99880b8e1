// `--device cuda` for epk decompress and verify: one lattice-rans tensor decoded by codec/cuda's fused decoder
// (DecodePlan / upload / decode / read_tile_faults). Built with CUDA only where EPK_HAVE_CUDA; elsewhere every call
// says that this build has no CUDA.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/rans/stream.h"

namespace epk::cli {

enum class Device { kCpu, kCuda };

// "cpu", "cuda" or "" (the default: cuda when a GPU is present, else cpu). Errors: an unknown name, or cuda asked for
// where this build has no CUDA or no GPU is visible (a message that says which).
Result<Device> choose_device(std::string_view name);

struct GpuTileFault {
  std::uint32_t tile = 0;
  std::string reason;
};

// Decodes s into dst (rows x cols of out: BF16, F16, F32, F8_E4M3 or F8_E5M2). Corrupt tiles: appended to faults
// when given, and the call returns kCorruptTile naming the tensor and first tile.
Status gpu_decode(const rans::LatticeRansStream& s, std::string_view name, DType out, std::span<std::uint8_t> dst,
                  std::vector<GpuTileFault>* faults = nullptr);

}  // namespace epk::cli
