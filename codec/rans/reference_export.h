// One stored tensor of an .epk file in the reference package's state_dict form (`epk export-entropack`): a
// lattice-rans stream as its uint8 quant_state blob under its reference key (the one it was imported under, else
// `{name}.entropack_quant_state`), a raw tensor as it is stored. Other encodings have no such form (kUnsupported
// naming the tensor). The stream is not re-encoded: the blob is what the reference package decodes, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/reader.h"

namespace epk::rans {

struct ReferenceEntry {
  std::string key;  // the safetensors key
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
};
// The key, dtype and shape `entry` exports to (the stream is validated; no buffer checksum is checked).
Result<ReferenceEntry> reference_entry(const container::Reader& reader, const container::TensorEntry& entry,
                                       std::string_view where);

// The bytes written under that key: a view of the stored buffer (raw) or the blob (lattice-rans), in `owned`.
Result<std::span<const std::uint8_t>> reference_bytes(const container::Reader& reader,
                                                       const container::TensorEntry& entry,
                                                       std::vector<std::byte>& owned);

// Whether the exported tensor was a compressed stream (the summary's count) rather than passed through.
bool exports_as_stream(const container::TensorEntry& entry);

}  // namespace epk::rans
