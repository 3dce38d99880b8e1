#include "codec/layouts/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "codec/common/bytes.h"
#include "codec/common/half.h"

namespace epk::layouts::gguf {
namespace {

constexpr std::uint64_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;

// A bounds-checked reader over the file's bytes: every read names the field it was reading when it fails.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, const std::string& label) : bytes_(bytes), label_(label) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return bytes_.size() - pos_; }

  Error error(const std::string& field, const std::string& what) const {
    return make_error(ErrorCode::kBadInput, label_ + ": " + field + " at byte " + std::to_string(pos_) + ": " + what);
  }

  template <class T>
  Result<T> read(const std::string& field) {
    if (left() < sizeof(T)) {
      return error(field, "needs " + std::to_string(sizeof(T)) + " bytes, " + std::to_string(left()) + " left");
    }
    T v = load_le<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string_view> read_string(const std::string& field) {
    EPK_TRY_ASSIGN(std::uint64_t len, read<std::uint64_t>(field + " length"));
    if (len > left()) {
      return error(field, "string length " + std::to_string(len) + " exceeds the " + std::to_string(left()) +
                              " bytes left");
    }
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  Result<std::span<const std::uint8_t>> read_bytes(std::uint64_t n, const std::string& field) {
    if (n > left()) return error(field, std::to_string(n) + " bytes exceed the " + std::to_string(left()) + " left");
    auto s = bytes_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  Status skip(std::uint64_t n, const std::string& field) {
    if (n > left()) return error(field, std::to_string(n) + " bytes exceed the " + std::to_string(left()) + " left");
    pos_ += n;
    return {};
  }

 private:
  std::span<const std::uint8_t> bytes_;
  const std::string& label_;
  std::uint64_t pos_ = 0;
};

// Smallest encoded size of one value of a type (used to bound counts before allocating).
std::uint64_t min_size(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

bool known_value_type(std::uint32_t t) { return t <= 12; }

// A scalar of a fixed-size type from its little-endian bytes (the caller checked p has fixed_size(type) bytes).
Value scalar_at(ValueType type, const std::uint8_t* p) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::kU8: case ValueType::kBool: v.u = p[0]; break;
    case ValueType::kI8: v.i = static_cast<std::int8_t>(p[0]); break;
    case ValueType::kU16: v.u = load_le<std::uint16_t>(p); break;
    case ValueType::kI16: v.i = load_le<std::int16_t>(p); break;
    case ValueType::kU32: v.u = load_le<std::uint32_t>(p); break;
    case ValueType::kI32: v.i = load_le<std::int32_t>(p); break;
    case ValueType::kU64: v.u = load_le<std::uint64_t>(p); break;
    case ValueType::kI64: v.i = load_le<std::int64_t>(p); break;
    case ValueType::kF32: v.f = load_le<float>(p); break;
    case ValueType::kF64: v.f = load_le<double>(p); break;
    case ValueType::kString: case ValueType::kArray: break;
  }
  return v;
}

Result<Value> read_value(Cursor& c, ValueType type, const std::string& field, int depth) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::kU8: { EPK_TRY_ASSIGN(v.u, c.read<std::uint8_t>(field)); break; }
    case ValueType::kI8: { EPK_TRY_ASSIGN(v.i, c.read<std::int8_t>(field)); break; }
    case ValueType::kU16: { EPK_TRY_ASSIGN(v.u, c.read<std::uint16_t>(field)); break; }
    case ValueType::kI16: { EPK_TRY_ASSIGN(v.i, c.read<std::int16_t>(field)); break; }
    case ValueType::kU32: { EPK_TRY_ASSIGN(v.u, c.read<std::uint32_t>(field)); break; }
    case ValueType::kI32: { EPK_TRY_ASSIGN(v.i, c.read<std::int32_t>(field)); break; }
    case ValueType::kU64: { EPK_TRY_ASSIGN(v.u, c.read<std::uint64_t>(field)); break; }
    case ValueType::kI64: { EPK_TRY_ASSIGN(v.i, c.read<std::int64_t>(field)); break; }
    case ValueType::kF32: { EPK_TRY_ASSIGN(v.f, c.read<float>(field)); break; }
    case ValueType::kF64: { EPK_TRY_ASSIGN(v.f, c.read<double>(field)); break; }
    case ValueType::kBool: {
      EPK_TRY_ASSIGN(std::uint8_t b, c.read<std::uint8_t>(field));
      if (b > 1) return c.error(field, "bool value " + std::to_string(b));
      v.u = b;
      break;
    }
    case ValueType::kString: { EPK_TRY_ASSIGN(v.str, c.read_string(field)); break; }
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth) return c.error(field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      EPK_TRY_ASSIGN(std::uint32_t et, c.read<std::uint32_t>(field + " element type"));
      if (!known_value_type(et)) return c.error(field, "unknown array element type " + std::to_string(et));
      v.elem_type = static_cast<ValueType>(et);
      EPK_TRY_ASSIGN(v.count, c.read<std::uint64_t>(field + " count"));
      if (v.count > c.left() / min_size(v.elem_type)) {
        return c.error(field, "array count " + std::to_string(v.count) + " cannot fit in the " +
                                  std::to_string(c.left()) + " bytes left");
      }
      if (const std::uint64_t size = fixed_size(v.elem_type); size > 0) {
        // Kept as a span into the file (bounded above: count * size <= left). Bools are still checked here.
        EPK_TRY_ASSIGN(v.raw, c.read_bytes(v.count * size, field));
        if (v.elem_type == ValueType::kBool) {
          for (std::uint64_t i = 0; i < v.count; ++i) {
            if (v.raw[i] > 1) return c.error(field + "[" + std::to_string(i) + "]", "bool value " +
                                                                                      std::to_string(v.raw[i]));
          }
        }
        break;
      }
      v.items.reserve(v.count);
      for (std::uint64_t i = 0; i < v.count; ++i) {
        EPK_TRY_ASSIGN(Value item, read_value(c, v.elem_type, field + "[" + std::to_string(i) + "]", depth + 1));
        v.items.push_back(std::move(item));
      }
      break;
    }
  }
  return v;
}

}  // namespace

