// Python exceptions for libepk's errors. The classes live in epk/_errors.py (docstrings, hierarchy); each raise
// sets the instance's `code` to libepk's error code name (or the name given).
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "codec/common/result.h"

namespace epk::py {

// Raises epk.<cls_name>(message) with .code = `code`.
[[noreturn]] void raise_as(const char* cls_name, const std::string& message, const char* code);
// The epk exception class for e.code. `gone`: the connection to epkd was lost by (or before) the call that failed,
// which is ConnectionLost whatever the code.
[[noreturn]] void raise_error(const Error& e, bool gone);
// epk.Closed: a call on a closed Client.
[[noreturn]] void raise_closed();
// epk._epk._error_table and _raise_error: the table itself, and any code raised as the package raises it.
void bind_errors(nanobind::module_& m);

}  // namespace epk::py
