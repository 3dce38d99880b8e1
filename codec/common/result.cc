#include "codec/common/result.h"

#include <cstring>

namespace epk {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kIo: return "io";
    case ErrorCode::kBadInput: return "bad-input";
    case ErrorCode::kChecksum: return "checksum";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kCorruptTile: return "corrupt-tile";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kNotFound: return "not-found";
    case ErrorCode::kCuda: return "cuda";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kNoSpace: return "no-space";
    case ErrorCode::kPermission: return "permission";
    case ErrorCode::kQuota: return "over-quota";
  }
  return "unknown";
}

std::string Error::to_string() const { return std::string(error_code_name(code)) + ": " + message; }

Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

Error make_errno_error(std::string message, int errno_value) {
  message += ": ";
  message += std::strerror(errno_value);
  return Error{ErrorCode::kIo, std::move(message)};
}

}  // namespace epk
