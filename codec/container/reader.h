// Opens a .epk file (docs/FORMAT.md) by memory-mapping it. open() validates the header and the whole index (every
// count and offset against the file size and against overflow, rule 7) and hashes the index and metadata; it never
// touches tensor data, so it stays fast for a 50 GB file. Buffer checksums are checked by verify().
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/mapped_file.h"
#include "codec/common/result.h"
#include "codec/container/format.h"
#include "codec/container/tensor.h"

namespace epk::container {

// Immutable once opened: every const method may be called from many threads at once.
class Reader {
 public:
  Reader() = default;  // empty: no tensors, no file
  Reader(Reader&&) noexcept = default;
  Reader& operator=(Reader&&) noexcept = default;  // MappedFile's move assignment unmaps ours first
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Errors name the file and the field: kBadInput for malformed data, kUnsupported for an unknown version, flag, dtype
  // or encoding, kChecksum for a header, index or metadata checksum mismatch, kIo when the file cannot be mapped.
  static Result<Reader> open(const std::string& path);
  // The same over the file open on `fd` (not consumed; a libepk client reads the model file epkd passed it this way).
  static Result<Reader> open_fd(int fd, const std::string& name);

  // A reader over tensor bytes already in memory (epkd's resident tier reads a file's sections into its own memory
  // once, and decodes from there): `tensors` are the entries of a reader opened from `path` with their section and
  // buffer offsets rebased to `bytes` (still absolute, now within `bytes`), in the same order; `path` names the origin
  // in error messages. kBadInput if a buffer lies outside `bytes` or a name repeats. `bytes` must outlive the reader.
  static Result<Reader> over_memory(std::string path, std::span<const std::uint8_t> bytes,
                                    std::vector<TensorEntry> tensors, std::map<std::string, std::string> metadata);

  // In file index order (the order the writer added them).
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // Binary search over names; nullptr when absent.
  const TensorEntry* find(std::string_view name) const;

  // The bytes of buffer i of t (t must come from this reader; i < t.buffers.size()). Views into the map: valid while
  // the reader lives. Not checksummed: call verify() first where the data is not otherwise checked.
  std::span<const std::uint8_t> buffer(const TensorEntry& t, std::size_t i) const;
  // By name; kNotFound naming the file, tensor and buffer when absent.
  Result<std::span<const std::uint8_t>> buffer(const TensorEntry& t, std::string_view name) const;

  // XXH3-64 of each of t's buffers against the index; kChecksum naming the file, tensor and buffer.
  Status verify(const TensorEntry& t) const;
  // The same for buffer i of t alone (i < t.buffers.size()).
  Status verify_buffer(const TensorEntry& t, std::size_t i) const;
  Status verify_all() const;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  std::uint64_t file_size() const { return bytes_.size(); }  // over_memory: the size of the memory
  // The file changed or failed under the map (MappedFile::damaged): bytes read since may be zeros. Never for
  // over_memory.
  bool damaged() const { return file_.damaged(); }
  // Bytes of the file that are neither header, buffer, index nor metadata: the cost of alignment (for `epk inspect`).
  std::uint64_t padding_bytes() const { return padding_bytes_; }

 private:
  static Result<Reader> over_file(MappedFile mapped);  // open() and open_fd(): parses and validates the map

  MappedFile file_;                     // empty for over_memory
  std::span<const std::uint8_t> bytes_;  // the map, or the memory of over_memory (a mapping keeps its address on move)
  std::string path_;
  std::vector<TensorEntry> tensors_;
  std::vector<std::uint32_t> by_name_;  // indices into tensors_, sorted by name
  std::map<std::string, std::string> metadata_;
  std::uint64_t padding_bytes_ = 0;
};

}  // namespace epk::container
