// An allocator whose construction without a value default-initialises: resize() of a vector of trivially
// constructible elements (std::uint16_t) then writes nothing, where std::allocator zero-fills. For a buffer about to
// be written whole by other means: the device encoder's payload download, where the zero-fill of fresh memory was
// one thread faulting in every page before the copy threads wrote it again (docs/measurements/gpu-encoder.md). A
// vector with it must not be read where it was not written.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace epk {

template <class T, class Base = std::allocator<T>>
class DefaultInitAllocator : public Base {
  using Traits = std::allocator_traits<Base>;

 public:
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U, typename Traits::template rebind_alloc<U>>;
  };

  using Base::Base;

  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    Traits::construct(static_cast<Base&>(*this), p, std::forward<Args>(args)...);
  }
};

}  // namespace epk
