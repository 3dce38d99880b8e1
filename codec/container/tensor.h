// A tensor's entry in the .epk index (docs/FORMAT.md rule 5), as the reader returns it and the writer records it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/container/format.h"

namespace epk::container {

struct BufferRef {
  std::string name;
  std::uint64_t offset = 0;  // absolute, in the file (the index stores it relative to the section)
  std::uint64_t size = 0;
  std::uint64_t xxh3 = 0;
};

struct TensorEntry {
  std::string name;
  std::vector<std::uint64_t> shape;
  DType dtype = DType::kF32;
  Encoding encoding = Encoding::kRaw;
  std::string params_json;
  std::uint64_t section_offset = 0;
  std::uint64_t section_size = 0;
  std::vector<BufferRef> buffers;

  // Product of the shape (1 for a scalar). The reader guarantees it does not overflow.
  std::uint64_t element_count() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

}  // namespace epk::container
