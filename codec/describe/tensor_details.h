// What `epk inspect` reports of a stored tensor beyond its index entry, by its encoding: a lattice-rans stream's
// parameters (target rate, tables, tiles, origin) and an intq tensor's split of bits per weight (FORMAT.md 11.6).
// Read from the params and buffer sizes only: no buffer is read or checksummed, so inspecting a large file is cheap.
#pragma once

#include <string>

#include "codec/common/result.h"
#include "codec/container/reader.h"

namespace epk::describe {

struct TensorDetails {
  std::string section;  // the JSON key the details go under ("lattice_rans", "intq"); empty: none
  std::string json;     // a JSON object (when section is set)
  std::string summary;  // one line for the text listing, without indentation or newline (may be empty)
};

// kBadInput naming the tensor and field for malformed params.
Result<TensorDetails> tensor_details(const container::Reader& reader, const container::TensorEntry& entry);

}  // namespace epk::describe
