// libepk without CUDA: device pools are refused at connect.
#include "client/device_client.h"

namespace epk::client {

Result<std::unique_ptr<DeviceSide>> DeviceSide::create(std::vector<shm::IpcEventHandle>) {
  return make_error(ErrorCode::kUnsupported, "epk client: this libepk was built without CUDA (device pools)");
}

}  // namespace epk::client