std::uint64_t fixed_size(ValueType t) {
  return t == ValueType::kString || t == ValueType::kArray ? 0 : min_size(t);
}

Value Value::at(std::uint64_t index) const {
  const std::uint64_t size = fixed_size(elem_type);
  if (size > 0) return scalar_at(elem_type, raw.data() + index * size);
  return items[index];
}

std::optional<TypeTraits> type_traits(std::uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::kF32: return TypeTraits{1, 4, "F32"};
    case GgmlType::kF16: return TypeTraits{1, 2, "F16"};
    case GgmlType::kQ4_0: return TypeTraits{32, 18, "Q4_0"};
    case GgmlType::kQ4_1: return TypeTraits{32, 20, "Q4_1"};
    case GgmlType::kQ5_0: return TypeTraits{32, 22, "Q5_0"};
    case GgmlType::kQ5_1: return TypeTraits{32, 24, "Q5_1"};
    case GgmlType::kQ8_0: return TypeTraits{32, 34, "Q8_0"};
    case GgmlType::kQ8_1: return TypeTraits{32, 36, "Q8_1"};
    case GgmlType::kQ2_K: return TypeTraits{256, 84, "Q2_K"};
    case GgmlType::kQ3_K: return TypeTraits{256, 110, "Q3_K"};
    case GgmlType::kQ4_K: return TypeTraits{256, 144, "Q4_K"};
    case GgmlType::kQ5_K: return TypeTraits{256, 176, "Q5_K"};
    case GgmlType::kQ6_K: return TypeTraits{256, 210, "Q6_K"};
    case GgmlType::kQ8_K: return TypeTraits{256, 292, "Q8_K"};
    case GgmlType::kIQ2_XXS: return TypeTraits{256, 66, "IQ2_XXS"};
    case GgmlType::kIQ2_XS: return TypeTraits{256, 74, "IQ2_XS"};
    case GgmlType::kIQ3_XXS: return TypeTraits{256, 98, "IQ3_XXS"};
    case GgmlType::kIQ1_S: return TypeTraits{256, 50, "IQ1_S"};
    case GgmlType::kIQ4_NL: return TypeTraits{32, 18, "IQ4_NL"};
    case GgmlType::kIQ3_S: return TypeTraits{256, 110, "IQ3_S"};
    case GgmlType::kIQ2_S: return TypeTraits{256, 82, "IQ2_S"};
    case GgmlType::kIQ4_XS: return TypeTraits{256, 136, "IQ4_XS"};
    case GgmlType::kIQ1_M: return TypeTraits{256, 56, "IQ1_M"};
    case GgmlType::kTQ1_0: return TypeTraits{256, 54, "TQ1_0"};
    case GgmlType::kTQ2_0: return TypeTraits{256, 66, "TQ2_0"};
    case GgmlType::kMXFP4: return TypeTraits{32, 17, "MXFP4"};
    case GgmlType::kNVFP4: return TypeTraits{64, 36, "NVFP4"};
    case GgmlType::kQ1_0: return TypeTraits{128, 18, "Q1_0"};
    case GgmlType::kI8: return TypeTraits{1, 1, "I8"};
    case GgmlType::kI16: return TypeTraits{1, 2, "I16"};
    case GgmlType::kI32: return TypeTraits{1, 4, "I32"};
    case GgmlType::kI64: return TypeTraits{1, 8, "I64"};
    case GgmlType::kF64: return TypeTraits{1, 8, "F64"};
    case GgmlType::kBF16: return TypeTraits{1, 2, "BF16"};
  }
  return std::nullopt;
}

