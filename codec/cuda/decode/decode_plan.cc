// Host side of the GPU decoder: validates every stream against its own sizes, builds the packed lookup tables and
// lays out scratch: [tensor descriptors][work items][tables][status][per-tile status].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "codec/common/bytes.h"
#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/decode_launch.h"
#include "codec/cuda/decode/plan_overrides.h"
#include "codec/rans/decoder.h"

namespace epk::cuda {
namespace {

using detail::kLutTables;
using detail::TensorDesc;
using detail::WorkItem;

Error bad(const DecodeJob& job, const std::string& what) {
  return make_error(ErrorCode::kBadInput, "tensor '" + job.name + "': " + what);
}

std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

struct Checked {
  std::uint32_t vecs_per_row = 0;
  std::uint64_t vectors = 0;
  std::uint32_t tile_vectors = 0;
  std::uint32_t tiles = 0;
  std::uint32_t coset_f0 = 0;
  bool packs = true;  // every field value fits a packed 32-bit entry
  std::uint32_t total_symbols = 0;  // over tables 1..16
};

Result<Checked> validate(const DecodeJob& job) {
  if (job.stream == nullptr) return bad(job, "no stream");
  const rans::LatticeRansStream& s = *job.stream;
  Checked c;
  if (s.rows == 0 || s.cols == 0) return bad(job, "empty shape");
  if (s.padded_cols % 8 != 0 || s.padded_cols < s.cols || s.padded_cols - s.cols >= 8) {
    return bad(job, "layout padded_cols " + std::to_string(s.padded_cols) + " does not pad cols " +
                        std::to_string(s.cols) + " to a multiple of 8");
  }
  if (s.prob_bits < 9 || s.prob_bits > 15) return bad(job, "layout prob_bits " + std::to_string(s.prob_bits));
  if (s.tile_symbols == 0) return bad(job, "layout tile_symbols is 0");
  c.vecs_per_row = s.padded_cols / 8;
  c.vectors = std::uint64_t{s.rows} * c.vecs_per_row;
  if (c.vectors > (std::uint64_t{1} << 32) - 64) return bad(job, "more than 2^32 - 64 vectors");
  c.tile_vectors = rans::vectors_per_tile(s.tile_symbols);
  const std::uint64_t tiles = rans::tiles_for_vectors(c.vectors, s.tile_symbols);
  if (tiles >= (std::uint64_t{1} << 31)) return bad(job, "too many tiles");
  c.tiles = static_cast<std::uint32_t>(tiles);
  if (s.offsets.size() != std::size_t{c.tiles} + 1) {
    return bad(job, "offsets has " + std::to_string(s.offsets.size()) + " entries, expected " +
                        std::to_string(c.tiles + 1));
  }
  if (s.states.size() != std::size_t{c.tiles} * rans::kLanes) {
    return bad(job, "states has " + std::to_string(s.states.size()) + " entries, expected " +
                        std::to_string(std::size_t{c.tiles} * rans::kLanes));
  }
  if (s.scales.size() != s.rows) return bad(job, "scales has " + std::to_string(s.scales.size()) + " entries");
  if (s.tables.size() != rans::kTables) return bad(job, "stream_meta has " + std::to_string(s.tables.size()) + " rows");
  if (s.payload.size() >= (std::uint64_t{1} << 31) - 8) return bad(job, "payload of 2^31 words or more");
  for (std::uint32_t t = 0; t < c.tiles; ++t) {
    if (s.offsets[t] > s.offsets[t + 1]) return bad(job, "offsets[" + std::to_string(t) + "] decreases");
  }
  if (s.offsets.back() > s.payload.size()) {
    return bad(job, "offsets end " + std::to_string(s.offsets.back()) + " past payload of " +
                        std::to_string(s.payload.size()) + " words");
  }
  const std::uint32_t m = 1u << s.prob_bits;
  for (int t = 0; t < rans::kTables; ++t) {
    const rans::TableMeta& tm = s.tables[t];
    const std::string where = "stream_meta[" + std::to_string(t) + "]";
    if (tm.alphabet < 0 || tm.freq_offset < 0 || static_cast<std::uint64_t>(tm.alphabet) > m) {
      return bad(job, where + " alphabet/offset out of range");
    }
    if (static_cast<std::uint64_t>(tm.freq_offset) + static_cast<std::uint64_t>(tm.alphabet) > s.freq_tables.size()) {
      return bad(job, where + " runs past freq_tables");
    }
    if (tm.alphabet == 0) {
      if (t == 0) return bad(job, where + " (coset) is empty");
      continue;
    }
    std::uint64_t sum = 0;
    for (int i = 0; i < tm.alphabet; ++i) sum += s.freq_tables[tm.freq_offset + i];
    if (t > 0) c.total_symbols += static_cast<std::uint32_t>(tm.alphabet);
    if (sum != m) return bad(job, where + " frequencies sum to " + std::to_string(sum) + ", not " + std::to_string(m));
    const std::int64_t lo = tm.sym_min;
    const std::int64_t hi = lo + tm.alphabet - 1;
    if (t == 0) {
      if (lo < 0 || hi > 1) return bad(job, where + " coset symbols outside {0, 1}");
      c.coset_f0 = lo == 1 ? 0u : s.freq_tables[tm.freq_offset];
    } else if (!detail::packed_value_fits(lo, s.prob_bits) || !detail::packed_value_fits(hi, s.prob_bits)) {
      c.packs = false;
    }
  }
  return c;
}

// bf16: the CPU decoder clamps to the finite range; only needed where |p| * scale can pass it (B/2 + 1 bounds |p|,
// B the rowwise gain's bound on the doubled lattice values).
bool bf16_clamp_needed(const rans::LatticeRansStream& s) {
  float max_scale = 0.0f;
  for (float v : s.scales) max_scale = std::max(max_scale, std::fabs(v));  // NaN is skipped: it cannot reach the limit
  const rans::RowwiseGain g = rans::rowwise_gain(s, rans::RowwiseType::kInt8);
  return (static_cast<double>(g.bound) / 2 + 1) * max_scale >= 3.0e38;
}

// Entries for tables 1..16 (see decode_desc.h): packed 32-bit or wide 64-bit.
void build_lut(const rans::LatticeRansStream& s, bool wide, std::byte* out) {
  const std::uint32_t pb = s.prob_bits;
  const std::uint32_t m = 1u << pb;
  auto put = [&](std::size_t index, std::uint32_t freq, std::uint32_t delta, std::int32_t value) {
    if (wide) {
      const std::uint32_t w[2] = {(freq << 16) | delta, static_cast<std::uint32_t>(value)};
      std::memcpy(out + index * 8, w, 8);
    } else {
      const std::uint32_t vmask = (1u << (31 - 2 * pb)) - 1u;
      const std::uint32_t e = (freq << (31 - pb)) | ((static_cast<std::uint32_t>(value) & vmask) << pb) | delta;
      std::memcpy(out + index * 4, &e, 4);
    }
  };
  for (int t = 1; t < rans::kTables; ++t) {
    const std::size_t base = static_cast<std::size_t>(t - 1) << pb;
    const rans::TableMeta& tm = s.tables[t];
    if (tm.alphabet == 0) {  // unused by a valid stream; a corrupt one decodes value 0 with freq 1 here
      for (std::uint32_t k = 0; k < m; ++k) put(base + k, 1, k, 0);
      continue;
    }
    std::uint32_t cdf = 0;
    for (int i = 0; i < tm.alphabet; ++i) {
      const std::uint32_t f = s.freq_tables[tm.freq_offset + i];
      for (std::uint32_t k = 0; k < f; ++k) put(base + cdf + k, f, k, tm.sym_min + i);
      cdf += f;
    }
  }
}

std::size_t two_level_bytes(std::uint32_t prob_bits, std::uint32_t total_symbols) {
  return align16((static_cast<std::size_t>(kLutTables) << prob_bits) * 2 + (std::size_t{total_symbols} + 1) * 4 + 64);
}

// Two-level tables (see decode_desc.h): slot -> global symbol index, symbol -> freq << 16 | cdf, per-table offsets.
// An empty table (never used by a valid stream) maps every slot to a shared dummy symbol (freq 2^pb, cdf 0), which
// leaves the state unchanged.
void build_two_level(const rans::LatticeRansStream& s, std::uint32_t total_symbols, std::byte* out) {
  const std::uint32_t pb = s.prob_bits;
  const std::uint32_t m = 1u << pb;
  auto* slots = reinterpret_cast<std::uint16_t*>(out);
  auto* syms = reinterpret_cast<std::uint32_t*>(out + (static_cast<std::size_t>(kLutTables) << pb) * 2);
  auto* voff =
      reinterpret_cast<std::int32_t*>(reinterpret_cast<std::byte*>(syms) + (std::size_t{total_symbols} + 1) * 4);
  syms[total_symbols] = m << 16;  // the dummy symbol of empty tables
  std::uint32_t g = 0;
  for (int t = 1; t < rans::kTables; ++t) {
    const rans::TableMeta& tm = s.tables[t];
    std::uint16_t* table = slots + (static_cast<std::size_t>(t - 1) << pb);
    voff[t - 1] = tm.sym_min - static_cast<std::int32_t>(g);
    if (tm.alphabet == 0) {
      voff[t - 1] = -static_cast<std::int32_t>(total_symbols);  // value 0 for the dummy symbol below
      std::fill(table, table + m, static_cast<std::uint16_t>(total_symbols));
      continue;
    }
    std::uint32_t cdf = 0;
    for (int i = 0; i < tm.alphabet; ++i, ++g) {
      const std::uint32_t f = s.freq_tables[tm.freq_offset + i];
      syms[g] = (f << 16) | cdf;
      std::fill(table + cdf, table + cdf + f, static_cast<std::uint16_t>(g));
      cdf += f;
    }
  }
}

}  // namespace

std::string_view output_format_name(OutputFormat format) {
  switch (format) {
    case OutputFormat::kBf16: return "bf16";
    case OutputFormat::kFp16: return "fp16";
    case OutputFormat::kFp32: return "fp32";
    case OutputFormat::kFp8E4M3: return "fp8_e4m3";
    case OutputFormat::kFp8E5M2: return "fp8_e5m2";
    case OutputFormat::kInt8Rowwise: return "int8_rowwise";
    case OutputFormat::kFp8E4M3Rowwise: return "fp8_e4m3_rowwise";
  }
  return "?";
}

std::uint32_t output_element_bytes(OutputFormat format) {
  switch (format) {
    case OutputFormat::kBf16:
    case OutputFormat::kFp16: return 2;
    case OutputFormat::kFp32: return 4;
    case OutputFormat::kFp8E4M3:
    case OutputFormat::kFp8E5M2:
    case OutputFormat::kInt8Rowwise:
    case OutputFormat::kFp8E4M3Rowwise: return 1;
  }
  return 0;
}

Int8Gain int8_gain(const rans::LatticeRansStream& s) {
  const rans::RowwiseGain g = rans::rowwise_gain(s, rans::RowwiseType::kInt8);
  return Int8Gain{g.gain, g.half_over_gain};
}

std::string DecodePlan::kernel_name() const {
  if (lean_pb_ != 0) return "lean pb" + std::to_string(lean_pb_) + (lean_bf16_ ? " bf16" : "");
  switch (lut_mode_) {
    case detail::kPackedShared: return "general packed-shared";
    case detail::kTwoLevelShared: return "general two-level";
    default: return "general wide-global";
  }
}

Result<DecodePlan> DecodePlan::create(std::span<const DecodeJob> jobs, const DecodeOptions& options) {
  return create(jobs, options, detail::PlanOverrides{});
}

Result<DecodePlan> DecodePlan::create(std::span<const DecodeJob> jobs, const DecodeOptions& options,
                                      const detail::PlanOverrides& overrides) {
  DecodePlan plan;
  std::vector<Checked> checked;
  std::uint32_t max_pb = 0;
  std::uint64_t total_tiles = 0;
  bool all_pack = true;
  for (const DecodeJob& job : jobs) {
    EPK_TRY_ASSIGN(Checked c, validate(job));
    const rans::LatticeRansStream& s = *job.stream;
    const std::uint32_t row_end = job.row_end == 0 ? s.rows : job.row_end;
    if (job.row_begin >= row_end || row_end > s.rows) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + job.name + "': row range [" +
                                                         std::to_string(job.row_begin) + ", " +
                                                         std::to_string(row_end) + ") outside " +
                                                         std::to_string(s.rows) + " rows");
    }
    if (job.dev.payload_dev == nullptr || job.dev.offsets_dev == nullptr || job.dev.states_dev == nullptr ||
        job.dev.scales_dev == nullptr || job.out_dev == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + job.name + "': a device pointer is null");
    }
    if (reinterpret_cast<std::uintptr_t>(job.dev.payload_dev) % 16 != 0 ||
        reinterpret_cast<std::uintptr_t>(job.out_dev) % 16 != 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "tensor '" + job.name + "': payload and output must be 16-byte aligned");
    }
    if (static_cast<std::uint32_t>(job.format) >= kOutputFormats) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + job.name + "': unknown output format");
    }
    if (is_rowwise(job.format) && job.row_scales_dev == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + job.name + "': " +
                                                         std::string(output_format_name(job.format)) +
                                                         " needs row_scales_dev");
    }
    const std::uint64_t v_begin = std::uint64_t{job.row_begin} * c.vecs_per_row;
    const std::uint64_t v_end = std::uint64_t{row_end} * c.vecs_per_row;
    const auto t0 = static_cast<std::uint32_t>(v_begin / c.tile_vectors);
    const auto t1 = static_cast<std::uint32_t>(rans::tiles_for_vectors(v_end, s.tile_symbols));
    plan.job_names_.push_back(job.name);
    plan.first_tile_.push_back(t0);
    plan.tile_base_.push_back(static_cast<std::uint32_t>(total_tiles));
    total_tiles += t1 - t0;
    if (total_tiles >= (std::uint64_t{1} << 32)) return make_error(ErrorCode::kInvalidArgument, "too many tiles");
    max_pb = std::max(max_pb, s.prob_bits);
    all_pack = all_pack && c.packs;
    plan.output_bytes_ += std::uint64_t{row_end - job.row_begin} * s.cols * output_element_bytes(job.format);
    plan.compressed_bytes_ += (std::uint64_t{s.offsets[t1]} - s.offsets[t0]) * 2 + std::uint64_t{t1 - t0} * 132;
    checked.push_back(c);
  }
  plan.total_tiles_ = total_tiles;
  if (jobs.empty()) return plan;

  EPK_TRY_ASSIGN(detail::DeviceLimits limits, detail::query_limits(options.device));
  const std::size_t lut_bytes_max = (static_cast<std::size_t>(kLutTables) << max_pb) * 4;
  const std::uint32_t max_warps =
      std::clamp<std::uint32_t>(overrides.max_warps_per_block, 1, detail::kMaxWarpsPerBlock);
  // Work split: one block per SM (a block's tables fill the shared memory or its registers the register file), each
  // block one chunk of one tensor's tiles, tables loaded once per block. Chunks are sized so that every tensor's
  // chunks together fit one wave (a block left for a second wave would double the time), and the warps per block so
  // that the chunk divides into whole rounds of one tile per warp (no half-empty last round).
  const std::uint64_t sms = static_cast<std::uint64_t>(std::max(1, limits.sms));
  std::vector<std::uint64_t> tensor_tiles;
  std::uint64_t max_tensor_tiles = 1;
  for (std::size_t t = 0; t < jobs.size(); ++t) {
    const std::uint32_t end = t + 1 < jobs.size() ? plan.tile_base_[t + 1] : static_cast<std::uint32_t>(total_tiles);
    tensor_tiles.push_back(end - plan.tile_base_[t]);
    max_tensor_tiles = std::max<std::uint64_t>(max_tensor_tiles, tensor_tiles.back());
  }
  auto blocks_for = [&](std::uint64_t per) {
    std::uint64_t b = 0;
    for (std::uint64_t n : tensor_tiles) b += (n + per - 1) / per;
    return b;
  };
  std::uint64_t per_block = std::max<std::uint64_t>(1, (total_tiles + sms - 1) / sms);
  while (per_block < max_tensor_tiles && blocks_for(per_block) > sms) ++per_block;
  per_block =
      std::max<std::uint64_t>(per_block, std::min<std::uint64_t>(overrides.min_tiles_per_block, max_tensor_tiles));
  // Whole rounds of at most `cap` warps: the fewest rounds, then the fewest warps that take them.
  auto warps_for = [&](std::uint64_t cap) {
    const std::uint64_t rounds = (per_block + cap - 1) / cap;
    return static_cast<std::uint32_t>((per_block + rounds - 1) / rounds);
  };
  // Dynamic shared memory besides the tables: 2 KiB alignment slack, one word ring a warp, the descriptor and the
  // tile counter; and what a placement of `table_bytes` needs with `warps` warps a block.
  auto fixed_shared_for = [](std::uint32_t warps) {
    return std::size_t{detail::kRingBytes} * (1 + std::size_t{warps}) + 256;
  };
  auto fits = [&](std::size_t table_bytes, std::uint32_t warps) {
    return table_bytes + fixed_shared_for(warps) + 1024 <= limits.max_shared_per_block;
  };
  plan.warps_per_block_ = warps_for(max_warps);
  const bool shared_fits = all_pack && fits(lut_bytes_max, plan.warps_per_block_);
  std::size_t two_level_max = 0;
  bool two_level_ok = true;  // symbol indices fit u16 and frequencies fit 16 bits
  for (std::size_t t = 0; t < jobs.size(); ++t) {
    two_level_max = std::max(two_level_max, two_level_bytes(jobs[t].stream->prob_bits, checked[t].total_symbols));
    two_level_ok = two_level_ok && checked[t].total_symbols < 65535 && jobs[t].stream->prob_bits <= 15;
  }
  bool two_level_fits = two_level_ok && fits(two_level_max, plan.warps_per_block_);
  // Two-level tables that the rings of every warp leave no room for take fewer warps (more rounds) before the
  // 64-bit entries through L1 do: at 8 bpp a finer scale's wider alphabets can pass the fit, and 14336x4096 then
  // decoded through the global tables in 400 us against 126 us two-level at 31 warps with slightly narrower tables,
  // while a second round cost 1.2-1.35x on the lean kernel at 4 bpp (docs/measurements/gpu-decode.md, "Tile
  // length", "The work split, swept"; two-level at fewer warps is not yet timed).
  // Not below kMinTwoLevelWarps (two rounds at most of a full block).
  if (overrides.lut_mode < 0 && !shared_fits && !two_level_fits && two_level_ok) {
    std::uint32_t cap = plan.warps_per_block_;
    while (cap > detail::kMinTwoLevelWarps && !fits(two_level_max, cap)) --cap;
    if (fits(two_level_max, cap)) {
      plan.warps_per_block_ = warps_for(cap);
      two_level_fits = true;
    }
  }
  const std::size_t fixed_shared = fixed_shared_for(plan.warps_per_block_);
  // The first placement that holds the whole batch, fastest first (packed shared ahead of two-level at 4 bpp; where
  // packed entries do not fit, two-level far ahead of 64-bit entries through L1: docs/measurements/gpu-decode.md).
  switch (overrides.lut_mode) {
    case detail::kPackedShared:
      if (!shared_fits) {
        return make_error(ErrorCode::kUnsupported, "decode plan: packed tables of " + std::to_string(lut_bytes_max) +
                                                       " bytes do not fit in shared memory (or do not pack)");
      }
      plan.lut_mode_ = detail::kPackedShared;
      break;
    case detail::kTwoLevelShared:
      if (!two_level_fits) {
        return make_error(ErrorCode::kUnsupported, "decode plan: two-level tables of " +
                                                       std::to_string(two_level_max) +
                                                       " bytes do not fit in shared memory");
      }
      plan.lut_mode_ = detail::kTwoLevelShared;
      break;
    case detail::kWideGlobal: plan.lut_mode_ = detail::kWideGlobal; break;
    default:
      plan.lut_mode_ = shared_fits ? detail::kPackedShared : two_level_fits ? detail::kTwoLevelShared
                                                                            : detail::kWideGlobal;
      break;
  }
  plan.shared_bytes_ = (plan.lut_mode_ == detail::kPackedShared     ? lut_bytes_max
                        : plan.lut_mode_ == detail::kTwoLevelShared ? two_level_max
                                                                    : 0) +
                       fixed_shared;
  if (overrides.lean && plan.lut_mode_ == detail::kPackedShared) {
    const std::uint32_t pb = jobs[0].stream->prob_bits;
    bool same_pb = true, bf16 = true;
    for (const DecodeJob& job : jobs) {
      same_pb = same_pb && job.stream->prob_bits == pb;
      // The bf16 store: rows vector-aligned and at least 32 vectors long (the lean loop's placement steps across at
      // most one row per group), and no value can reach the bf16 clamp (it has none).
      bf16 = bf16 && job.format == OutputFormat::kBf16 && job.stream->cols % 8 == 0 && job.stream->cols >= 256 &&
             !bf16_clamp_needed(*job.stream);
      // The bf16 store multiplies by scale * 2^-pb: exact only where that is a normal float (or 0 or NaN; an infinite
      // scale has already sent the plan to the general store through the clamp test).
      for (float v : job.stream->scales) {
        if (!bf16) break;
        bf16 = v == 0.0f || !std::isfinite(v) || std::fabs(v) >= 0x1p-115f;
      }
    }
    if (same_pb && pb == static_cast<std::uint32_t>(detail::kLeanProbBits)) {
      plan.lean_pb_ = static_cast<int>(pb);
      plan.lean_bf16_ = bf16;
    }
  }
  EPK_TRY_ASSIGN(int resident,
                 detail::blocks_per_sm({plan.lut_mode_, plan.lean_pb_, plan.lean_bf16_,
                                        static_cast<int>(plan.warps_per_block_)},
                                       plan.shared_bytes_));
  if (resident <= 0) return make_error(ErrorCode::kUnsupported, "decode plan: the kernel cannot be resident");

  // Work items: a block decodes its chunk with its warps pulling tiles from a shared counter.
  std::vector<WorkItem> items;
  for (std::size_t t = 0; t < jobs.size(); ++t) {
    const std::uint32_t t0 = plan.first_tile_[t];
    const std::uint32_t n = (t + 1 < jobs.size() ? plan.tile_base_[t + 1] : static_cast<std::uint32_t>(total_tiles)) -
                            plan.tile_base_[t];
    const std::uint64_t chunks = (n + per_block - 1) / per_block;
    for (std::uint64_t k = 0; k < chunks; ++k) {
      const auto b = static_cast<std::uint32_t>(t0 + n * k / chunks);
      const auto e = static_cast<std::uint32_t>(t0 + n * (k + 1) / chunks);
      if (e > b) items.push_back({static_cast<std::uint32_t>(t), b, e, 0});
    }
  }
  plan.blocks_ = items.size();

  // Scratch image.
  plan.descs_offset_ = 0;
  plan.items_offset_ = align16(jobs.size() * sizeof(TensorDesc));
  std::size_t lut_offset = align16(plan.items_offset_ + items.size() * sizeof(WorkItem));
  std::vector<std::size_t> lut_offsets;
  std::vector<std::size_t> lut_sizes;
  for (std::size_t t = 0; t < jobs.size(); ++t) {
    const std::uint32_t pb = jobs[t].stream->prob_bits;
    std::size_t bytes = 0;
    if (plan.lut_mode_ == detail::kTwoLevelShared) {
      bytes = two_level_bytes(pb, checked[t].total_symbols);
    } else {
      bytes = align16((static_cast<std::size_t>(kLutTables) << pb) * (plan.lut_mode_ == detail::kWideGlobal ? 8 : 4));
    }
    lut_offsets.push_back(lut_offset);
    lut_sizes.push_back(bytes);
    lut_offset += bytes;
  }
  plan.status_offset_ = lut_offset;
  plan.tile_status_offset_ = plan.status_offset_ + sizeof(DecodeStatus);
  plan.scratch_bytes_ = (plan.tile_status_offset_ + total_tiles + 255) / 256 * 256;
  plan.image_.assign(plan.status_offset_, std::byte{0});

  for (std::size_t t = 0; t < jobs.size(); ++t) {
    const DecodeJob& job = jobs[t];
    const rans::LatticeRansStream& s = *job.stream;
    const Checked& c = checked[t];
    TensorDesc d{};
    d.payload = job.dev.payload_dev;
    d.offsets = job.dev.offsets_dev;
    d.states = job.dev.states_dev;
    d.scales = job.dev.scales_dev;
    d.lut_offset = lut_offsets[t];
    d.out = job.out_dev;
    d.row_scales = is_rowwise(job.format) ? job.row_scales_dev : nullptr;
    d.payload_words = s.payload.size();
    d.vectors = c.vectors;
    d.rows = s.rows;
    d.cols = s.cols;
    d.vecs_per_row = c.vecs_per_row;
    // floor((2^64 - 1) / vpr) + 1; umul64hi(v, magic) == v / vpr for every v < 2^32 (checked below for larger ones).
    d.row_magic = c.vecs_per_row > 1 ? ~std::uint64_t{0} / c.vecs_per_row + 1 : 0;
    d.tile_vectors = c.tile_vectors;
    d.tiles = c.tiles;
    d.prob_bits = s.prob_bits;
    d.coset_f0 = c.coset_f0;
    d.format = static_cast<std::uint32_t>(job.format);
    d.row_begin = job.row_begin;
    d.row_end = job.row_end == 0 ? s.rows : job.row_end;
    d.tile_base = plan.tile_base_[t];
    d.first_tile = plan.first_tile_[t];
    const rans::RowwiseGain g = rans::rowwise_gain(
        s, job.format == OutputFormat::kFp8E4M3Rowwise ? rans::RowwiseType::kF8E4M3 : rans::RowwiseType::kInt8);
    d.int8_gain = g.gain;
    d.int8_half_over_gain = g.half_over_gain;
    d.clamp_bf16 = bf16_clamp_needed(s) ? 1u : 0u;
    d.lut_bytes = static_cast<std::uint32_t>(lut_sizes[t]);
    d.total_symbols = c.total_symbols;
    std::memcpy(plan.image_.data() + plan.descs_offset_ + t * sizeof(TensorDesc), &d, sizeof(d));
    if (plan.lut_mode_ == detail::kTwoLevelShared) {
      build_two_level(s, c.total_symbols, plan.image_.data() + lut_offsets[t]);
    } else {
      build_lut(s, plan.lut_mode_ == detail::kWideGlobal, plan.image_.data() + lut_offsets[t]);
    }
  }
  std::memcpy(plan.image_.data() + plan.items_offset_, items.data(), items.size() * sizeof(WorkItem));
  return plan;
}

}  // namespace epk::cuda
