#include "cuda_streams.h"

#include <cstdint>
#include <string>

#include "errors.h"
#if EPK_PY_CUDA
#include "shm/cuda_driver.h"
#endif

namespace nb = nanobind;

namespace epk::py {

void synchronize_device(int device) noexcept {
#if EPK_PY_CUDA
  const auto& d = shm::detail::driver();
  if (d.ok && shm::detail::make_current(device)) (void)d.CtxSynchronize();
#else
  (void)device;
#endif
}

void* stream_from_int(long long v) {
  if (v == 0) {
    raise_as("InvalidArgument",
             "epk: stream 0 is ambiguous for CUDA (DLPack): pass None or 1 (legacy default), 2 (per-thread default) "
             "or a stream pointer",
             "invalid-argument");
  }
  if (v == 1) return nullptr;  // libepk: null is the legacy default stream (CU_STREAM_LEGACY)
  if (v < 0) raise_as("InvalidArgument", "epk: negative stream " + std::to_string(v), "invalid-argument");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));
}

void* stream_from_handle(long long v) {
  if (v < 0) raise_as("InvalidArgument", "epk: negative stream " + std::to_string(v), "invalid-argument");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));  // libepk: null is the legacy default stream
}

void* release_stream(nb::handle after, int device) {
  if (after.is_none()) {
    nb::object modules = nb::module_::import_("sys").attr("modules");
    if (!modules.attr("__contains__")("torch")) return nullptr;
    nb::object torch = modules["torch"];
    if (!nb::cast<bool>(torch.attr("cuda").attr("is_initialized")())) return nullptr;
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(
        nb::cast<long long>(torch.attr("cuda").attr("current_stream")(device).attr("cuda_stream"))));
  }
  if (nb::hasattr(after, "cuda_stream")) return stream_from_handle(nb::cast<long long>(after.attr("cuda_stream")));
  if (nb::hasattr(after, "ptr")) return stream_from_handle(nb::cast<long long>(after.attr("ptr")));
  if (nb::isinstance<nb::int_>(after)) return stream_from_handle(nb::cast<long long>(after));
  raise_as("InvalidArgument", "epk: release(after=...) takes a torch.cuda.Stream, a CuPy stream, a stream pointer "
           "or None", "invalid-argument");
}

}  // namespace epk::py
