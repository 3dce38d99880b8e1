#include "codec/safetensors/reader.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "codec/common/bytes.h"
#include "codec/safetensors/json_util.h"

namespace epk::safetensors {
namespace {

using nlohmann::json;

struct Entry {
  std::string name;
  DType dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
  std::uint64_t nbytes;
};

Error bad(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kBadInput, path + ": " + what);
}

Error bad_tensor(const std::string& path, const std::string& name, const std::string& what) {
  return make_error(ErrorCode::kBadInput, path + ": tensor '" + name + "': " + what);
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

Result<Entry> parse_entry(const std::string& path, const std::string& name, const json& value) {
  if (!value.is_object()) return bad_tensor(path, name, "entry is a JSON " + json_type(value) + ", not an object");
  Entry e{name, DType::kU8, {}, 0, 0, 0};

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) return bad_tensor(path, name, "dtype: missing");
  if (!dtype_it->is_string()) return bad_tensor(path, name, "dtype: a JSON " + json_type(*dtype_it) + ", not a string");
  const auto& dtype_name_str = dtype_it->get_ref<const std::string&>();
  auto dtype = dtype_from_name(dtype_name_str);
  if (!dtype) {
    return make_error(ErrorCode::kUnsupported,
                      path + ": tensor '" + name + "': dtype: unknown dtype '" + dtype_name_str + "'");
  }
  e.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end()) return bad_tensor(path, name, "shape: missing");
  if (!shape_it->is_array()) return bad_tensor(path, name, "shape: a JSON " + json_type(*shape_it) + ", not an array");
  e.shape.reserve(shape_it->size());
  for (std::size_t i = 0; i < shape_it->size(); ++i) {
    const json& d = (*shape_it)[i];
    if (!d.is_number_unsigned()) {
      return bad_tensor(path, name,
                        "shape: dim " + std::to_string(i) + " is " + d.dump() + ", not a non-negative integer");
    }
    e.shape.push_back(d.get<std::uint64_t>());
  }

  auto off_it = value.find("data_offsets");
  if (off_it == value.end()) return bad_tensor(path, name, "data_offsets: missing");
  if (!off_it->is_array() || off_it->size() != 2) {
    return bad_tensor(path, name, "data_offsets: " + json_excerpt(*off_it) + " is not a [begin, end] pair");
  }
  for (std::size_t i = 0; i < 2; ++i) {
    if (!(*off_it)[i].is_number_unsigned()) {
      return bad_tensor(path, name, "data_offsets: " + json_excerpt(*off_it) + " holds a value that is not a "
                                    "non-negative integer");
    }
  }
  e.begin = (*off_it)[0].get<std::uint64_t>();
  e.end = (*off_it)[1].get<std::uint64_t>();

  std::uint64_t numel = 0;
  if (!shape_numel(e.shape, &numel)) {
    return bad_tensor(path, name, "shape: " + shape_string(e.shape) + ": element count overflows 64 bits");
  }
  if (!tensor_nbytes(e.dtype, numel, &e.nbytes)) {
    std::uint64_t bits = 0;
    if (!checked_mul(numel, static_cast<std::uint64_t>(dtype_bits(e.dtype)), &bits)) {
      return bad_tensor(path, name, "shape: " + shape_string(e.shape) + ": byte size overflows 64 bits");
    }
    return bad_tensor(path, name, "shape: " + shape_string(e.shape) + " of " + std::string(dtype_name(e.dtype)) +
                                      " does not fill whole bytes (" + std::to_string(bits) + " bits)");
  }
  return e;
}

Status parse_metadata(const std::string& path, const json& value, std::map<std::string, std::string>* out) {
  if (value.is_null()) return {};
  if (!value.is_object()) {
    return bad(path, std::string(kMetadataKey) + ": a JSON " + json_type(value) + ", not an object of strings");
  }
  for (const auto& [k, v] : value.items()) {
    if (!v.is_string()) {
      return bad(path, std::string(kMetadataKey) + ": key '" + k + "' holds a JSON " + json_type(v) +
                           ", not a string");
    }
    (*out)[k] = v.get<std::string>();
  }
  return {};
}

}  // namespace

