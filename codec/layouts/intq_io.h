// The .epk `intq` encoding (docs/FORMAT.md section 11): quantized weights kept exactly as they were imported, in one
// of three kinds, each described by its params JSON and its buffers:
//   "int"  the logical QuantTensor (quant_tensor.h): codes packed LSB-first (pack_bits, one stream over the
//          row-major [padded_rows, padded_cols] codes), scales in their source dtype, zeros packed at the code width
//          (absent when symmetric), g_idx (absent when static) and perm (absent when identity).
//   "gguf" a GGUF K-quant or other block type that has no exact integer form: the ggml blocks byte for byte.
//   "bnb4" a bitsandbytes NF4/FP4 state (weight, absmax, quant_map, nested_*, quant_state) byte for byte.
// Non-uniform levels (NF4, FP4) and float mins (K-quants, Q4_1) are stored in their own form rather than requantized,
// so import never adds error; conversion into an integer layout requantizes later and reports the error there.
// Codes are packed, or rANS-coded where that is smaller (codec/rans/symbol_coder.h: one static frequency table per
// tensor, tiles of 65536 codes); every reader of an "int" entry goes through read_int, which decodes either form.
//
// Every field is validated on read (the index entry's shape, the params and each buffer's size), errors naming the
// file, the tensor and the field.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/layouts/bnb.h"
#include "codec/layouts/footprint.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts::intq {

inline constexpr int kParamsVersion = 1;

enum class Kind { kInt, kGguf, kBnb4 };

// A tensor ready for container::Writer::add_tensor(spec, buffers()). Views are made on demand, so copies and moves
// never leave one pointing into another object's storage.
struct Encoded {
  container::TensorSpec spec;
  std::vector<std::string> names;  // buffer names, parallel to storage
  std::vector<std::vector<std::uint8_t>> storage;

  std::vector<container::BufferData> buffers() const {
    std::vector<container::BufferData> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], storage[i]});
    return out;
  }
};

// The logical tensor of a quantized nn.Linear named `name` (the index shape is the weight's [N, K] = [cols, rows];
// dtype `dense_dtype` is what the source model computes in, usually the scale dtype). `source` records where it came
// from ("gptq", "awq", "ct", "gguf-q4_0", ...). If t.perm is set, its first `rows` entries must be a permutation of
// 0..rows-1 (a row shard's global indices are not storable: kInvalidArgument).
// Codes are stored packed or rANS-coded (FORMAT.md 11.5); kSmallest takes rANS when its buffers (stream, frequency
// table, tile sizes) are smaller than the packed words, as `epk import` does.
enum class CodeForm { kSmallest, kPacked, kRans };
Result<Encoded> encode_int(const QuantTensor& t, std::string name, DType dense_dtype, std::string source,
                           CodeForm form = CodeForm::kSmallest);
// A GGUF tensor verbatim (any block type gguf::dequantize knows); index shape is info.torch_shape(), dtype F32.
Result<Encoded> encode_gguf(const gguf::TensorInfo& info, std::span<const std::uint8_t> bytes, std::string name);
// A bitsandbytes 4-bit weight verbatim (the views as bnb::read_state takes them; checked with it first).
Result<Encoded> encode_bnb4(const bnb::Views& views, std::string name);

// Parses and checks an intq entry's params: kind only (cheap, for inspect and dispatch).
Result<Kind> kind_of(const container::Reader& reader, const container::TensorEntry& entry);

// The params of an "int" entry, checked as read_int checks them, without reading a buffer: `shape` has every size
// field set and no codes, scales, zeros, g_idx or perm (for the daemon's served() and other size-only questions).
struct IntHeader {
  QuantTensor shape;
  bool symmetric = false;  // params.zeros == "symmetric"
  bool has_g_idx = false;  // a g_idx buffer (scattered groups: act-order)
  bool has_perm = false;   // a perm buffer (rows stored in another order than the input features)
  bool rans_codes = false; // params.codes == "rans": buffers codes, code_freqs, code_tiles (FORMAT.md 11.5)
  int code_prob_bits = 0;  // rans only
  std::uint32_t code_tile_symbols = 0;
};
Result<IntHeader> read_int_header(const container::Reader& reader, const container::TensorEntry& entry);

// The logical tensor of an "int" entry, every field and buffer checked. Not the buffers' checksums (verify()).
Result<QuantTensor> read_int(const container::Reader& reader, const container::TensorEntry& entry);

// Dense weights of any intq entry in the index shape, row-major, in out_dtype (F32, BF16 or F16: one rounding of the
// exact float32 value, RNE). dst must hold exactly element_count * width bytes. "int" undoes perm, so the result is
// the nn.Linear weight in original feature order.
Status dequantize_intq(const container::Reader& reader, const container::TensorEntry& entry, DType out_dtype,
                       std::span<std::uint8_t> dst);

// How an "int" entry stores its codes: "packed" or "rans", the bytes of the codes' buffers, and what packed codes
// would take (4 * ceil(padded_rows * padded_cols * bits / 32)). Other kinds: form is the kind's name, both sizes 0.
struct CodeInfo {
  std::string form;
  std::uint64_t stored_bytes = 0;
  std::uint64_t packed_bytes = 0;
};
Result<CodeInfo> code_info(const container::Reader& reader, const container::TensorEntry& entry);

// What the entry stores per logical weight, split into codes, scales, zeros and indices (container buffers only).
Result<Footprint> footprint_of_entry(const container::Reader& reader, const container::TensorEntry& entry);

}  // namespace epk::layouts::intq
