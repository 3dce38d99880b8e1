// The C ABI over Client: every entry point catches everything, so no exception crosses it.
#include <cstring>
#include <memory>
#include <new>
#include <vector>
#include <string>

#include "client/client.h"
#include "client/epk.h"
#include "client/stored_tier.h"
#include "shm/error_table.h"

struct epk_client {
  epk::client::Client client;
};
struct epk_stored {
  std::unique_ptr<epk::client::StoredTier> tier;
};
struct epk_batch {
  std::unique_ptr<epk::client::DecodeBatch> batch;
};

namespace {

thread_local std::string g_last_error;

// The error table's C status (shm/error_table.h); its numbers are epk.h's.
static_assert(EPK_E_IO == 1 && EPK_E_BAD_INPUT == 2 && EPK_E_UNSUPPORTED == 3 && EPK_E_NOT_FOUND == 4 &&
              EPK_E_NO_SPACE == 5 && EPK_E_DECODE == 6 && EPK_E_INVALID == 7 && EPK_E_INTERNAL == 8 &&
              EPK_E_DENIED == 9 && EPK_E_QUOTA == 10 && EPK_E_CUDA == 11);
int status_for(epk::ErrorCode code) { return epk::shm::error_row(code).c_status; }

int fail(const epk::Error& e) {
  g_last_error = e.to_string();
  return status_for(e.code);
}

int invalid(const char* what) {
  g_last_error = std::string("invalid-argument: ") + what;
  return EPK_E_INVALID;
}

template <class F>
int guarded(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    g_last_error = "internal: out of memory";
  } catch (...) {
    g_last_error = "internal: unexpected exception";
  }
  return EPK_E_INTERNAL;
}

// NULL: the whole tensor. The fields are passed on as given: epkd (or resolve_shard) checks them.
epk::shm::ShardSpec spec_of(const epk_shard* s) {
  if (s == nullptr) return {};
  return {static_cast<epk::shm::ShardDim>(s->dim), static_cast<epk::shm::ShardForm>(s->form), s->a, s->b};
}

bool parse_layout(const char* layout, epk::shm::Layout* out) {
  if (layout == nullptr) {
    *out = epk::shm::Layout::kStored;
    return true;
  }
  auto l = epk::shm::layout_from_name(layout);
  if (!l) return false;
  *out = *l;
  return true;
}

}  // namespace

