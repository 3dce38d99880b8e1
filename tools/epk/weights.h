// The source checkpoint's metadata carried through compress and decompress, and elapsed-time formatting.
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
