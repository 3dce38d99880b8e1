// Streams a .safetensors file to disk without holding tensor data: the caller declares every tensor first, the
// header is written at once, then the caller supplies each tensor's bytes in file order, in as many pieces as it
// likes. The file appears under its final name only on finish() (AtomicFileWriter: temp file, fsync, rename).
//
// Header layout, as the reference writer (huggingface/safetensors prepare()) produces it: compact JSON, "__metadata__"
// first when present, then one entry per tensor in file order as {"dtype":..,"shape":[..],"data_offsets":[b,e]},
// padded with spaces to a multiple of 8 bytes. With Order::kReference the tensors are ordered as the reference
// orders them (dtype alignment descending, then name, bytewise), so for the same tensors and at most one metadata
// key the file is byte-identical to safetensors.save_file's. (With several metadata keys the reference writes them
// in HashMap order, which is not deterministic; here they are sorted by key.)
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/common/atomic_file.h"
#include "codec/common/dtype.h"
#include "codec/common/result.h"

namespace epk::safetensors {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;  // empty: a 0-dim scalar; for F4/F6 the logical element count
};

enum class Order {
  kReference,   // sorted like the reference writer (byte-identical output)
  kAsDeclared,  // the caller's order
};

class Writer {
 public:
  Writer() = default;
  Writer(Writer&&) noexcept = default;
  Writer& operator=(Writer&&) noexcept = default;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Validates the declarations (unique non-empty names other than "__metadata__", numel and byte sizes free of
  // overflow, sub-byte tensors filling whole bytes, header within kMaxHeaderSize) and writes the header.
  // Errors: kInvalidArgument naming the tensor and field, kIo.
  static Result<Writer> create(const std::string& path, std::vector<TensorSpec> tensors,
                               const std::map<std::string, std::string>& metadata = {},
                               Order order = Order::kReference);

  // Tensors in the order their bytes must be supplied (the file order).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The tensor whose bytes come next; empty once all are complete. Empty tensors are skipped.
  std::string_view next_tensor() const;

  // Appends `piece` to tensor `name`, which must be next_tensor() (an empty piece is accepted for any declared
  // tensor and does nothing). A piece larger than what the tensor still lacks is refused, as is a tensor named out
  // of order while another is incomplete. After an error the writer is unusable (finish() fails; nothing is left).
  Status write(std::string_view name, std::span<const std::uint8_t> piece);

  // Refuses if a tensor is incomplete; otherwise fsyncs and renames the file into place.
  Status finish();

 private:
  Status fail(Error e);

  AtomicFileWriter out_;
  std::vector<TensorSpec> tensors_;
  std::vector<std::uint64_t> sizes_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t current_ = 0;          // first tensor not yet complete
  std::uint64_t current_done_ = 0;   // bytes of tensors_[current_] written so far
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace epk::safetensors