extern "C" {

int epk_connect(const char* socket_path, epk_client** out) {
  if (out == nullptr) return invalid("epk_connect: out is NULL");
  *out = nullptr;
  if (socket_path == nullptr) return invalid("epk_connect: socket_path is NULL");
  return guarded([&]() -> int {
    auto c = epk::client::Client::connect(socket_path);
    if (!c) return fail(c.error());
    *out = new epk_client{std::move(*c)};
    return EPK_OK;
  });
}

int epk_acquire(epk_client* c, const char* model, const char* tensor, const char* layout, epk_tensor* out) {
  return epk_acquire_on(c, model, tensor, layout, 0, out);
}

int epk_acquire_on(epk_client* c, const char* model, const char* tensor, const char* layout, uint32_t device,
                   epk_tensor* out) {
  return epk_acquire_shard(c, model, tensor, layout, device, nullptr, out);
}

int epk_shard_resolve(const epk_shard* shard, const uint64_t* shape, uint32_t ndim, uint32_t* axis, uint64_t* begin,
                      uint64_t* end) {
  if (shard == nullptr || (shape == nullptr && ndim > 0) || axis == nullptr || begin == nullptr || end == nullptr) {
    return invalid("epk_shard_resolve: NULL argument");
  }
  return guarded([&]() -> int {
    auto r = epk::shm::resolve_shard(spec_of(shard), std::span<const std::uint64_t>(shape, ndim), "");
    if (!r) return fail(r.error());
    *axis = static_cast<std::uint32_t>(r->axis());
    *begin = r->whole() ? 0 : r->begin;
    *end = r->whole() ? (ndim > 0 ? shape[0] : 0) : r->end;
    return EPK_OK;
  });
}

int epk_acquire_shard(epk_client* c, const char* model, const char* tensor, const char* layout, uint32_t device,
                      const epk_shard* shard, epk_tensor* out) {
  if (c == nullptr || model == nullptr || tensor == nullptr || out == nullptr)
    return invalid("epk_acquire: NULL argument");
  epk::shm::Layout l;
  if (!parse_layout(layout, &l)) return invalid("epk_acquire: unknown layout");
  const epk::shm::ShardSpec spec = spec_of(shard);
  return guarded([&]() -> int {
    // Per calling thread and reused (capacity kept): after its first calls a thread's cache-hit acquires allocate
    // nothing here either (names up to any length, the Tensor's shape and strides).
    thread_local std::string t_model, t_tensor;
    thread_local epk::client::Tensor t_scratch;
    t_model.assign(model);
    t_tensor.assign(tensor);
    epk::client::Tensor* t = &t_scratch;
    if (epk::Status st = c->client.acquire_into(t_model, t_tensor, l, device, spec, t); !st) return fail(st.error());
    if (t->shape.size() > EPK_MAX_DIMS) {
      (void)c->client.release(t->handle);
      return invalid("epk_acquire: tensor has more than EPK_MAX_DIMS dimensions");
    }
    std::memset(out, 0, sizeof(*out));
    out->data = t->data;
    out->bytes = t->bytes;
    out->dtype = static_cast<std::uint32_t>(t->dtype);
    out->ndim = static_cast<std::uint32_t>(t->shape.size());
    for (std::size_t i = 0; i < t->shape.size(); ++i) {
      out->shape[i] = t->shape[i];
      out->strides[i] = t->strides[i];
    }
    out->handle = t->handle;
    out->device = t->device;
    out->on_device = t->on_device ? 1u : 0u;
    out->event = t->event;
    return EPK_OK;
  });
}

namespace {
epk::client::Tensor device_view(const epk_tensor* t) {
  epk::client::Tensor v;
  v.data = t->data;
  v.bytes = t->bytes;
  v.handle = t->handle;
  v.on_device = t->on_device != 0;
  v.device = t->device;
  v.event = t->event;
  return v;
}
}  // namespace

int epk_wait(epk_client* c, const epk_tensor* t, void* stream) {
  if (c == nullptr || t == nullptr) return invalid("epk_wait: NULL argument");
  return guarded([&]() -> int {
    auto st = c->client.wait(device_view(t), stream);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_copy_to_host(epk_client* c, const epk_tensor* t, void* dst) {
  if (c == nullptr || t == nullptr || (dst == nullptr && t->bytes > 0)) {
    return invalid("epk_copy_to_host: NULL argument");
  }
  return guarded([&]() -> int {
    auto st = c->client.copy_to_host(device_view(t), dst);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_release_after(epk_client* c, uint64_t handle, void* stream) {
  if (c == nullptr) return invalid("epk_release_after: NULL client");
  return guarded([&]() -> int {
    auto st = c->client.release_after(handle, stream);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_tensor_parts(const epk_tensor* t, const char* layout, epk_part* parts, size_t capacity, size_t* count) {
  if (t == nullptr || count == nullptr || (parts == nullptr && capacity > 0))
    return invalid("epk_tensor_parts: NULL argument");
  epk::shm::Layout l;
  if (layout == nullptr || !parse_layout(layout, &l) || !epk::shm::is_packed_int(l)) {
    return invalid("epk_tensor_parts: not a packed integer layout");
  }
  return guarded([&]() -> int {
    auto dtype = epk::dtype_from_code(t->dtype);
    if (!dtype || t->ndim > EPK_MAX_DIMS) return invalid("epk_tensor_parts: not a packed integer slot");
    auto p = epk::client::packed_parts_of(l, t->data, t->bytes, *dtype, {t->shape, t->ndim});
    if (!p) return invalid("epk_tensor_parts: not a packed integer slot");
    *count = p->size();
    for (std::size_t i = 0; i < p->size() && i < capacity; ++i) {
      const auto& s = (*p)[i];
      parts[i].name = s.name.data();  // string literals of shm::packed_parts
      parts[i].data = const_cast<void*>(s.data);
      parts[i].bytes = s.bytes;
      parts[i].dtype = static_cast<std::uint32_t>(s.dtype);
      parts[i].ndim = static_cast<std::uint32_t>(s.shape.size());
      parts[i].shape[0] = s.shape.empty() ? 0 : s.shape[0];
      parts[i].shape[1] = s.shape.size() > 1 ? s.shape[1] : 0;
    }
    return EPK_OK;
  });
}

int epk_prefetch(epk_client* c, const char* model, const char* const* tensors, size_t count, const char* layout,
                 uint32_t* queued) {
  return epk_prefetch_shard(c, model, tensors, count, layout, 0, nullptr, queued);
}

int epk_prefetch_shard(epk_client* c, const char* model, const char* const* tensors, size_t count, const char* layout,
                       uint32_t device, const epk_shard* shard, uint32_t* queued) {
  if (c == nullptr || model == nullptr || (tensors == nullptr && count > 0))
    return invalid("epk_prefetch: NULL argument");
  epk::shm::Layout l;
  if (!parse_layout(layout, &l)) return invalid("epk_prefetch: unknown layout");
  return guarded([&]() -> int {
    std::vector<std::string> names;
    names.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (tensors[i] == nullptr) return invalid("epk_prefetch: NULL tensor name");
      names.emplace_back(tensors[i]);
    }
    auto r = c->client.prefetch(model, names, l, device, spec_of(shard));
    if (!r) return fail(r.error());
    if (queued != nullptr) *queued = *r;
    return EPK_OK;
  });
}

int epk_release(epk_client* c, uint64_t handle) {
  if (c == nullptr) return invalid("epk_release: NULL client");
  return guarded([&]() -> int {
    auto st = c->client.release(handle);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_release_nowait(epk_client* c, uint64_t handle) {
  if (c == nullptr) return invalid("epk_release_nowait: NULL client");
  return guarded([&]() -> int {
    auto st = c->client.release_nowait(handle);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_stats(epk_client* c, epk_cache_stats* out) {
  if (c == nullptr || out == nullptr) return invalid("epk_stats: NULL argument");
  return guarded([&]() -> int {
    auto s = c->client.stats();
    if (!s) return fail(s.error());
    *out = epk_cache_stats{s->budget_bytes, s->used_bytes, s->pinned_bytes, s->slots,     s->pinned_slots,
                           s->pins,         s->hits,       s->misses,       s->evictions, s->decodes,
                           s->decode_ns,    s->clients,    s->models,       s->prefetches, s->resident_bytes};
    return EPK_OK;
  });
}

int epk_pool_stats_get(epk_client* c, epk_pool_stats* out, size_t capacity, size_t* count) {
  if (c == nullptr || count == nullptr || (out == nullptr && capacity != 0)) {
    return invalid("epk_pool_stats_get: NULL argument");
  }
  return guarded([&]() -> int {
    auto s = c->client.stats();
    if (!s) return fail(s.error());
    *count = s->pools.size();
    for (std::size_t i = 0; i < s->pools.size() && i < capacity; ++i) {
      const epk::shm::PoolStats& p = s->pools[i];
      out[i] = epk_pool_stats{p.pool_id, p.device,       p.budget_bytes, p.used_bytes, p.pinned_bytes,
                              p.slots,   p.pinned_slots, p.pins,         p.hits,       p.misses,
                              p.evictions, p.resident_bytes};
    }
    return EPK_OK;
  });
}

void epk_disconnect(epk_client* c) {
  if (c == nullptr) return;
  try {
    c->client.disconnect();
  } catch (...) {
  }
  delete c;
}

const char* epk_last_error(void) { return g_last_error.c_str(); }

int epk_stored_open(epk_client* c, const char* model, uint32_t device, epk_stored** out) {
  if (out == nullptr) return invalid("epk_stored_open: out is NULL");
  *out = nullptr;
  if (c == nullptr || model == nullptr) return invalid("epk_stored_open: client or model is NULL");
  return guarded([&]() -> int {
    auto t = epk::client::StoredTier::open(c->client, model, device);
    if (!t) return fail(t.error());
    *out = new epk_stored{std::move(*t)};
    return EPK_OK;
  });
}

int epk_stored_decoded_bytes(const epk_stored* s, const char* tensor, const char* layout, uint64_t* bytes) {
  if (s == nullptr || tensor == nullptr || bytes == nullptr) return invalid("epk_stored_decoded_bytes: NULL argument");
  epk::shm::Layout l;
  if (!parse_layout(layout, &l)) return invalid("epk_stored_decoded_bytes: unknown layout");
  return guarded([&]() -> int {
    auto b = s->tier->decoded_bytes(tensor, l);
    if (!b) return fail(b.error());
    *bytes = *b;
    return EPK_OK;
  });
}

int epk_stored_shape(const epk_stored* s, const char* tensor, uint64_t* dims, uint32_t capacity, uint32_t* ndim) {
  if (s == nullptr || tensor == nullptr || ndim == nullptr || (dims == nullptr && capacity != 0)) {
    return invalid("epk_stored_shape: NULL argument");
  }
  return guarded([&]() -> int {
    auto shape = s->tier->shape(tensor);
    if (!shape) return fail(shape.error());
    *ndim = static_cast<uint32_t>(shape->size());
    for (uint32_t i = 0; i < capacity && i < shape->size(); ++i) dims[i] = (*shape)[i];
    return EPK_OK;
  });
}

uint64_t epk_stored_tier_bytes(const epk_stored* s) { return s == nullptr ? 0 : s->tier->tier_bytes(); }

void epk_stored_close(epk_stored* s) { delete s; }

int epk_batch_create(const epk_stored* s, const epk_decode_job* jobs, size_t count, epk_batch** out) {
  if (out == nullptr) return invalid("epk_batch_create: out is NULL");
  *out = nullptr;
  if (s == nullptr || (jobs == nullptr && count != 0)) return invalid("epk_batch_create: NULL argument");
  return guarded([&]() -> int {
    std::vector<epk::client::StoredTier::Job> js(count);
    for (size_t i = 0; i < count; ++i) {
      if (jobs[i].tensor == nullptr) return invalid("epk_batch_create: a job's tensor is NULL");
      if (!parse_layout(jobs[i].layout, &js[i].layout)) return invalid("epk_batch_create: unknown layout");
      js[i].tensor = jobs[i].tensor;
      js[i].out_dev = epk::DeviceAddress::of(jobs[i].out);
    }
    auto b = s->tier->plan(js);
    if (!b) return fail(b.error());
    *out = new epk_batch{std::move(*b)};
    return EPK_OK;
  });
}

int epk_batch_enqueue(epk_batch* b, void* stream) {
  if (b == nullptr) return invalid("epk_batch_enqueue: batch is NULL");
  return guarded([&]() -> int {
    epk::Status st = b->batch->enqueue(stream);
    return st ? EPK_OK : fail(st.error());
  });
}

int epk_batch_check(epk_batch* b, void* stream) {
  if (b == nullptr) return invalid("epk_batch_check: batch is NULL");
  return guarded([&]() -> int {
    epk::Status st = b->batch->check(stream);
    return st ? EPK_OK : fail(st.error());
  });
}

uint64_t epk_batch_scratch_bytes(const epk_batch* b) { return b == nullptr ? 0 : b->batch->scratch_bytes(); }

void epk_batch_free(epk_batch* b) { delete b; }

}  // extern "C"
