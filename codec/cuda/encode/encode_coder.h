// rans::encode_fields on the device: the tables built on the host (rans::build_tables) from the fields' counts,
// one warp a tile (encode_rans.cu), the tiles packed at the offsets their word counts give, and the payload and
// the final states brought back through a staged copier. Host-only; one stream, one caller at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "codec/common/result.h"
#include "codec/cuda/encode/encode_copy.h"
#include "codec/cuda/encode/encode_device.h"
#include "codec/cuda/encode/encode_fields.h"
#include "codec/model/tables.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rans/encoder.h"

namespace epk::cuda {

class TileCoder {
 public:
  // copier: the owner's, used by one host thread at a time (the one calling code()). Installs the process's
  // BlockRecycler pinner (cudaHostRegister), so that payload blocks kept for reuse from then on are pinned.
  TileCoder(cudaStream_t stream, StagedCopier& copier);

  // rans::encode_fields of fs under counts c, with the tensor's shape in g; the payload's and states' download adds
  // its wall seconds to *download_seconds.
  Result<rans::EncodedTensor> code(const FieldSet& fs, const model::FieldCounts& c, std::vector<float> row_scales,
                                   const rans::EncodeGeometry& g, double* download_seconds);

 private:
  cudaStream_t stream_;
  StagedCopier& copier_;
  DeviceBuffer tables_, scratch_, words_, states_, offsets_, payload_;
  PinnedBuffer pin_words_, pin_tables_;
};

}  // namespace epk::cuda
