// CUDA streams as Python names them (the DLPack rule, torch and CuPy stream objects) turned into the CUstream /
// cudaStream_t libepk takes (null: the legacy default stream), and the one device-wide synchronise that the
// collection of an unreleased lease and Client.close() need. Bad values raise epk.InvalidArgument.
#pragma once

#include <nanobind/nanobind.h>

namespace epk::py {

// Waits for all work of this process on `device`'s primary context (torch's context too: it uses the primary one).
// A no-op in a build without device pools.
void synchronize_device(int device) noexcept;

// A CUDA stream as the DLPack / array-API rule names it: None and 1 the legacy default stream, 2 the per-thread
// default stream, any other integer a CUstream / cudaStream_t. -1 ("no synchronisation") is handled by the caller.
void* stream_from_int(long long v);

// A CUstream / cudaStream_t handle as the stream objects and the driver name it: 0 is the legacy default stream.
void* stream_from_handle(long long v);

// The stream a release fence is recorded on: a torch.cuda.Stream (.cuda_stream), a CuPy stream (.ptr), a stream
// handle (an integer, 0: the legacy default stream, as torch's default stream reports itself), or None: torch's
// current stream on `device` when torch is loaded with CUDA initialised, else the legacy default stream. Not the
// DLPack stream rule: that one is __dlpack__'s.
void* release_stream(nanobind::handle after, int device);

}  // namespace epk::py
