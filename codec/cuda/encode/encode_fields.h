// The device encoder's fields: a set of quantised E8 fields on the device (the tensor's or the sample's), the
// quantisation that fills it (folding each table's range and the coset-1 count on the way), and the histograms
// model::count_fields would count, read back into model::FieldCounts exactly as count_fields builds them.
// Host-only; one stream, one caller at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "codec/common/result.h"
#include "codec/cuda/encode/encode_device.h"
#include "codec/cuda/encode/encode_kernels.h"
#include "codec/model/tables.h"

namespace epk::cuda {

// A set of fields on the device and what the last quantisation found of its ranges.
struct FieldSet {
  DeviceBuffer coset, fields;
  std::uint64_t n = 0;
  int range[2 * enc::kTables] = {};
  unsigned long long ones = 0;
};

// Rows of source weights to quantise: vector i is vector i % vpr of row i / vpr, x / rms[row] / scale.
struct QuantizeSource {
  const void* data = nullptr;
  enc::Source dtype = enc::Source::kF32;
  std::uint32_t cols = 0, vpr = 0;
  const float* rms = nullptr;  // on the device
};

class FieldCounter {
 public:
  explicit FieldCounter(cudaStream_t stream) : stream_(stream) {}

  // Quantises fs.n vectors of src at scale into fs and reads back the table ranges and the coset-1 count.
  Status quantize(FieldSet& fs, const QuantizeSource& src, float scale);
  // model::count_fields of fs, from its ranges and a device histogram.
  Result<model::FieldCounts> counts(const FieldSet& fs);
  // quantize() then counts() with one stream sync where the histogram's layout fits kHistogramPrefix bins (a
  // second otherwise): the layout is computed on the device from the ranges (launch_histogram_layout) and checked
  // against the host's. The sample search runs this at each step.
  Result<model::FieldCounts> quantize_counts(FieldSet& fs, const QuantizeSource& src, float scale);

 private:
  // Starts quantize(): the ranges and the coset-1 count folded into range_ on the device.
  Status start_quantize(FieldSet& fs, const QuantizeSource& src, float scale);
  void take_ranges(FieldSet& fs) const;

  cudaStream_t stream_;
  // range_ holds the table ranges (kTables pairs of int) and, at kOnesAt, the coset-1 count; lo_base_ the
  // histogram's lo[kTables], base[kTables] and its bins.
  DeviceBuffer range_, lo_base_, hist_;
  PinnedBuffer pin_range_, pin_lo_base_, pin_hist_;
  bool hist_cleared_ = false;  // hist_ holds its largest size, zeroed
};

}  // namespace epk::cuda
