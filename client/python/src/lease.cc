#include "lease.h"

#include <mutex>
#include <optional>
#include <string>

#include "cuda_streams.h"
#include "errors.h"

namespace nb = nanobind;

namespace epk::py {

void Lease::release_unreferenced() noexcept {
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

void Lease::release(nb::handle after) {
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

void Lease::check_live() const {
  if (released) {
    raise_as("Released", "epk: lease of '" + tensor + "' (" + std::string(shm::layout_name(layout)) +
             ") was released", "released");
  }
}

void Lease::sync_for(nb::handle stream) {
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

ArrayView Lease::main_view() const {
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

}  // namespace epk::py
