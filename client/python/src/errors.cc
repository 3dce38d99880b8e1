#include "errors.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "shm/error_table.h"

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
  raise_as(shm::error_row(e.code).python_class, e.message, code);
}

[[noreturn]] void raise_closed() { raise_as("Closed", "epk: the client is closed", "closed"); }

void bind_errors(nb::module_& m) {
  m.def(
      "_error_table",
      [] {
        nb::list rows;
        for (const shm::ErrorRow& r : shm::kErrorTable)
          rows.append(nb::make_tuple(error_code_name(r.code), r.c_status, r.python_class));
        return rows;
      },
      "libepk's error table (shm/error_table.h): (code name, C ABI status, exception class name) per code.");
  m.def(
      "_raise_error",
      [](const std::string& code, const std::string& message) {
        for (const shm::ErrorRow& r : shm::kErrorTable)
          if (code == error_code_name(r.code)) raise_error(Error{r.code, message}, false);
        raise_as("InvalidArgument", "epk: no error code '" + code + "'", "invalid-argument");
      },
      nb::arg("code"), nb::arg("message"),
      "Raises what a libepk error of `code` becomes in Python: the table's class, with .code set.");
}

}  // namespace epk::py
