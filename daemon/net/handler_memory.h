// Memory for one outstanding Asio operation at a time, owned by whoever starts it (a session's read, its write), so
// that an operation's state needs no heap allocation: the cache-hit path reads a request and writes a reply per round
// trip and must not allocate. Asio finds the memory through the handler's associated allocator (with_memory()
// below). If the block is in use or too small, the allocator falls back to operator new.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace epk::daemon {

class HandlerMemory {
 public:
  HandlerMemory() = default;
  HandlerMemory(const HandlerMemory&) = delete;
  HandlerMemory& operator=(const HandlerMemory&) = delete;

  void* allocate(std::size_t size) {
    if (!in_use_ && size <= sizeof(storage_)) {
      in_use_ = true;
      return storage_;
    }
    return ::operator new(size);
  }
  void deallocate(void* p) {
    if (p == storage_) {
      in_use_ = false;
    } else {
      ::operator delete(p);
    }
  }

 private:
  alignas(std::max_align_t) unsigned char storage_[1024];
  bool in_use_ = false;
};

template <class T>
class HandlerAllocator {
 public:
  using value_type = T;
  explicit HandlerAllocator(HandlerMemory& m) : memory_(&m) {}
  template <class U>
  HandlerAllocator(const HandlerAllocator<U>& other) noexcept : memory_(other.memory_) {}  // NOLINT

  T* allocate(std::size_t n) { return static_cast<T*>(memory_->allocate(sizeof(T) * n)); }
  void deallocate(T* p, std::size_t) { memory_->deallocate(p); }

  template <class U>
  bool operator==(const HandlerAllocator<U>& o) const noexcept {
    return memory_ == o.memory_;
  }

 private:
  template <class>
  friend class HandlerAllocator;
  HandlerMemory* memory_;
};

// A completion handler that hands Asio `memory` for the operation's state.
template <class Handler>
class MemoryHandler {
 public:
  using allocator_type = HandlerAllocator<Handler>;
  MemoryHandler(HandlerMemory& m, Handler h) : memory_(&m), handler_(std::move(h)) {}
  allocator_type get_allocator() const noexcept { return allocator_type(*memory_); }
  template <class... Args>
  void operator()(Args&&... args) {
    handler_(std::forward<Args>(args)...);
  }

 private:
  HandlerMemory* memory_;
  Handler handler_;
};

template <class Handler>
MemoryHandler<std::decay_t<Handler>> with_memory(HandlerMemory& m, Handler&& h) {
  return {m, std::forward<Handler>(h)};
}

}  // namespace epk::daemon
