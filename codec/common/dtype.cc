#include "codec/common/dtype.h"

#include <array>

namespace epk {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool is_float;
};

constexpr std::array<DTypeInfo, kDTypeCount> kTable = {{
    {DType::kBool, "BOOL", 8, false},
    {DType::kU8, "U8", 8, false},
    {DType::kI8, "I8", 8, false},
    {DType::kF8E5M2, "F8_E5M2", 8, true},
    {DType::kF8E4M3, "F8_E4M3", 8, true},
    {DType::kF8E8M0, "F8_E8M0", 8, true},
    {DType::kI16, "I16", 16, false},
    {DType::kU16, "U16", 16, false},
    {DType::kF16, "F16", 16, true},
    {DType::kBF16, "BF16", 16, true},
    {DType::kI32, "I32", 32, false},
    {DType::kU32, "U32", 32, false},
    {DType::kF32, "F32", 32, true},
    {DType::kF64, "F64", 64, true},
    {DType::kI64, "I64", 64, false},
    {DType::kU64, "U64", 64, false},
    {DType::kF4, "F4", 4, true},
    {DType::kF6E2M3, "F6_E2M3", 6, true},
    {DType::kF6E3M2, "F6_E3M2", 6, true},
}};

const DTypeInfo& info(DType t) { return kTable[static_cast<std::size_t>(t)]; }

}  // namespace

int dtype_bits(DType t) { return info(t).bits; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kTable)
    if (e.name == name) return e.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_code(std::uint32_t code) {
  if (code >= kTable.size()) return std::nullopt;
  return static_cast<DType>(code);
}

}  // namespace epk
