// Reader for .epkraw files (scripts/testdata/epkraw.py): one reference-compressed tensor plus the reference decoder's
// outputs. Used by the GPU decoder tests and bench/gpu_decode_bench. Test support, not a product format.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/rans/encoded_tensor.h"

namespace epk::testing {

// The stored tensor (rans::EncodedTensor, whose view() the decoders take) plus the reference's decoded outputs.
struct RawStream : rans::EncodedTensor {
  std::map<std::uint32_t, std::vector<std::uint8_t>> outputs;  // OutputFormat value -> bytes
};

inline Result<RawStream> read_raw_stream(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, path + ": cannot open");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t pos = 0;
  auto take = [&](void* dst, std::size_t n) -> bool {
    if (n > bytes.size() - pos) return false;
    if (n == 0) return true;  // dst may be an empty vector's null data() (UBSan: memcpy of null)
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[8];
  std::uint32_t h[10];
  if (!take(magic, 8) || std::memcmp(magic, "EPKRAW01", 8) != 0 || !take(h, sizeof(h))) {
    return make_error(ErrorCode::kBadInput, path + ": not an EPKRAW01 file");
  }
  RawStream r;
  r.rows = h[0];
  r.cols = h[1];
  r.padded_cols = h[2];
  r.prob_bits = h[3];
  r.tile_symbols = h[4];
  const std::uint64_t words = h[5], tiles = h[6], nfreq = h[7], nout = h[8];
  r.payload.resize(words);
  r.offsets.resize(tiles + 1);
  r.states.resize(tiles * 32);
  r.tables.resize(rans::kTables);
  r.freq_tables.resize(nfreq);
  r.scales.resize(r.rows);
  if (!take(r.payload.data(), words * 2) || !take(r.offsets.data(), (tiles + 1) * 4) ||
      !take(r.states.data(), tiles * 128) || !take(r.tables.data(), rans::kTables * sizeof(rans::TableMeta)) ||
      !take(r.freq_tables.data(), nfreq * 2) || !take(r.scales.data(), std::size_t{r.rows} * 4)) {
    return make_error(ErrorCode::kBadInput, path + ": truncated buffers");
  }
  for (std::uint64_t i = 0; i < nout; ++i) {
    std::uint32_t fmt[2];
    std::uint64_t n = 0;
    if (!take(fmt, 8) || !take(&n, 8) || n > bytes.size() - pos) {
      return make_error(ErrorCode::kBadInput, path + ": truncated output record");
    }
    std::vector<std::uint8_t> data(n);
    take(data.data(), n);
    r.outputs[fmt[0]] = std::move(data);
  }
  return r;
}

}  // namespace epk::testing
