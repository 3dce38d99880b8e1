#include "codec/cuda/intq/intq_repack.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

#include "codec/cuda/intq/intq_kernels.cuh"
#include "codec/layouts/marlin.h"

namespace epk::cuda::intq {
namespace {

constexpr int kThreads = 256;
static_assert(kZeroPointZero == detail::kZeroPointZero && kPaddingSortsInside == detail::kPaddingSortsInside);

Error invalid(const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "intq gpu: " + what); }

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return make_error(ErrorCode::kCuda, std::string("intq gpu: ") + what + ": " + cudaGetErrorString(e));
  return {};
}

Status check_common(const DeviceIntq& t) {
  if (t.bits < 1 || t.bits > 8) return invalid("bits " + std::to_string(t.bits));
  if (t.rows < 0 || t.cols < 0 || t.padded_rows < t.rows || t.padded_cols < t.cols || t.group_size < 1) {
    return invalid("sizes");
  }
  if (t.codes == nullptr && t.padded_rows * t.padded_cols > 0) return invalid("codes is null");
  return {};
}

detail::Geometry geometry(const DeviceIntq& t) {
  return detail::Geometry{t.bits, t.rows, t.cols, t.padded_rows, t.padded_cols, t.group_size};
}

unsigned blocks_for(std::uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// A small constant table uploaded once per device (the current one: epkd serves every GPU of the host from one
// process, and a kernel must not read another device's memory).
constexpr int kMaxTableDevices = 64;
struct DeviceTable {
  std::once_flag once;
  int* table = nullptr;
  cudaError_t status = cudaSuccess;
};

Result<const int*> device_table(DeviceTable (&tables)[kMaxTableDevices], std::vector<int> (*make)(), const char* what) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxTableDevices) {
    return make_error(ErrorCode::kCuda, std::string("intq gpu: ") + what + ": no usable current device");
  }
  DeviceTable& t = tables[dev];
  std::call_once(t.once, [&] {
    const std::vector<int> host = make();
    t.status = cudaMalloc(&t.table, host.size() * sizeof(int));
    if (t.status == cudaSuccess)
      t.status = cudaMemcpy(t.table, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice);
  });
  if (t.status != cudaSuccess)
    return make_error(ErrorCode::kCuda, std::string("intq gpu: ") + what + ": " + cudaGetErrorString(t.status));
  return const_cast<const int*>(t.table);
}

// Marlin's scale permutations (64 grouped entries, then 32 per-channel ones).
Result<const int*> marlin_scale_perm(bool grouped) {
  static DeviceTable tables[kMaxTableDevices];
  EPK_TRY_ASSIGN(const int* table, device_table(tables, [] {
    std::vector<int> host = layouts::marlin_scale_perm();
    const auto single = layouts::marlin_scale_perm_single();
    host.insert(host.end(), single.begin(), single.end());
    return host;
  }, "marlin scale table"));
  return table + (grouped ? 0 : 64);
}

// The 4- and 8-bit Marlin weight permutations.
Result<const int*> marlin_perm(int bits) {
  static DeviceTable tables[kMaxTableDevices];
  EPK_TRY_ASSIGN(const int* table, device_table(tables, [] {
    std::vector<int> host;
    for (int b : {4, 8}) {
      auto p = layouts::marlin_weight_perm(b);
      host.insert(host.end(), p.begin(), p.end());
    }
    return host;
  }, "marlin table"));
  return table + (bits == 4 ? 0 : 1024);
}

}  // namespace

Status dequantize_dense(const DeviceIntq& t, DenseType type, void* dst, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.scales == nullptr && t.num_groups > 0) return invalid("scales is null");
  const std::uint64_t n = static_cast<std::uint64_t>(t.rows) * static_cast<std::uint64_t>(t.cols);
  if (n == 0) return {};
  auto* out = static_cast<std::uint16_t*>(dst);
  const std::uint64_t tiles_n = (static_cast<std::uint64_t>(t.cols) + detail::kTile - 1) / detail::kTile;
  const std::uint64_t tiles_k = (static_cast<std::uint64_t>(t.rows) + detail::kTile - 1) / detail::kTile;
  if (tiles_n > 0x7fffffffu) return invalid("dequantize: too many columns");
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_k < 65535 ? tiles_k : 65535));
  const dim3 block(detail::kTile, detail::kTileRows);
  if (type == DenseType::kBf16) {
    detail::dequantize_kernel<true>
        <<<grid, block, 0, stream>>>(t.codes, t.scales, t.zeros, t.g_idx, t.perm, geometry(t), out);
  } else {
    detail::dequantize_kernel<false>
        <<<grid, block, 0, stream>>>(t.codes, t.scales, t.zeros, t.g_idx, t.perm, geometry(t), out);
  }
  return launched("dequantize");
}