std::vector<std::int64_t> TensorInfo::torch_shape() const {
  std::vector<std::int64_t> s;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) s.push_back(static_cast<std::int64_t>(*it));
  return s;
}

Result<File> File::open(const std::string& path) {
  EPK_TRY_ASSIGN(MappedFile m, MappedFile::open(path));
  const std::span<const std::uint8_t> bytes = m.bytes();
  EPK_TRY_ASSIGN(File f, parse(bytes, path));
  f.mapping_ = std::move(m);  // the mapping's address does not change when the owner moves
  return f;
}

Result<File> File::parse(std::span<const std::uint8_t> bytes, std::string label) {
  File f;
  f.bytes_ = bytes;
  f.label_ = std::move(label);
  Cursor c(bytes, f.label_);
  EPK_TRY_ASSIGN(std::uint32_t magic, c.read<std::uint32_t>("magic"));
  if (magic != 0x46554747u) return c.error("magic", "not a GGUF file");
  EPK_TRY_ASSIGN(f.version_, c.read<std::uint32_t>("version"));
  if (f.version_ != 2 && f.version_ != 3) {
    return make_error(ErrorCode::kUnsupported, f.label_ + ": GGUF version " + std::to_string(f.version_) +
                                                   " (this build reads 2 and 3)");
  }
  EPK_TRY_ASSIGN(std::uint64_t n_tensors, c.read<std::uint64_t>("tensor_count"));
  EPK_TRY_ASSIGN(std::uint64_t n_kv, c.read<std::uint64_t>("kv_count"));
  // A key-value needs at least 8 + 4 + 1 bytes and a tensor info 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.left() / 13) return c.error("kv_count", std::to_string(n_kv) + " cannot fit in the file");
  if (n_tensors > c.left() / 32) return c.error("tensor_count", std::to_string(n_tensors) + " cannot fit in the file");

  std::unordered_set<std::string_view> keys;
  f.kvs_.reserve(n_kv);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string field = "kv " + std::to_string(i);
    EPK_TRY_ASSIGN(std::string_view key, c.read_string(field + " key"));
    if (!keys.insert(key).second) return c.error(field, "duplicate key '" + std::string(key) + "'");
    EPK_TRY_ASSIGN(std::uint32_t type, c.read<std::uint32_t>(field + " type"));
    if (!known_value_type(type)) return c.error(field, "unknown value type " + std::to_string(type));
    EPK_TRY_ASSIGN(Value v, read_value(c, static_cast<ValueType>(type), "kv '" + std::string(key) + "'", 0));
    f.kvs_.push_back(KeyValue{key, std::move(v)});
  }
  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::kU32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return make_error(ErrorCode::kBadInput, f.label_ + ": general.alignment must be a power-of-two u32, got " +
                                                  std::to_string(a->u));
    }
    f.alignment_ = a->u;
  }

  std::unordered_set<std::string_view> names;
  f.tensors_.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::string field = "tensor info " + std::to_string(i);
    TensorInfo t;
    EPK_TRY_ASSIGN(t.name, c.read_string(field + " name"));
    const std::string tf = "tensor '" + std::string(t.name) + "'";
    if (!names.insert(t.name).second) return c.error(tf, "duplicate tensor name");
    EPK_TRY_ASSIGN(std::uint32_t n_dims, c.read<std::uint32_t>(tf + " n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) return c.error(tf, "n_dims " + std::to_string(n_dims) + " outside 1..4");
    t.n_elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      EPK_TRY_ASSIGN(std::uint64_t ne, c.read<std::uint64_t>(tf + " ne[" + std::to_string(d) + "]"));
      if (ne > (1ull << 62) || !checked_mul(t.n_elements, ne, &t.n_elements) || t.n_elements > (1ull << 62)) {
        return c.error(tf, "element count overflows");
      }
      t.ne.push_back(ne);
    }
    EPK_TRY_ASSIGN(t.type, c.read<std::uint32_t>(tf + " type"));
    const auto traits = type_traits(t.type);
    if (!traits) {
      return make_error(ErrorCode::kUnsupported, f.label_ + ": " + tf + ": ggml type " + std::to_string(t.type));
    }
    if (t.ne[0] % traits->block_size != 0) {
      return c.error(tf, "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " + traits->name +
                             " block size " + std::to_string(traits->block_size));
    }
    if (!checked_mul(t.n_elements / traits->block_size, traits->type_size, &t.n_bytes))
      return c.error(tf, "byte size of " + std::to_string(t.n_elements) + " elements overflows 64 bits");
    EPK_TRY_ASSIGN(t.offset, c.read<std::uint64_t>(tf + " offset"));
    if (t.offset % f.alignment_ != 0) {
      return c.error(tf, "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                             std::to_string(f.alignment_));
    }
    f.tensors_.push_back(std::move(t));
  }

  f.data_offset_ = align_up(c.pos(), f.alignment_);
  if (f.data_offset_ > bytes.size()) {
    return make_error(ErrorCode::kBadInput, f.label_ + ": data section starts at " + std::to_string(f.data_offset_) +
                                                " past the end of the file (" + std::to_string(bytes.size()) + ")");
  }
  const std::uint64_t data_size = bytes.size() - f.data_offset_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const TensorInfo& t : f.tensors_) {
    std::uint64_t end = 0;
    if (!checked_add(t.offset, t.n_bytes, &end) || end > data_size) {
      return make_error(ErrorCode::kBadInput, f.label_ + ": tensor '" + std::string(t.name) + "': bytes [" +
                                                  std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                                                  ") outside the data section (" + std::to_string(data_size) + ")");
    }
    ranges.emplace_back(t.offset, end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return make_error(ErrorCode::kBadInput,
                        f.label_ + ": two tensors overlap at data offset " + std::to_string(ranges[i].first));
    }
  }
  return f;
}

const Value* File::find(std::string_view key) const {
  for (const auto& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const std::uint8_t> File::tensor_bytes(const TensorInfo& t) const {
  return bytes_.subspan(data_offset_ + t.offset, t.n_bytes);
}

}  // namespace epk::layouts::gguf
