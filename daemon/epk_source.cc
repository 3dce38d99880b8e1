#include "daemon/epk_source.h"

namespace epk::daemon {

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path) {
  return make_error(ErrorCode::kUnsupported,
                    path + ": the .epk reader is not in this build yet (use --synthetic for a test model)");
}

}  // namespace epk::daemon
