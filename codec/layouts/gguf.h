// GGUF files (ggml docs/gguf.md): read whole, every count and offset checked against the bytes that remain.
// Format, version 2 and 3, little-endian:
//   1. u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count
//   2. kv_count key-values: string key (u64 length + bytes), u32 value type, value. Types 0 u8, 1 i8, 2 u16, 3 i16,
//      4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 element type, u64 count, elements), 10 u64, 11 i64, 12 f64
//   3. tensor_count tensor infos: string name, u32 n_dims (1..4), n_dims u64 dims innermost first (ne[0] is the
//      contiguous axis, the reverse of PyTorch's order), u32 ggml type, u64 offset into the data section
//   4. padding to general.alignment (u32, a power of two, default 32), then the data section; every tensor offset is
//      a multiple of the alignment and its bytes lie inside the file
// Dequantization (gguf-py quants.py is the reference, bit for bit): blocks run along ne[0].
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/mapped_file.h"
#include "codec/common/result.h"

namespace epk::layouts::gguf {

enum class ValueType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};

// ggml tensor types this build knows sizes for, so a file holding any of them parses (File::parse refuses other
// numbers with kUnsupported). Which of them dequantize() reads: dequantize_supported().
enum class GgmlType : std::uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9, kQ2_K = 10, kQ3_K = 11,
  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19,
  kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41,
};

struct TypeTraits {
  std::uint32_t block_size;  // elements per block
  std::uint32_t type_size;   // bytes per block
  const char* name;
};
std::optional<TypeTraits> type_traits(std::uint32_t ggml_type);

// A key's value. Strings and arrays of scalars point into the file's bytes (valid while the File lives).
struct Value {
  ValueType type = ValueType::kU8;
  std::uint64_t u = 0;  // unsigned integer types and bool
  std::int64_t i = 0;   // signed integer types
  double f = 0;         // float types
  std::string_view str;
  ValueType elem_type = ValueType::kU8;  // arrays
  std::uint64_t count = 0;
  // Arrays of fixed-size elements (integers, floats, bool): the count * size little-endian bytes in the file, not
  // decoded; a 100 MB u8 array costs one span, not 100 M Values. Read elements with at().
  std::span<const std::uint8_t> raw;
  std::vector<Value> items;  // arrays of strings or of arrays (nested arrays allowed); empty for fixed-size elements

  // Element i (< count) of an array, decoded from raw or copied from items.
  Value at(std::uint64_t i) const;
};

// Bytes of one element of a fixed-size value type; 0 for strings and arrays.
std::uint64_t fixed_size(ValueType t);

struct KeyValue {
  std::string_view key;
  Value value;
};

struct TensorInfo {
  std::string_view name;
  std::vector<std::uint64_t> ne;  // innermost first
  std::uint32_t type = 0;
  std::uint64_t offset = 0;       // into the data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;
  // PyTorch-order shape (ne reversed).
  std::vector<std::int64_t> torch_shape() const;
};

class File {
 public:
  // Parses bytes (not copied: they must outlive the File). `label` names the file in errors.
  static Result<File> parse(std::span<const std::uint8_t> bytes, std::string label);
  // Maps and parses a file; the File owns the mapping.
  static Result<File> open(const std::string& path);

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  const std::vector<KeyValue>& kvs() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  std::span<const std::uint8_t> tensor_bytes(const TensorInfo& t) const;

 private:
  MappedFile mapping_;
  std::span<const std::uint8_t> bytes_;
  std::string label_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
};

// Whether dequantize() reads this type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL and IQ4_XS. What `epk import` stores in kind `gguf` is limited to these, so every later step can read it.
bool dequantize_supported(std::uint32_t ggml_type);

// Dequantizes n_elements (a multiple of the type's block size) of a dequantize_supported type into float32, in
// storage order. `data` must hold exactly the blocks. Bit-identical to gguf-py's dequantize. Other types:
// kUnsupported; wrong sizes: kInvalidArgument. Non-finite block scales are not checked here (check_block_scales).
Result<std::vector<float>> dequantize(std::uint32_t ggml_type, std::span<const std::uint8_t> data,
                                      std::uint64_t n_elements);

// Every per-block float field (d, dmin, m) of a dequantize_supported block type is finite: a NaN or infinite scale
// makes every weight of its block NaN or infinite, which no serving layout can carry. Plain types (F32, F16, BF16)
// have no such fields and always pass. kBadInput "LABEL: block B (elements E..): field F is NaN (f16 0xXXXX)";
// kUnsupported for a type dequantize() does not read; kInvalidArgument for a size mismatch.
Status check_block_scales(std::uint32_t ggml_type, std::span<const std::uint8_t> data, std::uint64_t n_elements,
                          std::string_view label);

}  // namespace epk::layouts::gguf
