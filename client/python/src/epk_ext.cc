// epk._epk: the Python client of epkd, nanobind over libepk's C++ API (client/client.h). The Python-facing
// documentation is in the docstrings of the bindings and in epk/_epk.pyi; the package's __init__ re-exports these
// classes. The module's files: client_core.h (the connection a Client shares with its leases: ownership, threads),
// lease.h (a pinned slot), errors.h (epk's exceptions), cuda_streams.h (Python's stream objects), dlpack_export.h
// (DLPack capsules), and the bindings of each class: shard_bindings.cc, lease_bindings.cc, client_bindings.cc,
// stored_bindings.cc (client-side decode).
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "errors.h"

namespace nb = nanobind;

NB_MODULE(_epk, m) {
  using namespace epk::py;
  m.doc() = "epk's extension module: the Client and Lease classes (import them from epk).";
  // Leases alive at exit are normal (an array made from one holds it); nanobind would report each as a leak.
  nb::set_leak_warnings(false);
  m.attr("DEFAULT_SOCKET") = kDefaultSocket;
#if EPK_PY_CUDA
  m.attr("HAS_CUDA") = true;
#else
  m.attr("HAS_CUDA") = false;
#endif

  bind_errors(m);
  bind_shard(m);
  bind_lease(m);
  bind_client(m);
  bind_stored(m);
}
