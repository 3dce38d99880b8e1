// epk.Lease and epk.Part: a lease's properties, its arrays (the main one, a packed layout's parts, rowwise scales,
// an unsigned-integer view) exported through DLPack (dlpack_export.h) without a copy, and its release.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "dlpack_export.h"
#include "errors.h"
#include "lease.h"
#include "shm/layout.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace epk::py {

namespace {

// An array inside a lease's slot: a packed layout's part, rowwise scales, or an unsigned-integer view. Holds its
// lease (the Python object) alive.
struct Part {
  nb::object owner;  // the Lease
  std::string name;
  ArrayView view;
  bool uint_view = false;

  Lease& lease() const { return nb::cast<Lease&>(owner); }
};

ArrayView contiguous(const void* data, DLDevice dev, DType dtype, std::vector<std::int64_t> shape, bool ro) {
  ArrayView v;
  v.data = data;
  v.device = dev;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.strides.assign(v.shape.size(), 1);
  for (std::size_t i = v.shape.size(); i-- > 1;) v.strides[i - 1] = v.strides[i] * v.shape[i];
  v.read_only = ro;
  return v;
}

nb::object capsule(const ArrayView& v, bool uint_view, nb::handle owner, nb::handle max_version, nb::handle dl_device,
                   nb::handle copy) {
  if (!copy.is_none() && nb::cast<bool>(copy)) {
    PyErr_SetString(PyExc_BufferError, "epk: leases export without copying (copy=True is not supported)");
    throw nb::python_error();
  }
  if (!dl_device.is_none()) {
    auto want = nb::cast<std::pair<int, int>>(dl_device);
    if (want.first != v.device.device_type || want.second != v.device.device_id) {
      PyErr_SetString(PyExc_BufferError, "epk: a lease exports only on its own device");
      throw nb::python_error();
    }
  }
  bool versioned = false;
  if (!max_version.is_none()) versioned = nb::cast<int>(max_version[0]) >= 1;
  auto dt = uint_view ? dlpack_uint_dtype(v.dtype) : dlpack_dtype(v.dtype);
  if (!dt) raise_error(dt.error(), false);
  PyObject* cap = export_dlpack(v, *dt, owner.ptr(), versioned);
  if (cap == nullptr) throw nb::python_error();
  return nb::steal(cap);
}

nb::tuple dims(const std::vector<std::int64_t>& v) {
  nb::list l;
  for (auto x : v) l.append(x);
  return nb::tuple(l);
}

Part make_part(nb::handle lease_obj, std::string name, ArrayView v, bool uint_view) {
  Part p;
  p.owner = nb::borrow(lease_obj);
  p.name = std::move(name);
  p.view = std::move(v);
  p.uint_view = uint_view;
  return p;
}

constexpr const char* kDlpackDoc =
    "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None)\n\n"
    "A DLPack capsule of the slot, without a copy. Device leases: the consumer's stream waits for the decode\n"
    "(the array-API rule: -1 no synchronisation, None and 1 the legacy default stream, 2 the per-thread default\n"
    "stream, any other integer a cudaStream_t; 0 is refused as ambiguous). Host leases take stream=None.\n"
    "max_version >= (1, 0) gives a DLPack 1.x capsule, marked read-only for host pools (clients map them\n"
    "read-only). The capsule keeps the lease object alive until the consumer frees its tensor; release() ends the\n"
    "lease regardless, after which the memory may be reused by epkd.";

}  // namespace

