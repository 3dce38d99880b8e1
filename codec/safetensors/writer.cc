#include "codec/safetensors/writer.h"

#include <algorithm>
#include <array>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "codec/common/bytes.h"
#include "codec/safetensors/reader.h"

namespace epk::safetensors {
namespace {

// The reference's Dtype enum order (safetensors/src/tensor.rs: "MUST be in increasing alignment order"); its writer
// sorts by this, descending, then by name. F8_E4M3FNUZ, F8_E5M2FNUZ and C64 sit between, which epk does not know.
int reference_rank(DType t) {
  switch (t) {
    case DType::kBool: return 0;
    case DType::kF4: return 1;
    case DType::kF6E2M3: return 2;
    case DType::kF6E3M2: return 3;
    case DType::kU8: return 4;
    case DType::kI8: return 5;
    case DType::kF8E5M2: return 6;
    case DType::kF8E4M3: return 7;
    case DType::kF8E8M0: return 8;
    case DType::kI16: return 11;
    case DType::kU16: return 12;
    case DType::kF16: return 13;
    case DType::kBF16: return 14;
    case DType::kI32: return 15;
    case DType::kU32: return 16;
    case DType::kF32: return 17;
    case DType::kF64: return 19;
    case DType::kI64: return 20;
    case DType::kU64: return 21;
  }
  return -1;
}

Error invalid(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, path + ": " + what);
}

// serde_json and nlohmann escape strings alike (\" \\ \b \f \n \r \t, other controls as \u00xx, UTF-8 kept raw).
// False when `s` is not valid UTF-8.
bool append_json_string(std::string& out, const std::string& s) {
  try {
    out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

}  // namespace

Result<Writer> Writer::create(const std::string& path, std::vector<TensorSpec> tensors,
                              const std::map<std::string, std::string>& metadata, Order order) {
  Writer w;
  w.sizes_.reserve(tensors.size());
  std::unordered_set<std::string_view> seen;
  for (const auto& t : tensors) {
    if (t.name.empty()) return invalid(path, "tensor name: empty");
    if (t.name == kMetadataKey) return invalid(path, "tensor '" + t.name + "': name: reserved for metadata");
    if (!seen.insert(t.name).second) return invalid(path, "tensor '" + t.name + "': name: declared twice");
    std::uint64_t numel = 0, nbytes = 0;
    if (!shape_numel(t.shape, &numel)) return invalid(path, "tensor '" + t.name + "': shape: element count overflows");
    if (!tensor_nbytes(t.dtype, numel, &nbytes)) {
      return invalid(path, "tensor '" + t.name + "': shape: " + std::to_string(numel) + " elements of " +
                               std::string(dtype_name(t.dtype)) + " do not fill whole bytes or overflow");
    }
  }

  if (order == Order::kReference) {
    std::sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
      int ra = reference_rank(a.dtype), rb = reference_rank(b.dtype);
      if (ra != rb) return ra > rb;
      return a.name < b.name;  // std::string compares bytes as unsigned char: Rust's str order
    });
  }

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      if (!append_json_string(header, k)) return invalid(path, "__metadata__: a key is not valid UTF-8");
      header += ':';
      if (!append_json_string(header, v)) return invalid(path, "__metadata__: value of '" + k + "' is not valid UTF-8");
    }
    header += '}';
    first = false;
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t numel = 0, nbytes = 0;
    shape_numel(t.shape, &numel);  // checked above
    tensor_nbytes(t.dtype, numel, &nbytes);
    std::uint64_t end = 0;
    if (!checked_add(offset, nbytes, &end)) return invalid(path, "tensor '" + t.name + "': data_offsets: overflow");
    if (!first) header += ',';
    first = false;
    if (!append_json_string(header, t.name)) return invalid(path, "tensor name: not valid UTF-8");
    header += ":{\"dtype\":\"";
    header += dtype_name(t.dtype);
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i > 0) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    w.sizes_.push_back(nbytes);
    offset = end;
    if (header.size() > kMaxHeaderSize) {
      return invalid(path, "header: longer than the " + std::to_string(kMaxHeaderSize) + "-byte limit readers accept");
    }
  }
  header += '}';
  header.resize(align_up(header.size(), 8), ' ');
  if (header.size() > kMaxHeaderSize) {
    return invalid(path, "header: longer than the " + std::to_string(kMaxHeaderSize) + "-byte limit readers accept");
  }

  EPK_TRY_ASSIGN(w.out_, AtomicFileWriter::create(path));
  std::uint8_t len[8];
  store_le<std::uint64_t>(len, header.size());
  EPK_TRY(w.out_.write(len, sizeof len));
  EPK_TRY(w.out_.write(header.data(), header.size()));

  w.tensors_ = std::move(tensors);
  for (std::size_t i = 0; i < w.tensors_.size(); ++i) w.index_.emplace(w.tensors_[i].name, i);
  while (w.current_ < w.sizes_.size() && w.sizes_[w.current_] == 0) ++w.current_;
  return w;
}

std::string_view Writer::next_tensor() const {
  if (current_ >= tensors_.size()) return {};
  return tensors_[current_].name;
}

Status Writer::fail(Error e) {
  failed_ = true;
  out_ = AtomicFileWriter();  // drops the temporary file
  return e;
}

Status Writer::write(std::string_view name, std::span<const std::uint8_t> piece) {
  const std::string& path = out_.final_path();
  if (failed_ || finished_) return make_error(ErrorCode::kInvalidArgument, "safetensors writer: write after an error or finish()");
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return fail(invalid(path, "tensor '" + std::string(name) + "': not declared"));
  if (piece.empty()) return {};
  if (it->second != current_) {
    if (current_ >= tensors_.size() || it->second < current_) {
      return fail(invalid(path, "tensor '" + std::string(name) + "': data: already complete"));
    }
    return fail(invalid(path, "tensor '" + std::string(name) + "': data: supplied while tensor '" +
                                  tensors_[current_].name + "' has " + std::to_string(current_done_) + " of " +
                                  std::to_string(sizes_[current_]) + " bytes (tensors come in file order)"));
  }
  const std::uint64_t left = sizes_[current_] - current_done_;
  if (piece.size() > left) {
    return fail(invalid(path, "tensor '" + std::string(name) + "': data: " + std::to_string(piece.size()) +
                                  " bytes supplied but only " + std::to_string(left) + " of " +
                                  std::to_string(sizes_[current_]) + " remain"));
  }
  if (auto s = out_.write(piece); !s) return fail(std::move(s).error());
  current_done_ += piece.size();
  if (current_done_ == sizes_[current_]) {
    current_done_ = 0;
    ++current_;
    while (current_ < sizes_.size() && sizes_[current_] == 0) ++current_;
  }
  return {};
}

Status Writer::finish() {
  if (failed_ || finished_) return make_error(ErrorCode::kInvalidArgument, "safetensors writer: finish() after an error or twice");
  const std::string path = out_.final_path();
  if (current_ < tensors_.size()) {
    return fail(invalid(path, "tensor '" + tensors_[current_].name + "': data: " + std::to_string(current_done_) +
                                  " of " + std::to_string(sizes_[current_]) + " bytes supplied at finish()"));
  }
  finished_ = true;
  return out_.commit();
}

}  // namespace epk::safetensors
