// epk._epk: the Python client of epkd, nanobind over libepk's C++ API (client/client.h). The Python-facing
// documentation is in the docstrings below and in epk/_epk.pyi; the package's __init__ re-exports these classes.
//
// Ownership. A Client holds a shared ClientCore (the libepk connection and its pool mappings); every Lease holds the
// same core, so the mappings outlive the last lease object (and every array made from one: a DLPack capsule keeps its
// lease alive). Client.close() releases every pin at once, but the socket (and the mappings) go only when the last
// lease object does.
//
// Threads. Every libepk call runs without the GIL and under ClientCore::mu, so one Client may be shared by threads
// (calls are serialised, as in libepk) and close() cannot race a call.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "client/client.h"
#include "dlpack_export.h"
#include "shm/layout.h"
#include "shm/shard.h"
#if EPK_PY_CUDA
#include "shm/cuda_driver.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace epk::py {
namespace {

constexpr const char* kDefaultSocket = "/run/epkd/epkd.sock";  // systemd/epkd.socket's ListenStream

// ---- errors: the classes live in epk/_errors.py (docstrings, hierarchy); looked up once.

nb::object error_class(const char* name) {
  // Kept for the process's life on purpose: a static nb::object would be released after the interpreter is gone.
  static PyObject* mod = nb::module_::import_("epk._errors").release().ptr();
  return nb::handle(mod).attr(name);
}

[[noreturn]] void raise_as(const char* cls_name, const std::string& message, const char* code) {
  nb::object cls = error_class(cls_name);
  nb::object inst = cls(nb::str(message.data(), message.size()));
  inst.attr("code") = nb::str(code);
  PyErr_SetObject(cls.ptr(), inst.ptr());
  throw nb::python_error();
}

// `gone`: the connection to epkd was lost by (or before) the call that failed.
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

shm::Layout parse_layout(const std::string& name) {
  if (auto l = shm::layout_from_name(name)) return *l;
  std::string known;
  for (std::uint32_t i = 0; i < shm::kLayoutCount; ++i) {
    if (!known.empty()) known += ", ";
    known += shm::layout_name(*shm::layout_from_code(i));
  }
  raise_as("InvalidArgument", "epk: unknown layout '" + name + "' (known: " + known + ")", "invalid-argument");
}

// ---- CUDA: only what the collection of an unreleased lease and close() need (a device-wide synchronise).

// Waits for all work of this process on `device`'s primary context (torch's context too: it uses the primary one).
void synchronize_device(int device) noexcept {
#if EPK_PY_CUDA
  const auto& d = shm::detail::driver();
  if (d.ok && shm::detail::make_current(device)) (void)d.CtxSynchronize();
#else
  (void)device;
#endif
}

// ---- the connection shared by a Client and its leases

struct Lease;

struct ClientCore {
  std::mutex mu;                         // one libepk call at a time; guards everything below
  std::optional<client::Client> client;  // connected at construction; kept until the core goes (mappings)
  std::string socket;
  bool closed = false;                   // close() was called: no further calls
  std::unordered_set<Lease*> leases;     // unreleased leases
};

// Runs f(client) without the GIL and under mu; raises (with the GIL) on error.
template <class F>
auto call(ClientCore& core, F&& f) {
  using R = decltype(f(*core.client));
  std::optional<R> r;
  bool gone = false;
  {
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(core.mu);
    if (!core.closed) {
      r.emplace(f(*core.client));
      gone = !core.client->connected();
    }
  }
  if (!r) raise_closed();
  if (!*r) raise_error(r->error(), gone);
  return std::move(*r);
}

// A CUDA stream as the DLPack / array-API rule names it: None and 1 the legacy default stream, 2 the per-thread
// default stream, any other integer a CUstream / cudaStream_t. -1 ("no synchronisation") is handled by the caller.
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

// A CUstream / cudaStream_t handle as the stream objects and the driver name it: 0 is the legacy default stream.
void* stream_from_handle(long long v) {
  if (v < 0) raise_as("InvalidArgument", "epk: negative stream " + std::to_string(v), "invalid-argument");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));  // libepk: null is the legacy default stream
}

