// The serving layer's device half for lattice-rans tensors (codec/serve/lattice_rans_producer.h): which layouts the
// GPU decoder writes, the uploads a decode needs (the stored buffers at their tier places), and a plan that enqueues
// the decode of one layout into a given device address on a given stream. The device tier (device_tier.h), which
// epkd, libepk's client-side decode and `epk decompress/verify --device cuda` call, plans through it, so they write
// the same bytes for the same request: the CPU producer's, bit for bit.
//
//   auto at = cuda::tier_layout(streams);                         // where each tensor's inputs go in one region
//   for (const Upload& u : lattice_uploads(p->stream(), *at.tensors[i])) copy(base + u.offset, u.host);
//   auto plan = LatticeDevicePlan::create(s, name, format, 0, rows, cuda::tier_buffers(base, at), device);
//   alloc(plan->scratch_bytes()); plan->upload(scratch, stream);  // once
//   plan->enqueue(dst, scratch, stream);                          // as often as wanted, into any slot
//   sync(stream); plan->check(scratch, stream);                   // kCorruptTile naming the tile, if any
//
// No call allocates device memory (the caller owns the region, the scratch and the column work buffer); create()
// allocates 32 bytes of pinned host memory, which enqueue() copies from. Host-only header, built with CUDA only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/tier_layout.h"
#include "codec/serve/lattice_rans_producer.h"
#include "codec/serve/layout.h"
#include "codec/serve/shard.h"

namespace epk::serve {

// The GPU decoder's output format for `layout` of a lattice-rans tensor whose source dtype is `source`; nullopt where
// it writes no such layout (epkd produces it on the host; libepk refuses it). kStored asks for the source dtype.
std::optional<cuda::OutputFormat> device_format(Layout layout, DType source);

// The bytes a decode of `rows` rows x `cols` columns writes in `format`: rows * cols elements, or, for rowwise
// formats, the values, the zeroed gap and the per-row fp32 scales (layout.h).
std::uint64_t device_output_bytes(cuda::OutputFormat format, std::uint64_t rows, std::uint64_t cols);

// A host span and where it goes in the device region the caller owns (bytes the uploads do not cover are zero).
struct Upload {
  std::span<const std::byte> host;
  std::uint64_t offset = 0;
};
// The four stored buffers of s (payload, offsets, states, scales) at placement `at` (cuda::tier_layout's).
std::array<Upload, 4> lattice_uploads(const rans::LatticeRansStream& s, const cuda::TierPlacement& at);

// One job of a batched decode (libepk plans several tensors into one launch): the whole tensor p produces in
// `layout`, from `inputs`, written at out_dev (16-byte aligned, device_output_bytes long); a rowwise layout's gap
// between values and scales, which the caller zeroes on its stream before the decode, is [gap_at, gap_at +
// gap_bytes). kUnsupported naming the tensor for a layout the decoder does not write.
struct LatticeJob {
  cuda::DecodeJob job;
  std::uint64_t bytes = 0;  // what the decode writes at out_dev
  DeviceAddress gap_at;
  std::uint64_t gap_bytes = 0;
};
Result<LatticeJob> lattice_job(const LatticeRansProducer& p, Layout layout, const cuda::DeviceBuffers& inputs,
                               DeviceAddress out_dev);

class LatticeDevicePlan {
 public:
  // The decode of rows [row_begin, row_end) of stream s (tensor `name`, in messages) into `format`, reading the
  // stored buffers at `inputs` on device `device`. kInvalidArgument for an empty or out-of-range row range.
  static Result<LatticeDevicePlan> create(const rans::LatticeRansStream& s, std::string_view name,
                                          cuda::OutputFormat format, std::uint32_t row_begin, std::uint32_t row_end,
                                          const cuda::DeviceBuffers& inputs, int device);

  LatticeDevicePlan(LatticeDevicePlan&&) noexcept = default;
  LatticeDevicePlan& operator=(LatticeDevicePlan&&) noexcept = default;

  cuda::OutputFormat format() const { return format_; }
  std::uint32_t row_begin() const { return row_begin_; }
  std::uint32_t row_end() const { return row_end_; }
  bool all_rows() const { return row_begin_ == 0 && row_end_ == rows_; }
  // Device scratch the caller allocates (256-byte aligned) and fills once with upload().
  std::size_t scratch_bytes() const { return plan_.scratch_bytes(); }
  // What enqueue() writes at dst.
  std::uint64_t output_bytes() const { return device_output_bytes(format_, row_end_ - row_begin_, cols_); }
  const cuda::DecodePlan& decode_plan() const { return plan_; }

  Status upload(void* scratch_dev, cuda::Stream stream) const;
  // Writes the layout into [dst, dst + output_bytes()) on stream (dst 16-byte aligned): the rowwise gap zeroed, the
  // plan pointed at dst, one kernel, and the decode's status copied back to host memory for check(). Launch errors
  // only. Stream-ordered; a next enqueue() of this plan must wait until this one's copies have run (the stream
  // synchronised past them), since both read and write the plan's one pinned block.
  Status enqueue(DeviceAddress dst, void* scratch_dev, cuda::Stream stream);
  // A column shard [cols.begin, cols.end) of an all-rows plan: the whole output decoded into `work_dev` (work_bytes()
  // long, the caller's, 16-byte aligned), then the shard's columns copied row by row into [dst, dst + dst_bytes)
  // (rowwise formats: every row's scale after the values and their zeroed gap). Every tile is decoded: a column
  // shard saves the slot's bytes, not the decode.
  std::uint64_t work_bytes() const { return output_bytes(); }
  static std::uint64_t column_shard_bytes(cuda::OutputFormat format, std::uint64_t rows, const ShardRange& cols);
  Status enqueue_columns(const ShardRange& cols, DeviceAddress dst, std::uint64_t dst_bytes, DeviceAddress work_dev,
                         void* scratch_dev, cuda::Stream stream);
  // After the stream has passed the last enqueue: kCorruptTile naming the tensor and its first corrupt tile, if any
  // (the per-tile status is read again for the message only when the copied status says a tile is bad).
  Status check(const void* scratch_dev, cuda::Stream stream) const;

 private:
  struct PinnedFree {
    void operator()(void* p) const;
  };
  LatticeDevicePlan() = default;

  cuda::DecodePlan plan_;
  cuda::OutputFormat format_ = cuda::OutputFormat::kBf16;
  std::uint32_t row_begin_ = 0, row_end_ = 0, rows_ = 0, cols_ = 0;
  // Pinned: [0, 16) the output addresses enqueue() copies into the plan's descriptor, [16, 32) the DecodeStatus.
  std::unique_ptr<std::uint8_t, PinnedFree> pinned_;
};

}  // namespace epk::serve
