// GPU decoder for EntroPack ("lattice-rans") tensors: rANS symbol decoding, the coset-conditioned tables, the E8
// lattice inverse, the row scale and the output conversion fused into one kernel, many tensors per launch.
//
// Host-only header: daemon/ and client/ include it with the host compiler. Usage:
//   auto plan = DecodePlan::create(jobs);                 // validates every stream, builds the lookup tables (host)
//   cudaMalloc(&scratch, plan->scratch_bytes());          // caller-owned, reusable for this plan
//   upload(*plan, scratch, stream);                       // descriptors + tables into scratch, once per plan
//   decode(*plan, scratch, stream);                       // one launch; repeat as often as wanted
//   read_status(*plan, scratch, stream)                   // waits on the stream; names the first corrupt tile
// No call allocates device memory. A tile whose stream does not end at its start with every state back at 2^15 is
// reported (tensor, tile, reason); the caller must not serve a tensor of a batch whose status is not ok.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/rans/stream.h"
#include "codec/rans/tile_fault.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers

namespace epk::cuda {

using Stream = CUstream_st*;

enum class OutputFormat : std::uint32_t {
  kBf16 = 0,
  kFp16 = 1,       // clamped to +-65504 first
  kFp32 = 2,
  kFp8E4M3 = 3,    // clamped to +-448, round to nearest even, saturating
  kFp8E5M2 = 4,    // clamped to +-57344, round to nearest even, saturating
  kInt8Rowwise = 5,  // int8 values plus one fp32 scale per row: value = q * row_scale (see int8_gain below)
  kFp8E4M3Rowwise = 6,  // fp8 e4m3 values plus one fp32 scale per row (rans::RowwiseType::kF8E4M3)
};
inline constexpr int kOutputFormats = 7;
// The rowwise formats write one fp32 scale per row into DecodeJob::row_scales_dev.
inline constexpr bool is_rowwise(OutputFormat f) {
  return f == OutputFormat::kInt8Rowwise || f == OutputFormat::kFp8E4M3Rowwise;
}

std::string_view output_format_name(OutputFormat format);
std::uint32_t output_element_bytes(OutputFormat format);

// kInt8Rowwise: every decoded coordinate is p = z + c/2 with z an integer, so 2p is an integer bounded by the tables
// (bound B = largest |2p| any table allows). q = 2p when B <= 127, else q = rint(2p * 127 / B); the per-row scale is
// scale[row] * (0.5 / gain) with gain = min(1, 127 / B). Exact (lossless) whenever B <= 127. The CPU oracle of both
// rowwise formats is rans::decode_rowwise (codec/rans/decoder.h); int8_gain equals rans::rowwise_gain(kInt8).
struct Int8Gain {
  float gain = 1.0f;
  float half_over_gain = 0.5f;
};
Int8Gain int8_gain(const rans::LatticeRansStream& stream);

// The tensor's stored buffers in device memory. payload_dev must be 16-byte aligned and readable up to the next
// multiple of 8 words past its end (the decoder stages it in 16-byte chunks).
struct DeviceBuffers {
  const std::uint16_t* payload_dev = nullptr;
  const std::uint32_t* offsets_dev = nullptr;  // tiles + 1
  const std::uint32_t* states_dev = nullptr;   // tiles * 32
  const float* scales_dev = nullptr;           // rows
};

struct DecodeJob {
  std::string name;                                  // named in error messages
  const rans::LatticeRansStream* stream = nullptr;   // host view: geometry, tables and offsets (validated)
  DeviceBuffers dev;
  std::uint32_t row_begin = 0;
  std::uint32_t row_end = 0;                         // 0: all rows
  OutputFormat format = OutputFormat::kBf16;
  void* out_dev = nullptr;                           // (row_end - row_begin) x cols, row-major, 16-byte aligned
  float* row_scales_dev = nullptr;                   // rowwise formats only: row_end - row_begin floats
};

struct DecodeOptions {
  int device = -1;  // the device the plan is made for (its SM count and shared memory size); -1: the current one
};

namespace detail {
struct PlanOverrides;  // codec/cuda/decode/plan_overrides.h
}

// Written by the kernel into scratch; copy it back to read it (read_status does).
struct DecodeStatus {
  std::uint32_t bad_tiles = 0;
  std::uint32_t reserved = 0;
  std::uint64_t first_bad_inverted = 0;  // ~((tensor << 32) | tile) of the lowest corrupt tile (atomicMax)
};
static_assert(sizeof(DecodeStatus) == 16);

// The per-tile status array (one u8 per tile of the plan, after the DecodeStatus in scratch) holds rans::TileFault
// codes (codec/rans/tile_fault.h): kOk, kBadOffsets, kTruncated, kUnreadWords or kBadFinalState.

// Which kernel decodes a plan (the first that serves every job of the batch, in this order):
// - the lean kernel: every tensor at prob_bits 11 with packed tables in shared memory (the 2 and 4 bpp streams), with
//   a bf16-only store where every job is bf16, cols % 8 == 0 and cols >= 256, every row scale is 0, NaN or at least
//   2^-115 and no value can reach the bf16 clamp, else the general store of every format;
// - the general kernel with packed shared tables (prob_bits 9 and 10, or a batch of mixed prob_bits), two-level
//   shared tables (8 bpp's prob_bits 12, or values too wide to pack), or 64-bit tables read through L1 (prob_bits
//   13..15, or anything too large for shared memory).
// Each has a form for blocks of at most 24 warps (80 registers per thread) and one for up to 32 (64 registers).
class DecodePlan {
 public:
  static Result<DecodePlan> create(std::span<const DecodeJob> jobs, const DecodeOptions& options = {});
  // Tests only: force a placement, loop or work split (codec/cuda/decode/plan_overrides.h). Same validation and output.
  static Result<DecodePlan> create(std::span<const DecodeJob> jobs, const DecodeOptions& options,
                                   const detail::PlanOverrides& overrides);

