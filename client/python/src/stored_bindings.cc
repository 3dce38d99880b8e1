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
// and every batch planned from it are closed. Every call holds its own reference while the GIL is released, so a
// close() from another thread cannot free what the call is using.
struct PyDecodeBatch {
  std::shared_ptr<client::StoredTier> tier;
  std::shared_ptr<client::DecodeBatch> batch;

  std::shared_ptr<client::DecodeBatch> live() const {
    if (!batch) raise_as("Closed", "epk.stored: the batch is closed", "closed");
    return batch;
  }
  void enqueue(long long stream) const {
    std::shared_ptr<client::DecodeBatch> b = live();
    void* s = stream_from_handle(stream);
    unlocked([&] { return b->enqueue(s); });
  }
  void enqueue_copy(long long stream) const {
    std::shared_ptr<client::DecodeBatch> b = live();
    void* s = stream_from_handle(stream);
    unlocked([&] { return b->enqueue_copy(s); });
  }
  void check(long long stream) const {
    std::shared_ptr<client::DecodeBatch> b = live();
    void* s = stream_from_handle(stream);
    unlocked([&] { return b->check(s); });
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

  std::shared_ptr<client::StoredTier> live() const {
    if (!tier) raise_as("Closed", "epk.stored: the tier is closed", "closed");
    return tier;
  }
  std::uint64_t decoded_bytes(const std::string& tensor, const std::string& layout) const {
    const shm::Layout l = parse_layout(layout);
    std::shared_ptr<client::StoredTier> t = live();
    return unlocked([&] { return t->decoded_bytes(tensor, l); });
  }
  bool holds(const std::string& tensor, const std::string& layout) const {
    const shm::Layout l = parse_layout(layout);
    return live()->decoded_bytes(tensor, l).has_value();
  }
  nb::tuple shape(const std::string& tensor) const {
    std::shared_ptr<client::StoredTier> t = live();
    std::vector<std::uint64_t> dims = unlocked([&] { return t->shape(tensor); });
    nb::list out;
    for (std::uint64_t d : dims) out.append(d);
    return nb::tuple(out);
  }
  nb::tuple span(const std::string& tensor) const {
    std::shared_ptr<client::StoredTier> t = live();
    const client::StoredTier::Span s = unlocked([&] { return t->span(tensor); });
    return nb::make_tuple(s.offset, s.bytes);
  }
  // Jobs as (tensor, layout, out) or (tensor, layout, out, inputs_at).
  PyDecodeBatch plan(const std::vector<nb::tuple>& jobs) const {
    std::shared_ptr<client::StoredTier> t = live();
    std::vector<client::StoredTier::Job> js;
    js.reserve(jobs.size());
    for (const nb::tuple& j : jobs) {
      if (j.size() != 3 && j.size() != 4) {
        raise_as("InvalidArgument", "epk.stored: a job is (tensor, layout, out[, inputs_at])", "invalid-argument");
      }
      js.push_back({nb::cast<std::string>(j[0]), parse_layout(nb::cast<std::string>(j[1])),
                    DeviceAddress(nb::cast<std::uint64_t>(j[2])),
                    DeviceAddress(j.size() == 4 ? nb::cast<std::uint64_t>(j[3]) : 0)});
    }
    return PyDecodeBatch{t, unlocked([&] { return t->plan(js); })};
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
      .def("enqueue_copy", &PyDecodeBatch::enqueue_copy, "stream"_a = 0,
           "Copies the staged jobs' inputs from the host tier to their inputs_at on `stream` (stream-ordered, as\n"
           "enqueue); nothing for a batch without staged jobs.")
      .def("enqueue", &PyDecodeBatch::enqueue, "stream"_a = 0,
           "One kernel launch on `stream` (a cudaStream_t as an int, e.g. torch's stream.cuda_stream; 0: the legacy\n"
           "default stream). Stream-ordered: later work on the stream sees the output.")
      .def("check", &PyDecodeBatch::check, "stream"_a = 0, "Waits for `stream`; raises DecodeError naming the first corrupt tile of the last decode.")
      .def("close", [](PyDecodeBatch& b) { b.batch.reset(); b.tier.reset(); },
           "Frees the plan's device memory. Idempotent.");
  nb::class_<PyStoredTier>(m, "StoredTier", "epkd's compressed tier of a model on one CUDA device (epk.stored).")
      .def(nb::init<nb::handle, const std::string&, int>(), "client"_a, "model"_a, "device"_a = 0)
      .def_ro("model", &PyStoredTier::model)
      .def_ro("device", &PyStoredTier::device)
      .def_prop_ro("tier_bytes", [](const PyStoredTier& t) { return t.tier ? t.tier->tier_bytes() : 0; },
                   "The tier's size: epkd's device memory or host tier mapped here (shared, not this process's),\n"
                   "or this process's pinned copy of the host tier.")
      .def_prop_ro("host_tier", [](const PyStoredTier& t) { return t.tier && t.tier->host_tier(); },
                   "Whether the tier is in host memory (epkd's tier_budget_mb leaves the model no room on the\n"
                   "device): decodes read it over PCIe, or from a staged copy.")
      .def_prop_ro("host_tier_shared", [](const PyStoredTier& t) { return t.tier && t.tier->host_tier_shared(); },
                   "A host tier: whether it is epkd's memory mapped here read-only (no host memory of this\n"
                   "process's), rather than a pinned copy (a device that cannot register read-only memory).")
      .def("span", &PyStoredTier::span, "tensor"_a,
           "(offset, bytes): where `tensor`'s inputs sit in the tier; a staged job's inputs_at holds a copy of\n"
           "those bytes.")
      .def("decoded_bytes", &PyStoredTier::decoded_bytes, "tensor"_a, "layout"_a = "dense:bf16",
           "The bytes `tensor` takes in `layout`; Unsupported for a tensor not in the tier (acquire it from epkd),\n"
           "NotFound for a tensor the model lacks.")
      .def("holds", &PyStoredTier::holds, "tensor"_a, "layout"_a = "dense:bf16",
           "Whether `tensor` is in the tier and decodes to `layout` here.")
      .def("shape", &PyStoredTier::shape, "tensor"_a, "`tensor`'s shape as stored (any tensor of the model).")
      .def("plan", &PyStoredTier::plan, "jobs"_a,
           "One plan for `jobs`: (tensor, layout, device address[, inputs_at]) each, the address 16-byte aligned\n"
           "and decoded_bytes(tensor, layout) long. The plan writes to those addresses at every enqueue. inputs_at\n"
           "(host tier only): a 256-byte aligned device address of span(tensor)[1] bytes where enqueue_copy puts\n"
           "the tensor's inputs; without it the decode reads them where the tier is.")
      .def("close", [](PyStoredTier& t) { t.tier.reset(); },
           "Drops this tier; its mapping goes with the last batch planned from it. Idempotent.");
}

#endif

}  // namespace epk::py
