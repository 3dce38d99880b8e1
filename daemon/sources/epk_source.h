// A ModelSource over a mapped .epk file: `epkd --model NAME=FILE.epk` opens models through open_epk_source().
//
// Open validates once: the container's header and index (container::Reader), then one serving-layer producer per
// tensor (codec/serve/producer.h: a lattice-rans tensor's params, buffers and stream tables, an intq tensor's params);
// a file that fails any of it is refused with an error naming the file, tensor and field, and no tensor data is read
// until a tensor is asked for. served() and produce() are the producers' (the layouts each encoding serves are listed
// in producer.h); after every produce the tensor's buffer checksums (XXH3) are checked: a corrupt tile is reported by
// tile number, and corrupt bytes that still decode fail their checksum; neither is ever served.
//
// With `resident` (config resident_compressed = true) open() also reads every tensor section into epkd's memory and
// checksums it there (daemon/sources/resident_model.h); produce() then decodes from that memory and the file is unmapped.
// Without it, tensors are read through the file's map when asked for.
#pragma once

#include <memory>
#include <string>

#include "daemon/sources/model_source.h"
#include "daemon/sources/resident_model.h"

namespace epk::daemon {

struct EpkSourceOptions {
  bool resident = false;
  ResidentOptions resident_options;
};

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path, const EpkSourceOptions& options = {});

}  // namespace epk::daemon
