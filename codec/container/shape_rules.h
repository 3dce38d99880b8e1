// The dimension rules of docs/FORMAT.md that an index entry decides by itself (encoding, dtype, shape), in one place:
// Reader::open applies them to every entry, so `epk inspect`, `epk verify`, `epk decompress` and epkd refuse a file
// that breaks one before anything is sized by its shape; Writer::add_tensor applies them before writing (rule 8.3).
//   5.3   rank <= 8; the element count (1 for rank 0), element count * dtype bits and element count * 32 (the widest
//         element any decoder writes, so every decoded size fits in u64) do not overflow u64.
//   10.1  lattice-rans: rank 2, 1 <= rows < 2^32 and 1 <= cols < 2^32.
// Rules that need an encoding's params (10.3 rows and cols equal to the shape, 11.2-11.4) are checked by that
// encoding's reader (codec/rans/container_io.h, codec/layouts/intq_io.h), which inspect, verify and the decoders call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "codec/common/dtype.h"
#include "codec/container/format.h"

namespace epk::container {

struct ShapeFault {
  std::string field;   // "rank", "shape", "shape[1]": the index field at fault
  std::string detail;  // what is wrong, with the value and the rule
};

// nullopt when the entry keeps every rule above.
std::optional<ShapeFault> check_shape(Encoding encoding, DType dtype, std::span<const std::uint64_t> shape);

}  // namespace epk::container
