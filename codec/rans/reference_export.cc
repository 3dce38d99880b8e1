#include "codec/rans/reference_export.h"

#include "codec/rans/container_io.h"
#include "codec/rans/reference_format.h"

namespace epk::rans {

bool exports_as_stream(const container::TensorEntry& entry) {
  return entry.encoding == container::Encoding::kLatticeRans;
}

Result<ReferenceEntry> reference_entry(const container::Reader& reader, const container::TensorEntry& t,
                                       std::string_view where) {
  if (t.encoding == container::Encoding::kRaw) return ReferenceEntry{t.name, t.dtype, t.shape};
  if (!exports_as_stream(t)) {
    return make_error(ErrorCode::kUnsupported, std::string(where) + ": tensor '" + t.name + "' is " +
                                                   std::string(container::encoding_name(t.encoding)) +
                                                   "-encoded; the entropack form holds lattice-rans and raw only");
  }
  EPK_TRY_ASSIGN(auto stored, from_container(reader, t));
  std::string key = stored.info.entropack_key.empty() ? t.name + "." + std::string(kReferenceLeaf)
                                                      : stored.info.entropack_key;
  return ReferenceEntry{std::move(key), DType::kU8, {reference_quant_state_bytes(to_owned(stored))}};
}

Result<std::span<const std::uint8_t>> reference_bytes(const container::Reader& reader,
                                                       const container::TensorEntry& t,
                                                       std::vector<std::byte>& owned) {
  if (!exports_as_stream(t)) return reader.buffer(t, 0);
  EPK_TRY_ASSIGN(auto stored, from_container(reader, t));
  EPK_TRY_ASSIGN(owned, write_reference_quant_state(to_owned(stored)));
  return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(owned.data()), owned.size());
}

}  // namespace epk::rans