  std::size_t scratch_bytes() const { return scratch_bytes_; }
  std::size_t tensors() const { return job_names_.size(); }
  std::size_t tiles() const { return total_tiles_; }
  std::size_t blocks() const { return blocks_; }
  std::uint32_t warps_per_block() const { return warps_per_block_; }
  int lut_mode() const { return lut_mode_; }      // detail::LutMode
  int lean_pb() const { return lean_pb_; }        // prob_bits of the lean kernel in use; 0: the general kernel
  bool lean_bf16() const { return lean_bf16_; }   // the lean kernel's bf16-only store
  std::string kernel_name() const;                // e.g. "lean pb11 bf16", "general two-level" (for reports)
  std::size_t shared_bytes_per_block() const { return shared_bytes_; }
  std::uint64_t output_bytes() const { return output_bytes_; }
  std::uint64_t compressed_bytes() const { return compressed_bytes_; }
  const std::string& job_name(std::size_t i) const { return job_names_[i]; }
  // Per-tensor first tile index in the status array, and its tile count.
  std::uint32_t tile_base(std::size_t tensor) const { return tile_base_[tensor]; }
  std::uint32_t first_tile(std::size_t tensor) const { return first_tile_[tensor]; }

  // The host image of scratch's constant part (descriptors, work items, lookup tables); upload copies it.
  const std::vector<std::byte>& image() const { return image_; }
  std::size_t status_offset() const { return status_offset_; }
  std::size_t tile_status_offset() const { return tile_status_offset_; }
  std::size_t descs_offset() const { return descs_offset_; }
  std::size_t items_offset() const { return items_offset_; }

 private:
  std::vector<std::string> job_names_;
  std::vector<std::uint32_t> tile_base_;
  std::vector<std::uint32_t> first_tile_;
  std::vector<std::byte> image_;  // [descs][items][luts]; status lives after it
  std::size_t descs_offset_ = 0, items_offset_ = 0, status_offset_ = 0, tile_status_offset_ = 0;
  std::size_t scratch_bytes_ = 0, total_tiles_ = 0, blocks_ = 0, shared_bytes_ = 0;
  std::uint64_t output_bytes_ = 0, compressed_bytes_ = 0;
  std::uint32_t warps_per_block_ = 0;
  int lut_mode_ = 0;
  int lean_pb_ = 0;
  bool lean_bf16_ = false;
};

// Copies the plan's image into scratch (stream-ordered; the plan must outlive the copy: upload waits for it).
Status upload(const DecodePlan& plan, void* scratch_dev, std::size_t scratch_bytes, Stream stream);
// Resets the status and launches the decode kernel on stream. Returns launch failures only; corrupt tiles are
// reported by read_status.
Status decode(const DecodePlan& plan, void* scratch_dev, Stream stream);
// Waits for stream, copies the status back and returns kCorruptTile naming the first bad tensor and tile, if any.
Status read_status(const DecodePlan& plan, const void* scratch_dev, Stream stream);
// Every corrupt tile of the last decode (tensor: the job's index in the plan), after waiting for stream.
Result<std::vector<rans::TileFaultRecord>> read_tile_faults(const DecodePlan& plan, const void* scratch_dev,
                                                            Stream stream);

// Number of CUDA devices (0 where there is no driver or no GPU): tests use it to skip.
int device_count();

}  // namespace epk::cuda
