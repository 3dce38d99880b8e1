// Checked access to a stored intq entry, shared by the intq readers and writers (not public API): the bounds both
// apply, errors that name the file, the tensor and the field, the params JSON's typed fields, the buffer checks,
// and the element conversions of scales and dense output.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/half.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/layout_util.h"

namespace epk::layouts::intq::detail {

using nlohmann::json;
using layouts::detail::sz;

// Bounds on stored extents: far above any real layer, low enough that products of two stay inside 64 bits.
inline constexpr std::int64_t kMaxExtent = std::int64_t{1} << 31;
inline constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;
// The most rows, or columns, of padding an "int" entry may have (read_int_header says why; encode_int refuses more).
inline constexpr std::int64_t kMaxPadding = 4096;

// The params "kind" string of k.
std::string_view kind_name(Kind k);

// Errors about a stored entry: "FILE: tensor 'NAME' intq FIELD: what".
struct Where {
  const container::Reader& reader;
  const container::TensorEntry& entry;
  Error bad(std::string_view field, const std::string& what) const {
    return make_error(ErrorCode::kBadInput,
                      reader.path() + ": tensor '" + entry.name + "' intq " + std::string(field) + ": " + what);
  }
};

// An intq entry's params (a JSON object whose "version" is kParamsVersion) and its kind.
struct Params {
  json j;
  Kind kind = Kind::kInt;
};
// Refuses an entry whose encoding is not intq, then reads its params and kind (a kind this build does not know is
// kUnsupported, not corrupt).
Result<Params> read_params(const Where& w);
// params[key] as an integer inside lo..hi, a string, a boolean; missing or mistyped is an error naming params.KEY.
Result<std::int64_t> get_int(const Where& w, const json& j, const char* key, std::int64_t lo, std::int64_t hi);
Result<std::string> get_string(const Where& w, const json& j, const char* key);
Result<bool> get_bool(const Where& w, const json& j, const char* key);

// The buffer `name`, which must exist and hold exactly `size` bytes.
Result<std::span<const std::uint8_t>> need_buffer(const Where& w, std::string_view name, std::uint64_t size);
// Refuses any buffer of the entry whose name is not in `allowed`.
Status only_buffers(const Where& w, std::initializer_list<std::string_view> allowed);
// Refuses an index shape other than `want`.
Status check_shape(const Where& w, std::span<const std::uint64_t> want);

inline std::vector<std::uint64_t> u64_shape(std::span<const std::int64_t> s) {
  return std::vector<std::uint64_t>(s.begin(), s.end());
}

inline void add_buffer(Encoded& e, std::string name, std::vector<std::uint8_t> bytes) {
  e.storage.push_back(std::move(bytes));
  e.names.push_back(std::move(name));
}

// v as one element of `out` at p: f16 and bf16 rounded to nearest even, any other dtype as f32. Inline: the dense
// writers call it once per weight.
inline void store_value(float v, DType out, std::uint8_t* p) {
  if (out == DType::kF16)
    store_le<std::uint16_t>(p, f32_to_f16(v));
  else if (out == DType::kBF16)
    store_le<std::uint16_t>(p, f32_to_bf16(v));
  else
    store_le<float>(p, v);
}

// values[i] as element i of `out` from dst on (2 bytes an element for f16 and bf16, else 4).
inline void store_values(std::span<const float> values, DType out, std::uint8_t* dst) {
  const std::size_t width = out == DType::kF16 || out == DType::kBF16 ? 2 : 4;
  for (std::size_t i = 0; i < values.size(); ++i) store_value(values[i], out, dst + width * i);
}

// The F16, BF16 or F32 element at p as float (exact); any other dtype is read as F32.
inline float load_float(const std::uint8_t* p, DType dtype) {
  if (dtype == DType::kF16) return f16_to_f32(load_le<std::uint16_t>(p));
  if (dtype == DType::kBF16) return bf16_to_f32(load_le<std::uint16_t>(p));
  return load_le<float>(p);
}

}  // namespace epk::layouts::intq::detail
