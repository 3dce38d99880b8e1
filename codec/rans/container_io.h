// How a lattice-rans tensor is stored in an .epk file (docs/FORMAT.md, section 10): the mapping between an
// EncodedTensor (or a view of one) and the container's buffers plus params_json, defined once for the writer
// (epk compress, epk import-entropack) and every reader (decoders, verify, inspect, export, the daemon).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rans/native_format.h"
#include "codec/rans/profile.h"

namespace epk::rans {

// Buffer names, in the order they are written (FORMAT.md 10.2).
inline constexpr std::string_view kPayloadBuffer = "payload";
inline constexpr std::string_view kOffsetsBuffer = "offsets";
inline constexpr std::string_view kStatesBuffer = "states";
inline constexpr std::string_view kStreamMetaBuffer = "stream_meta";
inline constexpr std::string_view kFreqTablesBuffer = "freq_tables";
inline constexpr std::string_view kScalesBuffer = "scales";
inline constexpr int kStoredBuffers = 6;
// The native profile's buffers (docs/STREAM.md section 9), in the order they are written.
inline constexpr std::string_view kWordCountsBuffer = "word_counts";
inline constexpr std::string_view kPackedStatesBuffer = "packed_states";
inline constexpr std::string_view kPackedTablesBuffer = "packed_tables";
inline constexpr std::string_view kF16ScalesBuffer = "f16_scales";
inline constexpr int kNativeBuffers = 5;

// What params_json records beyond the stream geometry: how the tensor was made.
struct EncodingInfo {
  double target_bpp = 0.0;  // 0: unknown (imported streams)
  int rdo_sweeps = 0;
  int rdo_candidates = 0;
  bool calibrate_rate = true;
  double scale = 0.0;  // the encoder's final lattice scale (0: unknown)
  bool coarsened = false;
  // Rounded with calibration statistics (codec/rate/feedback.h); written only when true, so a file compressed
  // without statistics is byte for byte what it was before the key existed.
  bool calibrated = false;
  std::string origin = "epk";  // "epk" or "entropack" (imported)
  std::string entropack_key;   // the state_dict key an imported blob came from (export writes it back)
  StreamProfile profile = StreamProfile::kReference;
};

// A stored tensor seen through the container: geometry and buffers as views into the reader's map (no copy). A
// native tensor's payload is a view too; its other arrays are expanded at open and owned here (`expanded`), so they
// live as long as any copy of this StoredStream (the serving layer keeps one per tensor in its producer).
struct StoredStream {
  LatticeRansStream stream;
  DType dtype = DType::kF32;  // source dtype
  EncodingInfo info;
  std::shared_ptr<const ExpandedMetadata> expanded;  // native only
};

// The container form of t: spec (name, shape [rows, cols], dtype, encoding lattice-rans, params_json) and the six
// buffers, viewing t's vectors (t must outlive the returned buffers' use, i.e. the add_tensor call).
struct ContainerForm {
  container::TensorSpec spec;
  std::vector<container::BufferData> buffers;
};
ContainerForm to_container(const EncodedTensor& t, std::string name, const EncodingInfo& info);
// A container form with whatever it views beyond the tensor: the native profile's packed buffers.
struct OwnedContainerForm {
  ContainerForm form;
  std::shared_ptr<const NativeMetadata> native;  // native only
};
// The container form of t in info.profile: to_container's for the reference profile; for the native one the packed
// buffers (owned by the form) and t's payload, t's scales on the native grid (round_scales_to_native). Errors:
// pack_native's.
Result<OwnedContainerForm> to_container_as(const EncodedTensor& t, std::string name, const EncodingInfo& info);

// Buffers plus index entry of t in info.profile, computed without packing (t's scales need not be on the grid: the
// rate search calls it on samples): what to_container_as's form stores.
std::uint64_t stored_bytes_as(const EncodedTensor& t, std::string_view name, const EncodingInfo& info);

// params_json of a lattice-rans tensor (compact, keys sorted); a native tensor's also carries its packed form's
// three params (`native`).
std::string params_json(const LatticeRansStream& s, const EncodingInfo& info, const NativeMetadata* native = nullptr);

// Reads entry e of reader r: params_json parsed and every field checked (present, integral, in range, consistent
// with the shape and with the buffers' sizes and alignment), buffers present with the right sizes, then the stream
// (validate_stream). Errors name the file, the tensor and the field (kBadInput), kUnsupported for another encoding
// or an unsupported source dtype. Does not hash the buffers (Reader::verify does).
Result<StoredStream> from_container(const container::Reader& r, const container::TensorEntry& e);

// Parses params_json alone: geometry into s (no buffers), the rest into info. where prefixes errors.
Status parse_params(std::string_view json, std::string_view where, LatticeRansStream* s, EncodingInfo* info);

// parse_params of entry e, then rule 10.3's rows and cols against e's shape (kBadInput naming `shape`): what inspect
// checks without reading a buffer, and what from_container checks first.
Status parse_entry_params(const container::Reader& r, const container::TensorEntry& e, LatticeRansStream* s,
                          EncodingInfo* info);

// An owning copy of a stored stream (for export, which re-serialises the reference's blob).
EncodedTensor to_owned(const StoredStream& s);

// Bytes the index spends on entry e (FORMAT.md rule 5: name, shape, params, buffer table): the "tensor's header"
// of the stored-bytes count (issue 3): payload + tables + states + offsets + scales + this.
std::uint64_t index_entry_bytes(const container::TensorEntry& e);
std::uint64_t index_entry_bytes(const container::TensorSpec& spec, const std::vector<container::BufferData>& buffers);
// Buffers plus index entry.
std::uint64_t stored_bytes(const container::TensorEntry& e);

}  // namespace epk::rans