void bind_lease(nb::module_& m) {
  nb::class_<Part>(m, "Part",
                   "One array inside a lease's slot: a packed layout's part (qweight, qzeros, scales, g_idx, perm),\n"
                   "a rowwise layout's row scales, or an unsigned-integer view (Lease.bits_view). A DLPack producer\n"
                   "like its lease; it keeps the lease object alive, but release() of the lease ends it too.")
      .def_prop_ro("name", [](const Part& p) { return p.name; })
      .def_prop_ro("shape", [](const Part& p) { return dims(p.view.shape); })
      .def_prop_ro("dtype", [](const Part& p) {
        return p.uint_view ? "U" + std::to_string(epk::dtype_bits(p.view.dtype))
                           : std::string(epk::dtype_name(p.view.dtype));
      })
      .def_prop_ro("data_ptr", [](const Part& p) { return reinterpret_cast<std::uintptr_t>(p.view.data); })
      .def("__dlpack__",
           [](const Part& p, nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy) {
             p.lease().sync_for(stream);
             return capsule(p.view, p.uint_view, p.owner, max_version, dl_device, copy);
           },
           nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(), "dl_device"_a = nb::none(),
           "copy"_a = nb::none(), kDlpackDoc)
      .def("__dlpack_device__",
           [](const Part& p) { return nb::make_tuple(p.view.device.device_type, p.view.device.device_id); })
      .def("__repr__", [](const Part& p) {
        return "<epk.Part " + p.name + " " + std::string(epk::dtype_name(p.view.dtype)) + " of '" + p.lease().tensor +
               "'>";
      });

  nb::class_<Lease>(m, "Lease",
                    "A pinned slot of epkd's cache: one tensor in one layout, zero-copy. Made by Client.acquire.\n\n"
                    "np.from_dlpack(lease), torch.from_dlpack(lease) and CuPy take it without a copy (DLPack; see\n"
                    "__dlpack__ for the stream rule). Packed integer layouts hold several arrays: lease.parts.\n"
                    "Rowwise layouts: the lease is the values, lease.row_scales the per-row fp32 scales.\n\n"
                    "End it with release() (or a with block). A lease collected unreleased (no reference and no\n"
                    "array made from it left) is released safely but slowly: a device lease first synchronises its\n"
                    "device (all of this process's work on it), because nothing says which streams still read the\n"
                    "slot; then epkd is told without waiting for its answer. epkd never reuses bytes before that.")
      .def_prop_ro("model", [](const Lease& l) { return l.model; })
      .def_prop_ro("tensor", [](const Lease& l) { return l.tensor; })
      .def_prop_ro("layout", [](const Lease& l) { return std::string(epk::shm::layout_name(l.layout)); })
      .def_prop_ro("shape",
                   [](const Lease& l) {
                     nb::list s;
                     for (auto x : l.t.shape) s.append(x);
                     return nb::tuple(s);
                   },
                   "The tensor's shape; for packed layouts the slot's geometry descriptor (shm/layout.h).")
      .def_prop_ro("strides", [](const Lease& l) { return dims(l.t.strides); }, "In elements.")
      .def_prop_ro("dtype", [](const Lease& l) { return std::string(epk::dtype_name(l.t.dtype)); },
                   "The safetensors name (BF16, F32, I8, F8_E4M3, ...); packed layouts: the scales' dtype.")
      .def_prop_ro("nbytes", [](const Lease& l) { return l.t.bytes; }, "The slot's bytes (every part).")
      .def_prop_ro("data_ptr", [](const Lease& l) { return reinterpret_cast<std::uintptr_t>(l.t.data); })
      .def_prop_ro("device", [](const Lease& l) { return l.t.device; }, "The CUDA device, -1 for a host slot.")
      .def_prop_ro("on_device", [](const Lease& l) { return l.t.on_device; })
      .def_prop_ro("released", [](const Lease& l) {
        std::lock_guard<std::mutex> lock(l.core->mu);
        return l.released;
      })
      .def_prop_ro("row_scales",
                   [](nb::handle self) -> nb::object {
                     Lease& l = nb::cast<Lease&>(self);
                     if (l.t.row_scales == nullptr) return nb::none();
                     return nb::cast(make_part(self, "row_scales",
                                               contiguous(l.t.row_scales, l.dl_device(), epk::DType::kF32,
                                                          {static_cast<std::int64_t>(l.t.shape[0])}, !l.t.on_device),
                                               false));
                   },
                   "Rowwise layouts: the per-row fp32 scales (weight = value * scale[row]); None otherwise.")
      .def_prop_ro("parts",
                   [](nb::handle self) {
                     Lease& l = nb::cast<Lease&>(self);
                     nb::dict d;
                     for (const auto& p : l.t.parts) {
                       std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
                       d[nb::str(p.name.data(), p.name.size())] =
                           make_part(self, std::string(p.name),
                                     contiguous(p.data, l.dl_device(), p.dtype, std::move(shape), !l.t.on_device),
                                     false);
                     }
                     return d;
                   },
                   "Packed integer layouts (gptq, gptq-v2, awq, marlin): {name: Part} (qweight, qzeros, scales,\n"
                   "g_idx, perm, as the layout has them); empty for other layouts.")
      .def("bits_view",
           [](nb::handle self) {
             Lease& l = nb::cast<Lease&>(self);
             return make_part(self, "bits", l.main_view(), true);
           },
           "The lease's array with its elements as unsigned integers of the same width (bf16 -> uint16,\n"
           "fp8 -> uint8), for consumers without those types (NumPy).")
      .def("__dlpack__",
           [](nb::handle self, nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy) {
             Lease& l = nb::cast<Lease&>(self);
             ArrayView v = l.main_view();
             l.sync_for(stream);
             return capsule(v, false, self, max_version, dl_device, copy);
           },
           nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(), "dl_device"_a = nb::none(),
           "copy"_a = nb::none(), kDlpackDoc)
      .def("__dlpack_device__",
           [](const Lease& l) {
             DLDevice d = l.dl_device();
             return nb::make_tuple(d.device_type, d.device_id);
           })
      .def("wait",
           [](Lease& l, nb::handle stream) {
             l.sync_for(stream.is_none() ? nb::handle(nb::int_(1)) : stream);
           },
           "stream"_a = nb::none(),
           "Makes `stream` (None: the legacy default stream; a pointer or 2 as for __dlpack__) wait for the\n"
           "decode; raises DecodeError if the decode failed. No-op for host leases.")
      .def("release", [](Lease& l, nb::handle after) { l.release(after); }, "after"_a = nb::none(),
           "Ends the lease; idempotent. Device leases: records this client's event on `after` (a torch.cuda.Stream,\n"
           "a CuPy stream, a stream pointer; None: torch's current stream on the lease's device when torch has\n"
           "initialised CUDA, else the legacy default stream) after the last kernel reading the slot, and epkd\n"
           "reuses the bytes only once it has completed. Host leases: the release itself is the fence. Arrays\n"
           "made from the lease must not be used after it. If the connection was lost, epkd has already dropped\n"
           "the pins, and release does nothing.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Lease& l, nb::args) { l.release(nb::none()); })
      .def("__repr__", [](const Lease& l) {
        return "<epk.Lease " + l.model + ":" + l.tensor + " " + std::string(epk::shm::layout_name(l.layout)) +
               (l.t.on_device ? " cuda:" + std::to_string(l.t.device) : std::string(" host")) +
               (l.released ? " released>" : ">");
      });
}

}  // namespace epk::py
