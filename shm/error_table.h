// One table from libepk's error codes to every name they go by: the code's own name (codec/common/result.h), the C
// ABI status (client/epk.h's EPK_E_*; c_api.cc checks them at compile time), the wire status epkd answers a request
// with, and the Python exception class (client/python/epk/_errors.py). libepk's C ABI, the Python package and epkd
// all look here, so one error reads the same through every binding. Host code, no allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "codec/common/result.h"
#include "shm/protocol.h"

namespace epk::shm {

struct ErrorRow {
  ErrorCode code;
  int c_status;              // EPK_E_*
  WireStatus wire;           // what epkd sends for it
  const char* python_class;  // a class of epk._errors
};

inline constexpr std::array<ErrorRow, 12> kErrorTable = {{
    {ErrorCode::kIo, 1, WireStatus::kInternal, "Error"},
    // A malformed model file surfaces like a corrupt one: the tensor cannot be produced.
    {ErrorCode::kBadInput, 2, WireStatus::kDecodeFailed, "DecodeError"},
    {ErrorCode::kChecksum, 6, WireStatus::kDecodeFailed, "DecodeError"},
    {ErrorCode::kUnsupported, 3, WireStatus::kUnsupported, "Unsupported"},
    {ErrorCode::kCorruptTile, 6, WireStatus::kDecodeFailed, "DecodeError"},
    {ErrorCode::kInvalidArgument, 7, WireStatus::kBadMessage, "InvalidArgument"},
    {ErrorCode::kNotFound, 4, WireStatus::kNotFound, "NotFound"},
    // epkd's own CUDA failures are internal errors to its clients; libepk's (client-side decode) are CudaError.
    {ErrorCode::kCuda, 11, WireStatus::kInternal, "CudaError"},
    {ErrorCode::kInternal, 8, WireStatus::kInternal, "Error"},
    {ErrorCode::kNoSpace, 5, WireStatus::kNoSpace, "NoSpace"},
    {ErrorCode::kPermission, 9, WireStatus::kDenied, "PermissionDenied"},
    {ErrorCode::kQuota, 10, WireStatus::kOverQuota, "QuotaExceeded"},
}};

// Row i is ErrorCode i's, so a code indexes its row.
constexpr bool rows_in_code_order() {
  for (std::size_t i = 0; i < kErrorTable.size(); ++i)
    if (static_cast<std::size_t>(kErrorTable[i].code) != i) return false;
  return kErrorTable.size() == static_cast<std::size_t>(ErrorCode::kQuota) + 1;
}
static_assert(rows_in_code_order(), "one row per ErrorCode, in the enum's order");

inline const ErrorRow& error_row(ErrorCode code) { return kErrorTable[static_cast<std::size_t>(code)]; }
// The code libepk reports for an error reply of status `s`: the table's inverse, with the statuses no row sends
// (a retired model, a protocol version, a daemon shutting down) as the nearest code.
ErrorCode error_code_for(WireStatus s);

}  // namespace epk::shm
