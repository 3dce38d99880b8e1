#include "errors.h"

#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace epk::py {

namespace {

nb::object error_class(const char* name) {
  // Kept for the process's life on purpose: a static nb::object would be released after the interpreter is gone.
  static PyObject* mod = nb::module_::import_("epk._errors").release().ptr();
  return nb::handle(mod).attr(name);
}

}  // namespace

[[noreturn]] void raise_as(const char* cls_name, const std::string& message, const char* code) {
  nb::object cls = error_class(cls_name);
  nb::object inst = cls(nb::str(message.data(), message.size()));
  inst.attr("code") = nb::str(code);
  PyErr_SetObject(cls.ptr(), inst.ptr());
  throw nb::python_error();
}

[[noreturn]] void raise_error(const Error& e, bool gone) {
  const char* code = error_code_name(e.code);
  if (gone) raise_as("ConnectionLost", e.message, code);
  switch (e.code) {
    case ErrorCode::kNotFound: raise_as("NotFound", e.message, code);
    case ErrorCode::kNoSpace: raise_as("NoSpace", e.message, code);
    case ErrorCode::kQuota: raise_as("QuotaExceeded", e.message, code);
    case ErrorCode::kPermission: raise_as("PermissionDenied", e.message, code);
    case ErrorCode::kCorruptTile:
    case ErrorCode::kChecksum: raise_as("DecodeError", e.message, code);
    case ErrorCode::kUnsupported: raise_as("Unsupported", e.message, code);
    case ErrorCode::kInvalidArgument: raise_as("InvalidArgument", e.message, code);
    case ErrorCode::kCuda: raise_as("CudaError", e.message, code);
    default: raise_as("Error", e.message, code);
  }
}

[[noreturn]] void raise_closed() { raise_as("Closed", "epk: the client is closed", "closed"); }

}  // namespace epk::py
