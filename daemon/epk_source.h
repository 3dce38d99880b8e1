// The seam for .epk models: `epkd --model NAME=FILE.epk` opens models through this function. The container reader
// (branch `container`) and the CPU codec (branch `codec`) are not in this branch yet, so it refuses every file with
// kUnsupported; the lead replaces the body of open_epk_source() in epk_source.cc with an EpkSource (a ModelSource over
// the mapped container: tensors() from the index, served() from each tensor's encoding, produce() running the CPU
// decoder into the slot).
#pragma once

#include <memory>
#include <string>

#include "daemon/model_source.h"

namespace epk::daemon {

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path);

}  // namespace epk::daemon