Status repack_gptq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream, const std::int32_t* inv_perm) {
  EPK_TRY(check_common(t));
  if ((t.padded_rows * t.bits) % 32 != 0) return invalid("gptq: padded_rows * bits is not a multiple of 32");
  if ((t.perm != nullptr) != (inv_perm != nullptr)) {
    return invalid("gptq: a tensor with a perm needs its inverse (invert_perm), one without needs none");
  }
  const std::uint64_t n =
      static_cast<std::uint64_t>(t.padded_rows) * t.bits / 32 * static_cast<std::uint64_t>(t.padded_cols);
  if (n == 0) return {};
  detail::gptq_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.codes, inv_perm, geometry(t), dst);
  return launched("gptq");
}

Status gptq_g_idx(const DeviceIntq& t, const std::int32_t* inv_perm, std::int32_t* dst, Stream stream) {
  EPK_TRY(check_common(t));
  if ((t.perm != nullptr) != (inv_perm != nullptr)) return invalid("gptq g_idx: perm and inv_perm go together");
  const std::uint64_t n = static_cast<std::uint64_t>(t.padded_rows);
  if (n == 0) return {};
  detail::gather_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.g_idx, t.group_size, inv_perm, t.padded_rows,
                                                                     dst);
  return launched("gptq g_idx");
}

Status invert_perm(const DeviceIntq& t, std::int32_t* inv, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.perm == nullptr) return invalid("invert_perm: the tensor has no perm");
  const std::uint64_t n = static_cast<std::uint64_t>(t.padded_rows);
  if (n == 0) return {};
  detail::invert_perm_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.perm, t.padded_rows, inv);
  return launched("invert_perm");
}

Status group_order(const DeviceIntq& t, std::int32_t* order, std::uint32_t* flags, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.num_groups < 0) return invalid("group_order: num_groups");
  const std::uint64_t n = static_cast<std::uint64_t>(t.num_groups);
  if (n == 0 || t.padded_rows == 0) return {};
  if (n > 0x7FFFFFFFu) return invalid("group_order: num_groups beyond one grid dimension");
  detail::group_order_kernel<<<static_cast<unsigned>(n), detail::kGroupOrderMaxThreads, 0, stream>>>(
      t.g_idx, t.group_size, t.rows, t.padded_rows, flags, order);
  return launched("group_order");
}

Status repack_awq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.bits != 4) return invalid("awq: bits must be 4");
  if (t.padded_cols % 8 != 0) return invalid("awq: padded_cols % 8 != 0");
  if (t.g_idx != nullptr || t.perm != nullptr) return invalid("awq: scattered groups or perm (sort_groups first)");
  const std::uint64_t n = static_cast<std::uint64_t>(t.padded_rows) * static_cast<std::uint64_t>(t.padded_cols / 8);
  if (n == 0) return {};
  detail::awq_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.codes, geometry(t), dst);
  return launched("awq");
}

Status repack_marlin_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream, const std::int32_t* order) {
  EPK_TRY(check_common(t));
  if (t.bits != 4 && t.bits != 8) return invalid("marlin: bits must be 4 or 8");
  if (t.padded_rows % 16 != 0 || t.padded_cols % 64 != 0) return invalid("marlin: needs K % 16 == 0 and N % 64 == 0");
  if ((t.g_idx != nullptr || t.perm != nullptr) && order == nullptr) {
    return invalid("marlin: scattered groups or perm need the group order (group_order)");
  }
  EPK_TRY_ASSIGN(const int* perm, marlin_perm(t.bits));
  const std::uint64_t n = static_cast<std::uint64_t>(t.padded_rows) * static_cast<std::uint64_t>(t.padded_cols) /
                          static_cast<std::uint64_t>(32 / t.bits);
  if (n == 0) return {};
  detail::marlin_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.codes, perm, order, geometry(t), dst);
  return launched("marlin");
}

