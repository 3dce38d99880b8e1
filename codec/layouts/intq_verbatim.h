// The stored parts of the intq kinds kept byte for byte (not public API; docs/FORMAT.md 11.3 and 11.4), each checked
// against its params: "gguf" (the ggml blocks of one tensor) and "bnb4" (a bitsandbytes 4-bit state's parts).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/layouts/bnb.h"
#include "codec/layouts/intq_entry.h"

namespace epk::layouts::intq::detail {

// A "gguf" entry: its ggml type, element count and the blocks buffer.
struct GgufStored {
  std::uint32_t type = 0;
  std::uint64_t n = 0;
  std::span<const std::uint8_t> blocks;
};
// Checks params.ggml_type (a type this build cannot dequantize is kUnsupported), the index shape against its block
// size, the blocks buffer's size and every block scale.
Result<GgufStored> read_gguf_entry(const Where& w, const json& j);

// A "bnb4" entry: views of its parts, as bnb::read_state takes them, over the entry's buffers.
struct BnbStored {
  std::vector<std::vector<std::int64_t>> shapes;  // the views' shapes, one per part present
  bnb::Views views;
};
// Checks that every buffer is a part declared in params.parts, each part's dtype and shape against its buffer's size,
// and that weight, absmax and quant_state are present. The state itself is bnb::read_state's to check.
Result<BnbStored> read_bnb_views(const Where& w, const json& j);

}  // namespace epk::layouts::intq::detail
