// The one error table (shm/error_table.h; a row per code is checked at compile time there): C statuses that name one
// Python class each, and what a client reports for epkd's wire status of an error of the same class as the error.
#include "shm/error_table.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace epk::shm {
namespace {

TEST(ErrorTable, RowsSharingACStatusShareTheirPythonClass) {
  std::map<int, std::string> by_status;
  for (const ErrorRow& r : kErrorTable) {
    auto [it, fresh] = by_status.emplace(r.c_status, r.python_class);
    EXPECT_TRUE(fresh || it->second == r.python_class) << error_code_name(r.code);
    EXPECT_GE(r.c_status, 1);
    EXPECT_LE(r.c_status, 11);
  }
}

TEST(ErrorTable, AnErrorFromEpkdReadsAsItsOwnClassInTheClient) {
  for (const ErrorRow& r : kErrorTable) {
    if (r.code == ErrorCode::kCuda) continue;  // epkd's CUDA failures are internal errors to its clients
    const ErrorCode seen = error_code_for(r.wire);
    EXPECT_STREQ(error_row(seen).python_class, r.python_class) << error_code_name(r.code);
  }
  EXPECT_EQ(error_code_for(WireStatus::kModelGone), ErrorCode::kNotFound);
  EXPECT_EQ(error_code_for(WireStatus::kBadVersion), ErrorCode::kUnsupported);
  EXPECT_EQ(error_code_for(WireStatus::kShuttingDown), ErrorCode::kIo);
  EXPECT_EQ(error_code_for(WireStatus::kInvalidArgument), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_for(static_cast<WireStatus>(999)), ErrorCode::kInternal);
}

}  // namespace
}  // namespace epk::shm