// The stream a release fence is recorded on: a torch.cuda.Stream (.cuda_stream), a CuPy stream (.ptr), a stream
// handle (an integer, 0: the legacy default stream, as torch's default stream reports itself), or None: torch's
// current stream on `device` when torch is loaded with CUDA initialised, else the legacy default stream. Not the
// DLPack stream rule: that one is __dlpack__'s.
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

// ---- leases

struct Lease {
  std::shared_ptr<ClientCore> core;
  client::Tensor t;
  std::string model, tensor;
  shm::Layout layout = shm::Layout::kStored;
  bool released = false;  // guarded by core->mu once registered

  ~Lease() { release_unreferenced(); }

  bool live() const { return !released; }

  // Collection of an unreleased lease (no array made from it is left: each holds the lease). Kernels queued before
  // may still read a device slot, and nobody said on which stream: the device is synchronised first, then the slot is
  // released with a host fence. A host slot is released at once. Neither waits for epkd's answer.
  void release_unreferenced() noexcept {
    if (!core) return;
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(core->mu);
    if (released) return;
    released = true;
    core->leases.erase(this);
    if (core->closed || !core->client->connected()) return;  // the pins went with close() or the connection
    if (t.on_device) synchronize_device(t.device);
    (void)core->client->release_nowait(t.handle);
  }

  void release(nb::handle after) {
    void* stream = nullptr;
    if (t.on_device) stream = release_stream(after, t.device);
    std::optional<Status> st;
    bool gone = false;
    {
      nb::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(core->mu);
      if (released) return;
      released = true;
      core->leases.erase(this);
      if (core->closed || !core->client->connected()) return;
      st = t.on_device ? core->client->release_after(t.handle, stream) : core->client->release(t.handle);
      gone = !core->client->connected();
    }
    // Lost now: epkd dropped this client's pins with the connection, which is what release asked for.
    if (!*st && !gone) raise_error(st->error(), false);
  }

  void check_live() const {
    if (released) {
      raise_as("Released", "epk: lease of '" + tensor + "' (" + std::string(shm::layout_name(layout)) +
               ") was released", "released");
    }
  }

  // The consumer's stream waits for the decode (device slots), by the DLPack stream rule.
  void sync_for(nb::handle stream) {
    check_live();
    if (!t.on_device) {
      if (!stream.is_none() && !(nb::isinstance<nb::int_>(stream) && nb::cast<long long>(stream) == -1)) {
        raise_as("InvalidArgument", "epk: a host lease exports with stream=None", "invalid-argument");
      }
      return;
    }
    void* s = nullptr;
    if (!stream.is_none()) {
      const long long v = nb::cast<long long>(stream);
      if (v == -1) return;
      s = stream_from_int(v);
    }
    (void)call(*core, [&](client::Client& c) { return c.wait(t, s); });
  }

  DLDevice dl_device() const { return t.on_device ? DLDevice{kDLCUDA, t.device} : DLDevice{kDLCPU, 0}; }

  // The lease's own array: the tensor (dense, stored) or the rowwise values; none for packed layouts.
  ArrayView main_view() const {
    if (shm::is_packed_int(layout)) {
      raise_as("Unsupported", "epk: a " + std::string(shm::layout_name(layout)) +
               " slot holds several arrays: take lease.parts", "unsupported");
    }
    ArrayView v;
    v.data = t.data;
    v.device = dl_device();
    v.dtype = t.dtype;
    v.read_only = !t.on_device;
    for (auto s : t.shape) v.shape.push_back(static_cast<std::int64_t>(s));
    v.strides.assign(t.strides.begin(), t.strides.end());
    if (v.strides.size() != v.shape.size()) {  // contiguous row-major
      v.strides.assign(v.shape.size(), 1);
      for (std::size_t i = v.shape.size(); i-- > 1;) v.strides[i - 1] = v.strides[i] * v.shape[i];
    }
    return v;
  }
};

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

// ---- the client

struct PyClient {
  std::shared_ptr<ClientCore> core;
  bool has_device = false;

