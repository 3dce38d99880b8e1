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

// Where the lookup tables live while decoding. kShared: 32-bit entries (16 << prob_bits per tensor) in shared memory,
// which needs prob_bits <= 11 and values within 31 - 2 prob_bits signed bits; kTwoLevel: a 16-bit symbol index per
// slot plus a per-symbol (freq, cdf) table in shared memory (prob_bits 12 fits); kGlobal: the packed entries read
// through L1; kWide: 64-bit entries through L1, for any prob_bits and symbol range. kAuto takes the first that fits
// in the order kShared, kTwoLevel, kGlobal, kWide (all four verified bit-exact on the H200, docs/NOTES.md).
enum class LutPlacement : std::uint8_t { kAuto, kShared, kGlobal, kWide, kTwoLevel };

struct DecodeOptions {
  LutPlacement lut = LutPlacement::kAuto;
  std::uint32_t max_warps_per_block = 32;  // one warp decodes one tile at a time
  bool stage_words = true;                 // stage each tile's words in shared memory (cp.async) before decoding
  int device = -1;                         // -1: the current device
  // Staged words only: every lane loads a word speculatively before the renormalisation vote and needing lanes take
  // theirs with a shuffle (shorter state chain, one more instruction per symbol). Bit-exact, but measured no faster
  // on the H200 (95.2 vs 95.2 us at 4 bpp, 136.4 vs 137.7 us at 2 bpp; docs/NOTES.md), so off by default.
  bool shuffle_words = false;
  // Staged words with shared tables (packed or two-level) only. 1: the group loop with less per-group work
  // (placement stepped from the previous group, ring refilled 16 chunks at a time); 2: that, and 80 registers per
  // thread instead of 64 where a block has at most 24 warps. 0: the run-2 loop. Same output bit for bit; 2 measured
  // fastest on the H200 (10240x3840: 95.8 -> 93.3 us at 4 bpp, 138.3 -> 130.8 us at 2 bpp; docs/NOTES.md).
  int fast_groups = 2;
  // The lean group loop (decode_lean.cuh): fewer instructions per symbol and per group. Taken where the plan has
  // packed shared tables, staged words without shuffling and every tensor at prob_bits 11 (80 registers per thread
  // for blocks of at most 24 warps, else 64); with a bf16-only store where every job is bf16 with cols % 8 == 0 and
  // cols >= 256, every row scale is 0, NaN or at least 2^-115 and no value can reach the bf16 clamp. Elsewhere
  // the plan falls back to the loop fast_groups picks (DecodePlan::lean_pb() says which ran).
  // Bit-exact in every GPU test; H200, 10240x3840 to bf16: 93.9 -> 80.6 us at 4 bpp, 131.5 -> 116.2 us at 2 bpp,
  // 14336x4096 114.1 -> 95.7 us (docs/NOTES.md, runs 6 and 7), so on by default; 73-75 us at 4 bpp since the fourth
  // session's changes (tables by cp.async, branch-free groups with the store deferred into the next group's chain).
  bool lean = true;
  // Where the lean loop is taken: split each block into decode warps (one tile each, the symbol chain only) and
  // reconstruction warps (placement, scale, conversion, store), handing groups over through shared memory
  // (decode_ws.cuh). Needs the decode warps plus at least a third as many reconstruction warps within 32 warps and
  // two 1.2 KiB slots per decode warp in shared memory; elsewhere the lean loop runs as it is
  // (DecodePlan::ws_recon_warps() says which ran). Bit-exact in every GPU test; H200 (docs/NOTES.md, runs 8 and 9):
  // slower than the lean loop at 10240x3840 (4 bpp 84.8-87.2 vs 79.2-80.0 us, 2 bpp 122.8 vs 115.9 us: 23% more
  // instructions), 3% faster at 4096x4096 (68.4-70.4 vs 70.6-72.4 us), so off by default. Since the lean loop's
  // groups lost their branches (fourth session) it is slower everywhere: 84.1-86.1 vs 73.6 us and 64.2-65.2 vs 56.2.
  bool warp_specialised = false;
  // Reconstruction warps per block at most (0: as many as fit, up to one per decode warp). Tests set it low so that
  // one reconstruction warp serves several decode warps on small tensors.
  std::uint32_t ws_max_recon_warps = 0;
  // Tiles per block at least (the work split otherwise spreads the tiles over every SM, one per block for small
  // tensors). Tests use it to run many warps per block on small tensors; no effect on results.
  std::uint32_t min_tiles_per_block = 1;
};

