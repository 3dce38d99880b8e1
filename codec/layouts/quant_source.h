// A quantized checkpoint seen as a list of tensors to import or convert: GPTQ / AWQ / compressed-tensors /
// bitsandbytes safetensors checkpoints (with quantize_config.json or config.json beside them), GGUF files, and .epk
// files of raw and intq tensors (what `epk convert` reads besides checkpoints: intq "int" tensors exactly, the
// stored GGUF blocks and bitsandbytes states dequantized, kDense).
// Quantized linears come out as one item each (named PREFIX.weight), in their exact form: the logical integer tensor
// (GPTQ, AWQ, compressed-tensors, GGUF Q4_0/Q8_0), GGUF blocks (K-quants and other float-grid types) or a
// bitsandbytes 4-bit state. Every other tensor is raw. Integer tensors are read on demand (load_int), so a large
// checkpoint is never held decoded in memory at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/layouts/bnb.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/quant_config.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/safetensors/checkpoint.h"

namespace epk::layouts {

struct SourceItem {
  enum class Kind { kRaw, kInt, kGguf, kBnb4, kDense };
  Kind kind = Kind::kRaw;
  std::string name;                               // raw: the tensor's name; quantized: PREFIX.weight
  DType dtype = DType::kF32;                      // raw: its dtype; int: the dense dtype (scale dtype)
  std::vector<std::uint64_t> shape;               // raw: its shape
  std::span<const std::uint8_t> bytes;            // raw, gguf: the bytes in the source's map
  std::string source;  // int: "gptq", "gptq-v2", "awq", "ct", "gguf-q4_0", "gguf-q8_0", "intq"; dense: "gguf", "bnb4"
  std::function<Result<QuantTensor>()> load_int;  // int only
  std::function<Result<std::vector<float>>()> load_dense;  // dense only: the weights as float32, row-major
  gguf::TensorInfo gguf_info;                     // gguf only
  bnb::Views bnb_views;                           // bnb4 only
};

class QuantSource {
 public:
  // A .gguf file, an .epk file (its checksums verified first; a tensor of another encoding is kUnsupported, naming
  // it), or anything safetensors::Checkpoint::open takes. For safetensors the config is read from
  // quantize_config.json, else config.json, in the checkpoint's directory; a checkpoint without either is taken as
  // unquantized (every tensor raw). Errors name the file and field.
  static Result<std::unique_ptr<QuantSource>> open(const std::string& path);

  const std::vector<SourceItem>& items() const { return items_; }
  // "gptq", "awq", "compressed-tensors", "bitsandbytes", "gguf", "epk", or "none".
  const std::string& format() const { return format_; }
  const std::string& config_path() const { return config_path_; }

 private:
  Status open_gguf(const std::string& path);
  Status open_safetensors(const std::string& path);
  Status open_epk(const std::string& path);

  std::optional<safetensors::Checkpoint> checkpoint_;
  std::optional<gguf::File> gguf_;
  std::optional<container::Reader> epk_;
  std::vector<TensorView> views_;  // layouts views of the checkpoint's tensors (names point into checkpoint_)
  QuantConfig config_;
  std::string format_ = "none";
  std::string config_path_;
  std::vector<SourceItem> items_;
};

}  // namespace epk::layouts
