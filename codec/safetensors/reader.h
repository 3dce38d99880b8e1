// Reads one .safetensors file through a read-only memory map; tensor data is never copied.
//
// Format (the reference crate huggingface/safetensors, safetensors/src/tensor.rs):
//   1. u64 LE N: the header length, at most kMaxHeaderSize, 8 + N <= file size.
//   2. N bytes of UTF-8 JSON, an object (writers pad it with trailing spaces to a multiple of 8):
//        "__metadata__": optional object of string -> string (null is taken as absent);
//        every other key is a tensor: {"dtype": "BF16", "shape": [u64...], "data_offsets": [begin, end]}.
//      Unknown fields inside an entry are ignored, as the reference does.
//   3. The data section: every byte belongs to exactly one tensor. Sorted by (begin, end), the first tensor begins
//      at 0, each begins where the previous ended (no holes, no overlap), end >= begin, the last end is the data
//      section's length, and end - begin == numel * bits / 8 (sub-byte dtypes need numel * bits % 8 == 0).
//      numel and the byte size are overflow-checked. Tensors are little-endian, C order.
// Beyond the reference: duplicate keys (which serde_json would silently let the last one win) are refused, and
// tensors of equal offsets (empty tensors) are ordered by name so the tensor list is deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/mapped_file.h"
#include "codec/common/result.h"

namespace epk::safetensors {

inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;  // the reference's MAX_HEADER_SIZE
inline constexpr std::string_view kMetadataKey = "__metadata__";

// One tensor of an opened file. `data` points into the file's mapping: valid while the File (or Checkpoint) that
// produced it lives; moving the owner keeps it valid.
struct TensorView {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;  // empty: a 0-dim scalar
  std::span<const std::uint8_t> data;
};

// Elements of `shape` (1 for a scalar); false on overflow.
bool shape_numel(std::span<const std::uint64_t> shape, std::uint64_t* out);
// Bytes that `numel` elements of `dtype` occupy; false on overflow or when sub-byte elements do not fill whole
// bytes (F4 with odd numel, F6 with numel % 4 != 0).
bool tensor_nbytes(DType dtype, std::uint64_t numel, std::uint64_t* out);

class File {
 public:
  File() = default;
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Maps and validates `path`. Errors: kIo (cannot open or map), kBadInput (malformed; the message names the file,
  // the tensor where there is one, and the field), kUnsupported (a dtype name this build does not know).
  static Result<File> open(const std::string& path);
  // Validates an already mapped file (its path() names it in messages).
  static Result<File> parse(MappedFile map);

  // In file order (ascending data offsets; equal offsets by name).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // __metadata__, empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const std::string& path() const { return map_.path(); }
  std::uint64_t header_size() const { return header_size_; }               // N, padding included
  std::uint64_t data_offset() const { return 8 + header_size_; }           // where the data section starts
  std::span<const std::uint8_t> bytes_mapped() const { return map_.bytes(); }

 private:
  MappedFile map_;
  std::uint64_t header_size_ = 0;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string_view, std::size_t> index_;  // views into tensors_[i].name (stable: never resized)
  std::map<std::string, std::string> metadata_;
};

}  // namespace epk::safetensors
