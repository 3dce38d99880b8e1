// One stored tensor checked as `epk verify` checks it: its buffer checksums; every tile of a lattice-rans stream
// decoded (corrupt tiles named with their reason), every other encoding decoded as decompress would; and, against
// the source tensor, the relative L2 error (and, with calibration statistics, the H-weighted one) held to the
// error ceiling at the tensor's target rate, with a reconstruction of all zeros where the source is not refused.
// Problems are messages naming the file and tensor; the tensor is sound when there are none.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/rans/tile_fault.h"
#include "codec/rate/calibration.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/serve/producer.h"

namespace epk::describe {

struct TensorCheck {
  std::string name;
  std::string encoding;
  std::vector<std::string> problems;
  std::uint32_t tiles = 0;
  std::vector<std::pair<std::uint32_t, std::string>> bad_tiles;
  std::uint64_t weights = 0;
  std::uint64_t stored = 0;
  double target = 0;
  std::optional<double> rel_l2;
  std::optional<double> max_error;  // the ceiling rel_l2 (h_rel for a calibrated tensor) was held to
  bool calibrated = false;          // rounded with calibration statistics (params.encoder.calibrated)
  std::optional<double> h_rel;      // with calibration statistics: the H-weighted relative error
};

// A tensor decoded to float32 on a GPU into dst (rows x cols floats): true when a device path wrote it, false when
// none covers it; corrupt tiles appended to *faults.
using GpuDecodeF32 = std::function<Result<bool>(const serve::Producer& p, std::span<std::uint8_t> dst,
                                                std::vector<rans::TileFaultRecord>* faults)>;

struct CheckOptions {
  const safetensors::Checkpoint* source = nullptr;  // the source checkpoint (--against), or none
  std::string source_name;                          // its path, in messages
  const rate::CalibrationSet* calibration = nullptr;
  std::optional<double> max_error;  // the ceiling; nullopt: rate::default_max_rel_l2 at the tensor's target
  int threads = 1;
  GpuDecodeF32 gpu;  // decodes lattice-rans streams when set (else the CPU decoder)
};

TensorCheck check_tensor(const container::Reader& reader, const container::TensorEntry& t, const CheckOptions& o);

// sqrt(sum (x - ref)^2 / sum ref^2); 0 when both are all zero, infinity when only ref is.
double relative_l2(std::span<const float> x, std::span<const float> ref);
// The tensor's elements as float32 (F32, BF16, F16, F8_E4M3, F8_E5M2, I8); kUnsupported naming it otherwise.
Result<std::vector<float>> source_f32(const safetensors::TensorView& t);

}  // namespace epk::describe
