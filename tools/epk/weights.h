// Source weights as float32 and error figures, shared by epk compress and epk verify.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/reader.h"

namespace epk::cli {

// The tensor's elements as float32 (F32, BF16, F16, F8_E4M3, F8_E5M2, I8); kUnsupported naming it otherwise.
Result<std::vector<float>> source_f32(const safetensors::TensorView& t);

// sqrt(sum (x - ref)^2 / sum ref^2); 0 when both are all zero, infinity when only ref is.
double relative_l2(std::span<const float> x, std::span<const float> ref);

// The checkpoint's safetensors __metadata__ as a JSON object of strings, for the .epk metadata key
// `source_metadata` (docs/FORMAT.md 6.1) that decompress writes back: the first shard's (a sharded checkpoint's
// shards normally all carry {"format": "pt"}).
std::string source_metadata_json(const safetensors::Checkpoint& c);

// The __metadata__ decompress and unpack write: the source's as recorded in `source_metadata`, byte for byte, plus
// the .epk's `source` and `tool` as "epk.source" and "epk.tool" where the source has no such keys. kBadInput naming
// the file when source_metadata is not a JSON object of strings.
Result<std::map<std::string, std::string>> safetensors_metadata(const container::Reader& reader);

// Elapsed seconds as "1:05" or "1:02:03".
std::string clock_string(double seconds);

}  // namespace epk::cli
