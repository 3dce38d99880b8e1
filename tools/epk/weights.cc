#include "tools/epk/weights.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "codec/decode/decode_tensor.h"

namespace epk::cli {

Result<std::vector<float>> source_f32(const safetensors::TensorView& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  std::vector<float> out(n);
  if (!decode::raw_to_f32(t.dtype, t.data, out))
    return make_error(ErrorCode::kUnsupported,
                      "tensor '" + t.name + "': dtype " + std::string(dtype_name(t.dtype)) + " is not a float dtype");
  return out;
}

double relative_l2(std::span<const float> x, std::span<const float> ref) {
  double num = 0, den = 0;
  const std::size_t n = std::min(x.size(), ref.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

std::string source_metadata_json(const safetensors::Checkpoint& c) {
  nlohmann::json j = nlohmann::json::object();
  if (!c.shards().empty())
    for (const auto& [k, v] : c.shards().front().metadata()) j[k] = v;
  return j.dump();
}

Result<std::map<std::string, std::string>> safetensors_metadata(const container::Reader& reader) {
  std::map<std::string, std::string> out;
  const auto& meta = reader.metadata();
  if (auto it = meta.find("source_metadata"); it != meta.end()) {
    auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return make_error(ErrorCode::kBadInput, reader.path() + ": metadata source_metadata: not a JSON object");
    for (const auto& [k, v] : j.items()) {
      if (!v.is_string())
        return make_error(ErrorCode::kBadInput,
                          reader.path() + ": metadata source_metadata: value of '" + k + "' is not a string");
      out[k] = v.get<std::string>();
    }
  }
  for (const char* key : {"source", "tool"})
    if (auto it = meta.find(key); it != meta.end()) out.try_emplace(std::string("epk.") + key, it->second);
  return out;
}

std::string clock_string(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace epk::cli
