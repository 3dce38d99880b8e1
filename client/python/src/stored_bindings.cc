// epk._epk.StoredTier and DecodeBatch: client-side decode (client/stored_tier.h) in this process, over an epk.Client's
// connection (only the set-up uses it: the tier keeps its own fds and mapping). Python's wrapper and documentation
// are epk/stored.py. A build without client-side decode binds only CLIENT_DECODE = False and the reason.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bindings.h"
#include "client_core.h"
#include "cuda_streams.h"
#include "errors.h"

#ifndef EPK_PY_DECODE_MISSING
#include "client/stored_tier.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace epk::py {

#ifdef EPK_PY_DECODE_MISSING

void bind_stored(nb::module_& m) {
  m.attr("CLIENT_DECODE") = false;
  m.attr("CLIENT_DECODE_MISSING") = EPK_PY_DECODE_MISSING;
}

#else

namespace {

// Runs f() (a Result or a Status) without the GIL; raises its error (with the GIL) as the error table says.
template <class F>
auto unlocked(F&& f) {
  using R = decltype(f());
  std::optional<R> r;
  {
    nb::gil_scoped_release nogil;
    r.emplace(f());
  }
  if (!*r) raise_error(r->error(), false);
  if constexpr (!std::is_same_v<R, Status>) return std::move(**r);
}

// A batch shares its tier: it reads the tier's region at every enqueue, so the region stays mapped until the tier
// and every batch planned from it are closed.
struct PyDecodeBatch {
  std::shared_ptr<client::StoredTier> tier;
  std::unique_ptr<client::DecodeBatch> batch;

  client::DecodeBatch& live() {
    if (!batch) raise_as("Closed", "epk.stored: the batch is closed", "closed");
    return *batch;
  }
  void enqueue(long long stream) {
    client::DecodeBatch& b = live();
    void* s = stream_from_handle(stream);
    unlocked([&] { return b.enqueue(s); });
  }
};

struct PyStoredTier {
  std::shared_ptr<client::StoredTier> tier;
  std::string model;
  int device = 0;

  PyStoredTier(nb::handle client, const std::string& model_name, int dev) : model(model_name), device(dev) {
    if (dev < 0) raise_as("InvalidArgument", "epk.stored: device must be >= 0", "invalid-argument");
    std::shared_ptr<ClientCore> core = client_core(client);
    tier = call(*core, [&](client::Client& c) {
             return client::StoredTier::open(c, model_name, static_cast<std::uint32_t>(dev));
           }).value();
  }

  client::StoredTier& live() const {
    if (!tier) raise_as("Closed", "epk.stored: the tier is closed", "closed");
    return *tier;
  }
  std::uint64_t decoded_bytes(const std::string& tensor, const std::string& layout) const {
    const shm::Layout l = parse_layout(layout);
    client::StoredTier& t = live();
    return unlocked([&] { return t.decoded_bytes(tensor, l); });
  }
  bool holds(const std::string& tensor, const std::string& layout) const {
    const shm::Layout l = parse_layout(layout);
    return live().decoded_bytes(tensor, l).has_value();
  }
  nb::tuple shape(const std::string& tensor) const {
    client::StoredTier& t = live();
    std::vector<std::uint64_t> dims = unlocked([&] { return t.shape(tensor); });
    nb::list out;
    for (std::uint64_t d : dims) out.append(d);
    return nb::tuple(out);
  }
  PyDecodeBatch plan(const std::vector<std::tuple<std::string, std::string, std::uint64_t>>& jobs) const {
    client::StoredTier& t = live();
    std::vector<client::StoredTier::Job> js;
    js.reserve(jobs.size());
    for (const auto& [tensor, layout, out] : jobs) js.push_back({tensor, parse_layout(layout), out});
    PyDecodeBatch b{tier, unlocked([&] { return t.plan(js); })};
    return b;
  }
};

}  // namespace

void bind_stored(nb::module_& m) {
  m.attr("CLIENT_DECODE") = true;
  m.attr("CLIENT_DECODE_MISSING") = "";
  nb::class_<PyDecodeBatch>(m, "DecodeBatch",
                            "A decode plan for several tensors into fixed device addresses (epk.stored).")
      .def_prop_ro("scratch_bytes", [](const PyDecodeBatch& b) { return b.batch ? b.batch->scratch_bytes() : 0; },
                   "Device memory the plan holds (descriptors, lookup tables).")
      .def("enqueue", &PyDecodeBatch::enqueue, "stream"_a = 0,
           "One kernel launch on `stream` (a cudaStream_t as an int, e.g. torch's stream.cuda_stream; 0: the legacy\n"
           "default stream). Stream-ordered: later work on the stream sees the output.")
      .def(
          "check",
          [](PyDecodeBatch& b, long long stream) {
            client::DecodeBatch& batch = b.live();
            void* s = stream_from_handle(stream);
            unlocked([&] { return batch.check(s); });
          },
          "stream"_a = 0, "Waits for `stream`; raises DecodeError naming the first corrupt tile of the last decode.")
      .def("close", [](PyDecodeBatch& b) { b.batch.reset(); b.tier.reset(); },
           "Frees the plan's device memory. Idempotent.");
  nb::class_<PyStoredTier>(m, "StoredTier", "epkd's compressed tier of a model on one CUDA device (epk.stored).")
      .def(nb::init<nb::handle, const std::string&, int>(), "client"_a, "model"_a, "device"_a = 0)
      .def_ro("model", &PyStoredTier::model)
      .def_ro("device", &PyStoredTier::device)
      .def_prop_ro("tier_bytes", [](const PyStoredTier& t) { return t.tier ? t.tier->tier_bytes() : 0; },
                   "The mapped tier's size (epkd's device memory, shared, not this process's).")
      .def("decoded_bytes", &PyStoredTier::decoded_bytes, "tensor"_a, "layout"_a = "dense:bf16",
           "The bytes `tensor` takes in `layout`; Unsupported for a tensor not in the tier (acquire it from epkd),\n"
           "NotFound for a tensor the model lacks.")
      .def("holds", &PyStoredTier::holds, "tensor"_a, "layout"_a = "dense:bf16",
           "Whether `tensor` is in the tier and decodes to `layout` here.")
      .def("shape", &PyStoredTier::shape, "tensor"_a, "`tensor`'s shape as stored (any tensor of the model).")
      .def("plan", &PyStoredTier::plan, "jobs"_a,
           "One plan for `jobs`: (tensor, layout, device address) each, the address 16-byte aligned and\n"
           "decoded_bytes(tensor, layout) long. The plan writes to those addresses at every enqueue.")
      .def("close", [](PyStoredTier& t) { t.tier.reset(); },
           "Drops this tier; its mapping goes with the last batch planned from it. Idempotent.");
}

#endif

}  // namespace epk::py
