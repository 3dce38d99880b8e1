#include "dlpack_export.h"

#include <string>

namespace epk::py {
namespace {

constexpr std::uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6;
// DLPack 1.1's float8 codes.
constexpr std::uint8_t kDLFloat8E4M3FN = 10, kDLFloat8E5M2 = 12, kDLFloat8E8M0FNU = 14;
constexpr const char* kName = "dltensor";
constexpr const char* kNameVersioned = "dltensor_versioned";

// One allocation per export: the managed tensor the consumer holds, the shape and strides it points to, and the
// owner reference.
struct ExportCtx {
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
  std::vector<std::int64_t> shape, strides;
  PyObject* owner = nullptr;
};

// May run on any thread (a consumer frees its tensor where it likes), with or without the GIL.
void drop_ctx(ExportCtx* ctx) {
  if (Py_IsInitialized()) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(ctx->owner);
    PyGILState_Release(g);
  }
  delete ctx;
}
void delete_legacy(DLManagedTensor* m) { drop_ctx(static_cast<ExportCtx*>(m->manager_ctx)); }
void delete_versioned(DLManagedTensorVersioned* m) { drop_ctx(static_cast<ExportCtx*>(m->manager_ctx)); }

// A capsule that no consumer took (renamed to "used_dltensor...") still owns its tensor.
void capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, kName)) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kName));
    m->deleter(m);
  } else if (PyCapsule_IsValid(cap, kNameVersioned)) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kNameVersioned));
    m->deleter(m);
  } else {
    PyErr_Clear();  // a consumed capsule: its consumer calls the deleter
  }
}

Error no_dlpack(DType t) {
  return make_error(ErrorCode::kUnsupported,
                    "dtype " + std::string(dtype_name(t)) + " has no DLPack element type (packed sub-byte values)");
}

}  // namespace

Result<DLDataType> dlpack_dtype(DType t) {
  switch (t) {
    case DType::kBool: return DLDataType{kDLBool, 8, 1};
    case DType::kU8: return DLDataType{kDLUInt, 8, 1};
    case DType::kI8: return DLDataType{kDLInt, 8, 1};
    case DType::kF8E5M2: return DLDataType{kDLFloat8E5M2, 8, 1};
    case DType::kF8E4M3: return DLDataType{kDLFloat8E4M3FN, 8, 1};
    case DType::kF8E8M0: return DLDataType{kDLFloat8E8M0FNU, 8, 1};
    case DType::kI16: return DLDataType{kDLInt, 16, 1};
    case DType::kU16: return DLDataType{kDLUInt, 16, 1};
    case DType::kF16: return DLDataType{kDLFloat, 16, 1};
    case DType::kBF16: return DLDataType{kDLBfloat, 16, 1};
    case DType::kI32: return DLDataType{kDLInt, 32, 1};
    case DType::kU32: return DLDataType{kDLUInt, 32, 1};
    case DType::kF32: return DLDataType{kDLFloat, 32, 1};
    case DType::kF64: return DLDataType{kDLFloat, 64, 1};
    case DType::kI64: return DLDataType{kDLInt, 64, 1};
    case DType::kU64: return DLDataType{kDLUInt, 64, 1};
    default: return no_dlpack(t);
  }
}

Result<DLDataType> dlpack_uint_dtype(DType t) {
  const int bits = dtype_bits(t);
  if (bits != 8 && bits != 16 && bits != 32 && bits != 64) return no_dlpack(t);
  return DLDataType{kDLUInt, static_cast<std::uint8_t>(bits), 1};
}

PyObject* export_dlpack(const ArrayView& view, DLDataType dtype, PyObject* owner, bool versioned) {
  auto* ctx = new ExportCtx;
  ctx->shape = view.shape;
  ctx->strides = view.strides;
  ctx->owner = owner;
  Py_INCREF(owner);
  // DLPack asks for a 256-byte aligned data pointer with the rest in byte_offset (both numpy and torch add them).
  // Rounding down stays inside the pool: pools are mapped at page (host) or VMM granularity (device) boundaries.
  const auto addr = reinterpret_cast<std::uintptr_t>(view.data);
  DLTensor t{};
  t.data = reinterpret_cast<void*>(addr & ~std::uintptr_t{255});
  t.byte_offset = addr & 255;
  t.device = view.device;
  t.ndim = static_cast<std::int32_t>(ctx->shape.size());
  t.dtype = dtype;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  PyObject* cap;
  if (versioned) {
    ctx->versioned.version = {kDLPackMajor, kDLPackMinor};
    ctx->versioned.manager_ctx = ctx;
    ctx->versioned.deleter = delete_versioned;
    ctx->versioned.flags = view.read_only ? kDLFlagReadOnly : 0;
    ctx->versioned.dl_tensor = t;
    cap = PyCapsule_New(&ctx->versioned, kNameVersioned, capsule_destructor);
  } else {
    ctx->legacy.manager_ctx = ctx;
    ctx->legacy.deleter = delete_legacy;
    ctx->legacy.dl_tensor = t;
    cap = PyCapsule_New(&ctx->legacy, kName, capsule_destructor);
  }
  if (cap == nullptr) {
    Py_DECREF(owner);
    delete ctx;
  }
  return cap;
}

}  // namespace epk::py