  explicit PyClient(std::optional<std::string> socket, int timeout_ms) {
    std::string path;
    if (socket) {
      path = *socket;
    } else if (const char* env = std::getenv("EPK_SOCKET"); env != nullptr && *env != '\0') {
      path = env;
    } else {
      path = kDefaultSocket;
    }
    std::optional<Result<client::Client>> r;
    {
      nb::gil_scoped_release nogil;
      client::ClientOptions o;
      o.reply_timeout_ms = timeout_ms;
      r.emplace(client::Client::connect(path, o));
    }
    if (!*r) {
      const Error& e = r->error();
      if (e.code == ErrorCode::kIo) raise_as("Unavailable", e.message, error_code_name(e.code));
      raise_error(e, false);
    }
    core = std::make_shared<ClientCore>();
    core->client.emplace(std::move(**r));
    core->socket = path;
    for (const auto& p : core->client->pools()) has_device |= p.kind == shm::PoolKind::kDevice;
  }

  ClientCore& c() const { return *core; }

  // Releases every pin (devices with unreleased leases synchronised first, as for a collected lease) and says close
  // when no lease object is left; otherwise the socket goes with the last one (the pool mappings must outlive every
  // array made from a lease).
  void close() {
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(core->mu);
    if (core->closed) return;
    core->closed = true;
    if (!core->client->connected()) return;
    std::map<int, bool> devices;
    for (Lease* l : core->leases) {
      if (l->t.on_device) devices[l->t.device] = true;
    }
    for (auto& [d, _] : devices) synchronize_device(d);
    for (Lease* l : core->leases) {
      l->released = true;
      (void)core->client->release_nowait(l->t.handle);
    }
    core->leases.clear();
    if (core.use_count() == 1) core->client->disconnect();
  }

  nb::object acquire(const std::string& model, const std::string& tensor, const std::string& layout, int device,
                     const std::optional<shm::ShardSpec>& shard) {
    const shm::ShardSpec spec = shard.value_or(shm::ShardSpec{});
    const shm::Layout l = parse_layout(layout);
    if (device < 0) raise_as("InvalidArgument", "epk: device must be >= 0", "invalid-argument");
    auto lease = std::make_unique<Lease>();
    lease->core = core;
    lease->model = model;
    lease->tensor = tensor;
    lease->layout = l;
    std::optional<Status> st;
    bool gone = false;
    {
      nb::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(core->mu);
      if (!core->closed) {
        st = core->client->acquire_into(model, tensor, l, static_cast<std::uint32_t>(device), spec, &lease->t);
        gone = !core->client->connected();
        if (*st) core->leases.insert(lease.get());
      }
    }
    if (!st) {
      lease->released = true;
      raise_closed();
    }
    if (!*st) {
      lease->released = true;
      raise_error(st->error(), gone);
    }
    return nb::cast(lease.release(), nb::rv_policy::take_ownership);
  }

  std::uint32_t prefetch(const std::string& model, const std::vector<std::string>& tensors, const std::string& layout,
                         int device, const std::optional<shm::ShardSpec>& shard) {
    const shm::ShardSpec spec = shard.value_or(shm::ShardSpec{});
    const shm::Layout l = parse_layout(layout);
    if (device < 0) raise_as("InvalidArgument", "epk: device must be >= 0", "invalid-argument");
    std::uint32_t queued = 0;
    for (std::size_t at = 0; at < tensors.size(); at += shm::kMaxPrefetch) {
      std::vector<std::string> chunk(tensors.begin() + at,
                                     tensors.begin() + std::min(tensors.size(), at + shm::kMaxPrefetch));
      queued += call(c(), [&](client::Client& cl) {
        return cl.prefetch(model, chunk, l, static_cast<std::uint32_t>(device), spec);
      }).value();
    }
    return queued;
  }

  nb::dict stats() {
    auto s = call(c(), [](client::Client& cl) { return cl.stats(); }).value();
    nb::dict d;
    for (const auto& counter : shm::kStatsCounters) d[counter.name] = s.*counter.member;
    nb::list pools;
    for (const auto& p : s.pools) {
      nb::dict q;
      q["pool_id"] = p.pool_id;
      q["device"] = p.device;
      for (const auto& counter : shm::kPoolCounters) q[counter.name] = p.*counter.member;
      pools.append(q);
    }
    d["pools"] = pools;
    return d;
  }

