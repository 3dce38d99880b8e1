#include "client/device_client.h"

#include <mutex>

#include "shm/cuda_event.h"
#include "shm/device_pool.h"

namespace epk::client {
namespace {

class CudaSide final : public DeviceSide {
 public:
  explicit CudaSide(std::vector<shm::IpcEventHandle> events) : handles_(std::move(events)), opened_(handles_.size()) {}

  Result<DeviceAddress> import_pool(std::uint32_t pool_id, shm::UniqueFd fd, std::uint64_t size, int device,
                                    std::uint32_t first_event, std::uint32_t event_count) override {
    if (first_event > handles_.size() || event_count > handles_.size() - first_event) {
      return make_error(ErrorCode::kBadInput, "epk client: hello reply: pool " + std::to_string(pool_id) +
                                                  "'s events lie outside the ring of " +
                                                  std::to_string(handles_.size()));
    }
    EPK_TRY_ASSIGN(shm::DeviceMapping m, shm::import_device_pool(std::move(fd), size, device));
    const DeviceAddress base = m.device_ptr();
    if (pools_.size() <= pool_id) pools_.resize(pool_id + 1);
    pools_[pool_id] = std::move(m);
    // Every event of the ring is opened now, once: cuIpcOpenEventHandle costs far more than an acquire (measured on
    // the H200: it dominated the first acquire that named each event), so connect pays it instead. Each pool's ring
    // is opened on its own device.
    for (std::uint32_t i = first_event; i < first_event + event_count; ++i) {
      auto ev = event(i, device);
      if (!ev) return std::move(ev).error();
    }
    return base;
  }

  Result<void*> event(std::uint32_t index, int device) override {
    if (index >= handles_.size()) {
      return make_error(ErrorCode::kBadInput, "epk client: acquire reply: done_event " + std::to_string(index) +
                                                  " is outside the daemon's ring of " +
                                                  std::to_string(handles_.size()));
    }
    if (!opened_[index]) {
      EPK_TRY_ASSIGN(opened_[index], shm::CudaEvent::open_ipc(handles_[index], device));
    }
    return opened_[index].get();
  }

  Status wait(void* event, void* stream) override {
    if (event == nullptr) return {};
    EPK_TRY_ASSIGN(const shm::CudaEvent* e, find(event));
    EPK_TRY(shm::make_device_current(e->device()));
    // epkd replies after its stream has finished the decode, so the event has nearly always completed by now: then
    // there is nothing to wait for, and no work is put on the caller's stream (a wait on another process's event makes
    // the GPU switch to this context and back). Still recording (a ring event reused since, or a daemon that replies
    // early): the stream waits, as before.
    if (e->query()) return {};
    return shm::stream_wait_event(stream, event);
  }

  Result<shm::IpcEventHandle> record_release(void* stream, int device) override {
    Own* own = nullptr;
    for (Own& o : own_) {
      if (o.device == device) own = &o;
    }
    if (own == nullptr) {
      Own fresh;
      fresh.device = device;
      EPK_TRY_ASSIGN(fresh.event, shm::CudaEvent::create_interprocess(device));
      EPK_TRY_ASSIGN(fresh.handle, fresh.event.ipc_handle());
      own_.push_back(std::move(fresh));
      own = &own_.back();
    }
    EPK_TRY(shm::make_device_current(device));
    EPK_TRY(own->event.record(stream));
    return own->handle;
  }

  Result<bool> stream_idle(void* stream, int device) override { return shm::stream_idle(stream, device); }

  Status copy_to_host(void* dst, DeviceAddress src, std::uint64_t bytes, void* event, int device) override {
    EPK_TRY(shm::make_device_current(device));
    if (event != nullptr) {
      EPK_TRY_ASSIGN(const shm::CudaEvent* e, find(event));
      EPK_TRY(e->synchronize());
    }
    return shm::copy_from_device(dst, src, bytes, device);
  }

  // An event this connection opened from the daemon's ring. A tensor from an earlier connection (or another Client)
  // carries an event that is gone: using it would be undefined behaviour in the caller's process, so it is refused.
  Result<const shm::CudaEvent*> find(void* event) const {
    for (const shm::CudaEvent& e : opened_) {
      if (e.get() == event) return &e;
    }
    return make_error(ErrorCode::kInvalidArgument,
                      "epk client: the tensor's event is not one of this connection's (acquired before a reconnect, or "
                      "by another client?)");
  }

 private:
  std::vector<shm::IpcEventHandle> handles_;
  std::vector<shm::CudaEvent> opened_;  // index -> opened event (empty until first use)
  std::vector<shm::DeviceMapping> pools_;
  struct Own {
    int device = 0;
    shm::CudaEvent event;
    shm::IpcEventHandle handle{};
  };
  std::vector<Own> own_;  // this client's release event, one per device it released slots of
};

}  // namespace

Result<std::unique_ptr<DeviceSide>> DeviceSide::create(std::vector<shm::IpcEventHandle> events) {
  return std::unique_ptr<DeviceSide>(new CudaSide(std::move(events)));
}

}  // namespace epk::client