Status marlin_g_idx_perm(const DeviceIntq& t, const std::int32_t* order, std::int32_t* g_idx_out,
                         std::int32_t* perm_out, Stream stream) {
  EPK_TRY(check_common(t));
  if (order == nullptr) return invalid("marlin g_idx/perm: order is null");
  const std::uint64_t n = static_cast<std::uint64_t>(t.padded_rows);
  if (n == 0) return {};
  detail::gather_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.g_idx, t.group_size, order, t.padded_rows,
                                                                     g_idx_out);
  detail::gather_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.perm, 1, order, t.padded_rows, perm_out);
  return launched("marlin g_idx/perm");
}

namespace {
// GPTQ qzeros in either zero convention: v1 stores z - 1 (minus_one, flagging a zero point of 0 in *zero_flag).
Status repack_gptq_qzeros(const DeviceIntq& t, std::uint32_t* dst, bool minus_one, std::uint32_t* zero_flag,
                          Stream stream) {
  EPK_TRY(check_common(t));
  if ((t.padded_cols * t.bits) % 32 != 0) return invalid("gptq qzeros: padded_cols * bits is not a multiple of 32");
  const std::uint64_t n = static_cast<std::uint64_t>(t.num_groups) * (t.padded_cols * t.bits / 32);
  if (n == 0) return {};
  detail::pack_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.zeros, 1u << (t.bits - 1), t.num_groups,
                                                                   t.padded_cols, t.bits, minus_one, zero_flag, dst);
  return launched(minus_one ? "gptq qzeros v1" : "gptq qzeros");
}
}  // namespace

Status repack_gptq_qzeros_v2(const DeviceIntq& t, std::uint32_t* dst, Stream stream) {
  return repack_gptq_qzeros(t, dst, false, nullptr, stream);
}

Status repack_gptq_qzeros_v1(const DeviceIntq& t, std::uint32_t* dst, std::uint32_t* zero_flag, Stream stream) {
  return repack_gptq_qzeros(t, dst, true, zero_flag, stream);
}

Status repack_awq_qzeros(const DeviceIntq& t, std::uint32_t* dst, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.bits != 4 || t.padded_cols % 8 != 0) return invalid("awq qzeros: needs 4-bit and padded_cols % 8 == 0");
  const std::uint64_t n = static_cast<std::uint64_t>(t.num_groups) * static_cast<std::uint64_t>(t.padded_cols / 8);
  if (n == 0) return {};
  if (t.zeros == nullptr) {  // symmetric: every field 8, in any order
    detail::pack_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(nullptr, 8u, t.num_groups, t.padded_cols, 4,
                                                                     false, nullptr, dst);
  } else {
    detail::Geometry g = geometry(t);
    g.padded_rows = t.num_groups;
    detail::awq_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t.zeros, g, dst);
  }
  return launched("awq qzeros");
}

Status convert_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream) {
  EPK_TRY(check_common(t));
  const std::uint64_t n = static_cast<std::uint64_t>(t.num_groups) * static_cast<std::uint64_t>(t.padded_cols);
  if (n == 0) return {};
  auto* out = static_cast<std::uint16_t*>(dst);
  if (type == DenseType::kBf16) {
    detail::scales_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(t.scales, n, nullptr, 1, out);
  } else {
    detail::scales_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(t.scales, n, nullptr, 1, out);
  }
  return launched("scales");
}

Status repack_marlin_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream) {
  EPK_TRY(check_common(t));
  if (t.padded_cols % 64 != 0) return invalid("marlin scales: padded_cols % 64 != 0");
  const bool grouped = t.group_size < t.padded_rows;
  EPK_TRY_ASSIGN(const int* sperm, marlin_scale_perm(grouped));
  const std::uint64_t n = static_cast<std::uint64_t>(t.num_groups) * static_cast<std::uint64_t>(t.padded_cols);
  if (n == 0) return {};
  auto* out = static_cast<std::uint16_t*>(dst);
  const int block = grouped ? 64 : 32;
  if (type == DenseType::kBf16) {
    detail::scales_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(t.scales, n, sperm, block, out);
  } else {
    detail::scales_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(t.scales, n, sperm, block, out);
  }
  return launched("marlin scales");
}

}  // namespace epk::cuda::intq
