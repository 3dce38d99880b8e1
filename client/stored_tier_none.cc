#include "client/stored_tier.h"

namespace epk::client {

Result<std::unique_ptr<StoredTier>> StoredTier::open(Client&, const std::string& model, std::uint32_t) {
  return make_error(ErrorCode::kUnsupported, "model '" + model +
                                                 "': client-side decode needs a libepk built with the CUDA toolkit");
}

}  // namespace epk::client