bool shape_numel(std::span<const std::uint64_t> shape, std::uint64_t* out) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape)
    if (!checked_mul(n, d, &n)) return false;
  *out = n;
  return true;
}

bool tensor_nbytes(DType dtype, std::uint64_t numel, std::uint64_t* out) {
  std::uint64_t bits = 0;
  if (!checked_mul(numel, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits)) return false;
  if (bits % 8 != 0) return false;
  *out = bits / 8;
  return true;
}

Result<File> File::open(const std::string& path) {
  EPK_TRY_ASSIGN(auto map, MappedFile::open(path));
  return parse(std::move(map));
}

Result<File> File::parse(MappedFile map) {
  const std::string path = map.path();
  const auto bytes = map.bytes();
  if (bytes.size() < 8) {
    return bad(path, "header length: file is " + std::to_string(bytes.size()) + " bytes, too short for the 8-byte "
                     "header length");
  }
  const auto n = load_le<std::uint64_t>(bytes.data());
  if (n > kMaxHeaderSize) {
    return bad(path, "header length: " + std::to_string(n) + " bytes declared, more than the " +
                         std::to_string(kMaxHeaderSize) + "-byte limit");
  }
  if (n > bytes.size() - 8) {
    return bad(path, "header length: " + std::to_string(n) + " bytes declared but only " +
                         std::to_string(bytes.size() - 8) + " follow");
  }

  JsonParse parsed = parse_json_object_checked(bytes.subspan(8, static_cast<std::size_t>(n)));
  if (!parsed.error.empty()) return bad(path, "header: " + parsed.error);

  File f;
  f.header_size_ = n;
  std::vector<Entry> entries;
  entries.reserve(parsed.value.size());
  for (const auto& [key, value] : parsed.value.items()) {
    if (key == kMetadataKey) {
      EPK_TRY(parse_metadata(path, value, &f.metadata_));
      continue;
    }
    EPK_TRY_ASSIGN(auto e, parse_entry(path, key, value));
    entries.push_back(std::move(e));
  }

  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });

  const std::uint64_t data_len = bytes.size() - 8 - n;
  std::uint64_t start = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const std::string where = "data_offsets " + offsets_string(e.begin, e.end);
    if (e.end < e.begin) return bad_tensor(path, e.name, where + ": end before begin");
    if (e.begin > start) {
      return bad_tensor(path, e.name, where + ": hole of " + std::to_string(e.begin - start) +
                                          " bytes before it (previous data ends at " + std::to_string(start) + ")");
    }
    if (e.begin < start) {
      return bad_tensor(path, e.name, where + ": overlaps tensor '" + entries[i - 1].name + "' (which ends at " +
                                          std::to_string(start) + ")");
    }
    if (e.end - e.begin != e.nbytes) {
      return bad_tensor(path, e.name, where + " span " + std::to_string(e.end - e.begin) + " bytes but dtype " +
                                          std::string(dtype_name(e.dtype)) + " shape " + shape_string(e.shape) +
                                          " needs " + std::to_string(e.nbytes));
    }
    if (e.end > data_len) {
      return bad_tensor(path, e.name, where + ": past the data end (the data section has " +
                                          std::to_string(data_len) + " bytes)");
    }
    start = e.end;
  }
  if (start != data_len) {
    return bad(path, "data_offsets: tensors cover " + std::to_string(start) + " bytes but the data section has " +
                         std::to_string(data_len) + " (trailing bytes not covered)");
  }

  const std::uint8_t* data = bytes.data() + 8 + n;
  f.tensors_.reserve(entries.size());
  for (auto& e : entries) {
    f.tensors_.push_back(TensorView{std::move(e.name), e.dtype, std::move(e.shape),
                                    std::span<const std::uint8_t>(data + e.begin, static_cast<std::size_t>(e.nbytes))});
  }
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  f.map_ = std::move(map);
  return f;
}

const TensorView* File::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace epk::safetensors
