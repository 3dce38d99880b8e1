#include "codec/cuda/encode/encode_coder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/common/block_recycler.h"
#include "codec/rans/stream.h"

namespace epk::cuda {

namespace {

// The recycler's pinner: blocks registered for every device (a process may run encoders on several).
bool pin_block(void* p, std::size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return true;
  cudaGetLastError();  // not this thread's next call's error
  return false;
}

void unpin_block(void* p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

}  // namespace

TileCoder::TileCoder(cudaStream_t stream, StagedCopier& copier) : stream_(stream), copier_(copier) {
  BlockRecycler::process().set_pinner({&pin_block, &unpin_block});
}

Result<rans::EncodedTensor> TileCoder::code(const FieldSet& fs, const model::FieldCounts& c,
                                            std::vector<float> row_scales, const rans::EncodeGeometry& g,
                                            double* download_seconds) {
  EPK_TRY_ASSIGN(rans::EncodedTensor out, rans::encoded_geometry(g));
  if (row_scales.size() != g.rows) {
    return make_error(ErrorCode::kInvalidArgument, "encode_fields: " + std::to_string(row_scales.size()) +
                                                       " row scales for " + std::to_string(g.rows) + " rows");
  }
  out.scales = std::move(row_scales);
  EPK_TRY(rans::build_tables(c, g.prob_bits, out));
  // Device tables: frequencies and cumulative frequencies per table, laid out as freq_tables.
  const std::size_t entries = std::max<std::size_t>(out.freq_tables.size(), 1);
  std::vector<std::uint32_t> f(entries, 0), cum(entries, 0);
  int off_h[enc::kTables], min_h[enc::kTables];
  for (int t = 0; t < enc::kTables; ++t) {
    const rans::TableMeta& m = out.tables[std::size_t(t)];
    off_h[t] = m.freq_offset;
    min_h[t] = m.sym_min;
    std::uint32_t running = 0;
    for (std::int32_t i = 0; i < (m.n_symbols ? m.alphabet : 0); ++i) {
      f[std::size_t(m.freq_offset + i)] = out.freq_tables[std::size_t(m.freq_offset + i)];
      cum[std::size_t(m.freq_offset + i)] = running;
      running += out.freq_tables[std::size_t(m.freq_offset + i)];
    }
  }
  const std::uint32_t tile_vectors = rans::vectors_per_tile(g.tile_symbols);
  const std::uint64_t tiles64 = rans::tiles_for_vectors(fs.n, g.tile_symbols);
  if (tiles64 > 0xffffffffull) return make_error(ErrorCode::kInvalidArgument, "encode_fields: too many tiles");
  const auto tiles = std::uint32_t(tiles64);
  const std::uint64_t capacity = std::uint64_t(tile_vectors) * 9;
  EPK_ENC_CUDA_TRY("coder", scratch_.reserve(tiles * capacity * 2));
  EPK_ENC_CUDA_TRY("coder", words_.reserve(std::size_t(tiles) * 4));
  EPK_ENC_CUDA_TRY("coder", states_.reserve(std::size_t(tiles) * 32 * 4));
  EPK_ENC_CUDA_TRY("coder", offsets_.reserve((std::size_t(tiles) + 1) * 4));
  // One upload: freq[entries], cdf[entries], off[kTables], sym_min[kTables].
  const std::size_t table_bytes = (2 * entries + 2 * enc::kTables) * 4;
  EPK_ENC_CUDA_TRY("tables", tables_.reserve(table_bytes));
  EPK_ENC_CUDA_TRY("tables", pin_tables_.reserve(table_bytes));
  std::uint32_t* pt = pin_tables_.as<std::uint32_t>();
  std::memcpy(pt, f.data(), entries * 4);
  std::memcpy(pt + entries, cum.data(), entries * 4);
  std::memcpy(pt + 2 * entries, off_h, sizeof off_h);
  std::memcpy(pt + 2 * entries + enc::kTables, min_h, sizeof min_h);
  EPK_ENC_CUDA_TRY("tables", cudaMemcpyAsync(tables_.as<void>(), pt, table_bytes, cudaMemcpyHostToDevice, stream_));
  const std::uint32_t* td = tables_.as<std::uint32_t>();
  enc::DeviceTables dt{td, td + entries, reinterpret_cast<const int*>(td + 2 * entries),
                       reinterpret_cast<const int*>(td + 2 * entries + enc::kTables)};
  enc::launch_rans_tiles(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, tile_vectors, tiles,
                         g.prob_bits, dt, scratch_.as<std::uint16_t>(), capacity, words_.as<std::uint32_t>(),
                         states_.as<std::uint32_t>(), stream_);
  EPK_ENC_CUDA_TRY("coder", cudaGetLastError());
  EPK_ENC_CUDA_TRY("coder", pin_words_.reserve(std::size_t(tiles) * 4));
  EPK_ENC_CUDA_TRY("coder", cudaMemcpyAsync(pin_words_.as<void>(), words_.as<void>(), std::size_t(tiles) * 4,
                                            cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("coder", cudaStreamSynchronize(stream_));
  const std::uint32_t* counts = pin_words_.as<std::uint32_t>();
  out.offsets.resize(std::size_t(tiles) + 1);
  std::uint64_t total = 0;
  out.offsets[0] = 0;
  for (std::uint32_t t = 0; t < tiles; ++t) {
    total += counts[t];
    if (total > 0xffffffffull) {
      return make_error(ErrorCode::kInvalidArgument, "encode_fields: payload exceeds 2^32 words");
    }
    out.offsets[t + 1] = std::uint32_t(total);
  }
  ScopedTimer download_timer(download_seconds);
  // Faulting the payload's host memory in was most of its download: PayloadWords takes a block used before where
  // the process has one (its writer gave the last payload's back), faults a fresh one in huge pages where the
  // kernel gives them, and writes nothing on resize(), so the copier's threads fault in what is fresh together
  // (docs/decisions/gpu-encoder.md). A block the recycler pinned (TileCoder's pinner: a block is
  // registered when first kept, by the thread that frees it, and stays so while recycled) takes the payload
  // straight from the device, without the copier.
  out.payload.resize(std::size_t(total));
  out.states.resize(std::size_t(tiles) * 32);
  EPK_ENC_CUDA_TRY("coder", payload_.reserve(std::size_t(total) * 2));
  EPK_ENC_CUDA_TRY("coder", pin_words_.reserve(out.offsets.size() * 4));
  std::memcpy(pin_words_.as<void>(), out.offsets.data(), out.offsets.size() * 4);
  EPK_ENC_CUDA_TRY("coder", cudaMemcpyAsync(offsets_.as<void>(), pin_words_.as<void>(), out.offsets.size() * 4,
                                            cudaMemcpyHostToDevice, stream_));
  enc::launch_pack_words(scratch_.as<std::uint16_t>(), capacity, tiles, offsets_.as<std::uint32_t>(),
                         payload_.as<std::uint16_t>(), stream_);
  EPK_ENC_CUDA_TRY("coder", cudaGetLastError());
  const std::size_t payload_bytes = std::size_t(total) * 2;
  if (payload_bytes && BlockRecycler::process().pinned(out.payload.data(), payload_bytes)) {
    EPK_ENC_CUDA_TRY("coder", cudaMemcpyAsync(out.payload.data(), payload_.as<void>(), payload_bytes,
                                              cudaMemcpyDeviceToHost, stream_));
    EPK_ENC_CUDA_TRY("coder", cudaStreamSynchronize(stream_));
  } else if (payload_bytes) {
    EPK_ENC_CUDA_TRY("coder", copier_.to_host(out.payload.data(), payload_.as<void>(), payload_bytes, stream_));
  }
  EPK_ENC_CUDA_TRY("coder", copier_.to_host(out.states.data(), states_.as<void>(), out.states.size() * 4, stream_));
  return out;
}

}  // namespace epk::cuda
