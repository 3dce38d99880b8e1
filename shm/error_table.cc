#include "shm/error_table.h"

namespace epk::shm {

ErrorCode error_code_for(WireStatus s) {
  switch (s) {
    case WireStatus::kModelGone: return ErrorCode::kNotFound;
    case WireStatus::kBadVersion: return ErrorCode::kUnsupported;
    case WireStatus::kShuttingDown: return ErrorCode::kIo;
    case WireStatus::kDecodeFailed: return ErrorCode::kCorruptTile;
    case WireStatus::kBadMessage: return ErrorCode::kInvalidArgument;
    case WireStatus::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case WireStatus::kInternal: return ErrorCode::kInternal;
    default: break;
  }
  for (const ErrorRow& r : kErrorTable)
    if (r.wire == s) return r.code;
  return ErrorCode::kInternal;
}

}  // namespace epk::shm
