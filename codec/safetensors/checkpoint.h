// A checkpoint: one .safetensors file or a sharded set described by a `*.safetensors.index.json`, seen as one flat
// list of tensors.
//
// open(path) accepts
//   - a .safetensors file;
//   - an index file ({"metadata": {...}, "weight_map": {tensor: shard file}}; shard paths are relative to the index's
//     directory, must be relative and must not contain "..");
//   - a directory, holding (first match wins) model.safetensors.index.json, model.safetensors, exactly one
//     *.safetensors.index.json, or exactly one *.safetensors.
// For an index: every shard named is opened once; every tensor listed must be present in its shard; a tensor that a
// shard holds but the weight_map does not list is refused by default (UnlistedTensors::kRefuse): the index is the
// checkpoint's contract, and a stray tensor means a stale or mixed-up shard set; compressing it silently (or dropping
// it silently) would hide that. kInclude takes such tensors in and lists them in unlisted().
//
// Tensor order (deterministic): shards in ascending byte order of their file names (model-00001-of-00003... sorts as
// numbered), and inside each shard in file order (ascending data offsets), i.e. the order of the bytes on disk.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/safetensors/reader.h"

namespace epk::safetensors {

enum class UnlistedTensors { kRefuse, kInclude };

struct CheckpointOptions {
  UnlistedTensors unlisted = UnlistedTensors::kRefuse;
};

class Checkpoint {
 public:
  Checkpoint() = default;
  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // Errors: kIo, kNotFound (a directory with no checkpoint, an index naming a missing shard), kBadInput (malformed
  // index or shard, inconsistent index; messages name the file, the tensor and the field), kUnsupported.
  static Result<Checkpoint> open(const std::string& path, const CheckpointOptions& options = {});

  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // The shard (index into shards()) holding tensors()[i].
  std::size_t shard_of(std::size_t i) const { return shard_of_[i]; }
  const std::vector<File>& shards() const { return shards_; }

  // For an index: its path; empty for a single file.
  const std::string& index_path() const { return index_path_; }
  // The index's "metadata" (values that are not strings kept as their JSON text, e.g. total_size "1234"); for a
  // single file, its __metadata__.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Names of shard tensors the weight_map does not list (only with UnlistedTensors::kInclude), in tensors() order.
  const std::vector<std::string>& unlisted() const { return unlisted_; }

 private:
  static Result<Checkpoint> open_single(const std::string& path);
  static Result<Checkpoint> open_index(const std::string& path, const CheckpointOptions& options);
  Status build_index(const std::string& origin);

  std::vector<File> shards_;
  std::vector<TensorView> tensors_;
  std::vector<std::size_t> shard_of_;
  std::unordered_map<std::string_view, std::size_t> index_;  // views into tensors_[i].name
  std::string index_path_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> unlisted_;
};

}  // namespace epk::safetensors
