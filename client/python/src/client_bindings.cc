// epk.Client: connects (the socket from the argument, $EPK_SOCKET or the default), makes leases (lease.h) and
// forwards the admin calls (stats, models, tensors, pools) as Python dicts and lists.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "client/client.h"
#include "client_core.h"
#include "cuda_streams.h"
#include "errors.h"
#include "lease.h"
#include "shm/layout.h"
#include "shm/shard.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace epk::py {

shm::Layout parse_layout(const std::string& name) {
  if (auto l = shm::layout_from_name(name)) return *l;
  std::string known;
  for (std::uint32_t i = 0; i < shm::kLayoutCount; ++i) {
    if (!known.empty()) known += ", ";
    known += shm::layout_name(*shm::layout_from_code(i));
  }
  raise_as("InvalidArgument", "epk: unknown layout '" + name + "' (known: " + known + ")", "invalid-argument");
}

namespace {

// epk.Client: the ClientCore it shares with its leases, and whether the daemon announced a device pool.
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
      d["tier_device_bytes"] = i.tier_device_bytes;
      d["tier_host_bytes"] = i.tier_host_bytes;
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

}  // namespace

std::shared_ptr<ClientCore> client_core(nb::handle client) {
  PyClient* c = nullptr;
  if (!nb::try_cast<PyClient*>(client, c) || c == nullptr) {
    raise_as("InvalidArgument", "epk: expected an epk.Client, got " + std::string(nb::type_name(client.type()).c_str()),
             "invalid-argument");
  }
  return c->core;
}

void bind_client(nb::module_& m) {
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
           "The models epkd serves: a list of dicts (name, tensors, cached_slots, cached_bytes, pinned_slots,\n"
           "tier_device_bytes, tier_host_bytes: the compressed tier on the GPUs and in host memory).")
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

}  // namespace epk::py
