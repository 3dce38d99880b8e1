// Shape and strides of a served tensor without the heap (codec/serve/slot.h says why), under the daemon's names.
#pragma once

#include "codec/serve/slot.h"
#include "shm/protocol.h"

namespace epk::daemon {

using serve::Dims;
using serve::Shape;
using serve::Strides;
static_assert(serve::kMaxDims == shm::kMaxDims, "a served shape must fit the wire's");

}  // namespace epk::daemon