// Written by the kernel into scratch; copy it back to read it (read_status does).
struct DecodeStatus {
  std::uint32_t bad_tiles = 0;
  std::uint32_t reserved = 0;
  std::uint64_t first_bad_inverted = 0;  // ~((tensor << 32) | tile) of the lowest corrupt tile (atomicMax)
};
static_assert(sizeof(DecodeStatus) == 16);

// Reasons in the per-tile status array (one u8 per tile of the plan, after the DecodeStatus in scratch).
enum class TileFault : std::uint8_t {
  kOk = 0,
  kBadOffsets = 1,    // offsets[t] > offsets[t+1] or past the payload
  kUnderflow = 2,     // the decoder needed a word before the tile's first word
  kNotDrained = 3,    // words left over at the end
  kBadFinalState = 4, // a lane did not end at 2^15
};
std::string_view tile_fault_name(TileFault fault);

class DecodePlan {
 public:
  static Result<DecodePlan> create(std::span<const DecodeJob> jobs, const DecodeOptions& options = {});

  std::size_t scratch_bytes() const { return scratch_bytes_; }
  std::size_t tensors() const { return job_names_.size(); }
  std::size_t tiles() const { return total_tiles_; }
  std::size_t blocks() const { return blocks_; }
  std::uint32_t warps_per_block() const { return warps_per_block_; }
  bool shared_lut() const { return lut_mode_ == 0; }
  int lut_mode() const { return lut_mode_; }  // detail::LutMode
  bool stage_words() const { return stage_words_; }
  bool shuffle_words() const { return shuffle_words_; }
  int fast_level() const { return fast_level_; }  // 0: off; 1: fast groups; 2: fast groups, 80 registers
  int lean_pb() const { return lean_pb_; }        // prob_bits of the lean kernel in use; 0: not lean
  bool lean_bf16() const { return lean_bf16_; }   // the lean kernel's bf16-only store
  // Warp-specialised lean kernel: its reconstruction warps per block (0: not taken); the block then has
  // warps_per_block() decode warps plus these.
  std::uint32_t ws_recon_warps() const { return ws_recon_warps_; }
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
  bool stage_words_ = true;
  bool shuffle_words_ = false;
  int fast_level_ = 0;
  int lean_pb_ = 0;
  bool lean_bf16_ = false;
  std::uint32_t ws_recon_warps_ = 0;
};

// Copies the plan's image into scratch (stream-ordered; the plan must outlive the copy: upload waits for it).
Status upload(const DecodePlan& plan, void* scratch_dev, std::size_t scratch_bytes, Stream stream);
// Resets the status and launches the decode kernel on stream. Returns launch failures only; corrupt tiles are
// reported by read_status.
Status decode(const DecodePlan& plan, void* scratch_dev, Stream stream);
// Waits for stream, copies the status back and returns kCorruptTile naming the first bad tensor and tile, if any.
Status read_status(const DecodePlan& plan, const void* scratch_dev, Stream stream);
struct TileFaultRecord {
  std::uint32_t tensor = 0;
  std::uint32_t tile = 0;  // tile index within the tensor
  TileFault fault = TileFault::kOk;
};
// Every corrupt tile of the last decode, after waiting for stream.
Result<std::vector<TileFaultRecord>> read_tile_faults(const DecodePlan& plan, const void* scratch_dev, Stream stream);

// Number of CUDA devices (0 where there is no driver or no GPU): tests use it to skip.
int device_count();

}  // namespace epk::cuda