  nb::list models() {
    auto m = call(c(), [](client::Client& cl) { return cl.models(); }).value();
    nb::list out;
    for (const auto& i : m.models) {
      nb::dict d;
      d["name"] = i.name;
      d["tensors"] = i.tensors;
      d["cached_slots"] = i.cached_slots;
      d["cached_bytes"] = i.cached_bytes;
      d["pinned_slots"] = i.pinned_slots;
      out.append(d);
    }
    return out;
  }

  nb::list tensors(const std::string& model) {
    auto ts = call(c(), [&](client::Client& cl) { return cl.tensors(model); }).value();
    nb::list out;
    for (const auto& t : ts) {
      nb::dict d;
      d["name"] = t.name;
      d["dtype"] = t.dtype < static_cast<std::uint32_t>(epk::kDTypeCount)
                       ? std::string(epk::dtype_name(static_cast<epk::DType>(t.dtype)))
                       : std::to_string(t.dtype);
      d["encoding"] = t.encoding;
      nb::list shape;
      for (std::uint64_t v : t.shape) shape.append(v);
      d["shape"] = nb::tuple(shape);
      d["stored_bytes"] = t.stored_bytes;
      out.append(d);
    }
    return out;
  }

  nb::list pools() {
    std::vector<shm::PoolInfo> p;
    {
      std::lock_guard<std::mutex> lock(core->mu);
      p = core->client->pools();
    }
    nb::list out;
    for (const auto& i : p) {
      nb::dict d;
      d["pool_id"] = i.pool_id;
      d["kind"] = i.kind == shm::PoolKind::kDevice ? "device" : "host";
      d["device"] = i.device;
      d["size"] = i.size;
      out.append(d);
    }
    return out;
  }
};

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
}  // namespace epk::py

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

  nb::class_<epk::shm::ShardSpec>(m, "Shard",
                             "A tensor-parallel shard: one dimension's slice. rows cuts dimension 0 (a Linear\n"
                             "weight's output features: column-parallel layers; a 1-D tensor's elements), cols\n"
                             "dimension 1 (input features: row-parallel layers). Shard.rows(begin, end),\n"
                             "Shard.cols(begin, end), or Shard.split('rows' | 'cols', rank, world_size): every rank\n"
                             "ceil(extent / world_size) indices, the last what is left (vLLM's and Megatron's split\n"
                             "where world_size divides the extent, torch.chunk's otherwise; an empty share is an\n"
                             "error). Pass it as Client.acquire(..., shard=...) / prefetch.")
      .def_static("rows", &epk::shm::ShardSpec::rows, "begin"_a, "end"_a)
      .def_static("cols", &epk::shm::ShardSpec::cols, "begin"_a, "end"_a)
      .def_static(
          "split",
          [](const std::string& dim, std::uint64_t rank, std::uint64_t world) {
            if (dim != "rows" && dim != "cols") {
              raise_as("InvalidArgument", "epk: a shard's dim is 'rows' or 'cols', not '" + dim + "'",
                       "invalid-argument");
            }
            return epk::shm::ShardSpec::split(dim == "rows" ? epk::shm::ShardDim::kRows : epk::shm::ShardDim::kCols, rank, world);
          },
          "dim"_a, "rank"_a, "world_size"_a)
      .def_prop_ro("dim", [](const epk::shm::ShardSpec& s) { return std::string(epk::shm::shard_dim_name(s.dim)); })
      .def(
          "resolve",
          [](const epk::shm::ShardSpec& s, const std::vector<std::uint64_t>& shape) {
            auto r = epk::shm::resolve_shard(s, shape, "");
            if (!r) raise_error(r.error(), false);
            return std::make_tuple(r->axis(), r->begin, r->end);
          },
          "shape"_a,
          "(axis, begin, end) of this shard in a tensor of `shape`, by epkd's rule; InvalidArgument when it does\n"
          "not fit.")
      .def("__eq__", [](const epk::shm::ShardSpec& a, const epk::shm::ShardSpec& b) { return a == b; })
      .def("__hash__", [](const epk::shm::ShardSpec& s) {
        return std::hash<std::uint64_t>()(static_cast<std::uint64_t>(s.dim) * 31 + s.a * 1000003 + s.b);
      })
      .def("__repr__", [](const epk::shm::ShardSpec& s) { return "<epk.Shard " + epk::shm::describe(s) + ">"; });

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

  nb::class_<PyClient>(m, "Client",
                       "A connection to epkd.\n\n"
                       "Client(socket=None, timeout_ms=60000): the socket path from the argument, else $EPK_SOCKET,\n"
                       "else the systemd unit's /run/epkd/epkd.sock. timeout_ms bounds every wait for a reply (an\n"
                       "acquire waits for its decode); 0 waits forever. Raises epk.Unavailable when nothing listens.\n"
                       "A context manager (close() on exit). Calls from several threads are serialised.")
      .def(nb::init<std::optional<std::string>, int>(), "socket"_a = nb::none(), "timeout_ms"_a = 60000)
      .def_prop_ro("socket", [](const PyClient& c) { return c.core->socket; })
      .def_prop_ro("has_device_pools", [](const PyClient& c) { return c.has_device; })
      .def_prop_ro("connected", [](const PyClient& c) {
        std::lock_guard<std::mutex> lock(c.core->mu);
        return !c.core->closed && c.core->client->connected();
      })
      .def("close", &PyClient::close,
           "Releases every lease still held (a device lease's device is synchronised first) and closes the\n"
           "connection; leases of this client are released after it. Idempotent. The socket and the pool mappings\n"
           "stay until the last lease object is gone, so arrays made from leases never point at unmapped memory.")
      .def("acquire", &PyClient::acquire, "model"_a, "tensor"_a, "layout"_a = "dense:bf16",
           "device"_a = 0, "shard"_a = nb::none(),
           "Pins `tensor` of `model` in `layout` (stored, dense:bf16, dense:fp16, dense:fp32, rowwise:int8,\n"
           "rowwise:fp8_e4m3, gptq, gptq-v2, awq, marlin) from the pool of CUDA device `device` (a host pool: 0)\n"
           "and returns a Lease; on a miss it waits until epkd has the decode under way (device) or done (host).\n"
           "Raises NotFound (model, tensor or device), Unsupported (a layout the tensor cannot serve), NoSpace\n"
           "(the budget cannot hold it beside pinned slots), DecodeError, ConnectionLost. shard (an epk.Shard):\n"
           "the lease is that slice, compact and row-major, decoded alone; InvalidArgument when it does not fit.")
      .def("prefetch", &PyClient::prefetch, "model"_a, "tensors"_a, "layout"_a = "dense:bf16", "device"_a = 0,
           "shard"_a = nb::none(),
           "Asks epkd to decode these tensors ahead; returns how many decodes it queued (cached ones are not\n"
           "counted). Nothing is pinned. shard: the same shard of every name (one it does not fit is skipped).")
      .def("stats", &PyClient::stats,
           "The daemon's counters: a dict (budget_bytes, used_bytes, pinned_bytes, slots, pinned_slots, pins,\n"
           "hits, misses, evictions, decodes, decode_ns, clients, models, prefetches, resident_bytes, and pools: a\n"
           "list of per-pool dicts).")
      .def("models", &PyClient::models,
           "The models epkd serves: a list of dicts (name, tensors, cached_slots, cached_bytes, pinned_slots).")
      .def("tensors", &PyClient::tensors, nb::arg("model"),
           "`model`'s tensors in file order: a list of dicts (name, dtype as stored such as 'BF16', encoding such\n"
           "as 'raw' or 'lattice-rans', shape tuple, stored_bytes). NotFound for an unknown model.")
      .def("pools", &PyClient::pools,
           "The daemon's pools as announced at connect: a list of dicts (pool_id, kind 'host' or 'device',\n"
           "device, size).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyClient& c, nb::args) { c.close(); })
      .def("__repr__", [](const PyClient& c) { return "<epk.Client " + c.core->socket + ">"; });
}
