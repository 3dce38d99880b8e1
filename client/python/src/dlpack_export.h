// DLPack export for epk leases: the DLPack 1.x structs (dlpack.h, ABI-stable C structs written out here so the
// package needs no dlpack header) and one function that wraps a view of a slot in a "dltensor" or
// "dltensor_versioned" capsule. The capsule keeps a Python owner (the lease or part it came from) alive until the
// consumer's tensor is freed, so a lease is never collected while an array made from it exists.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"

namespace epk::py {

struct DLDevice {
  std::int32_t device_type;  // kDLCPU 1, kDLCUDA 2
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // elements
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
static_assert(sizeof(DLTensor) == 48 && sizeof(DLManagedTensor) == 64 && sizeof(DLManagedTensorVersioned) == 80);
inline constexpr std::int32_t kDLCPU = 1;
inline constexpr std::int32_t kDLCUDA = 2;
inline constexpr std::uint64_t kDLFlagReadOnly = 1;
inline constexpr std::uint32_t kDLPackMajor = 1, kDLPackMinor = 1;

// A strided array inside a mapped pool.
struct ArrayView {
  const void* data = nullptr;
  DLDevice device{kDLCPU, 0};
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // elements
  bool read_only = true;
};

// The DLPack type of an epk dtype; kUnsupported for those DLPack cannot describe per element (fp4, fp6).
Result<DLDataType> dlpack_dtype(DType t);
// The same width as an unsigned integer (bf16 -> uint16, fp8 -> uint8): for consumers without bf16 or fp8 types.
Result<DLDataType> dlpack_uint_dtype(DType t);

// A new capsule for `view`, holding a reference to `owner` until the consumer's deleter runs (or the capsule is
// collected unconsumed). `versioned`: a DLPack 1.x "dltensor_versioned" capsule (with the read-only flag where
// view.read_only), else a legacy "dltensor" one. Returns a new reference, or nullptr with a Python error set.
PyObject* export_dlpack(const ArrayView& view, DLDataType dtype, PyObject* owner, bool versioned);

}  // namespace epk::py
