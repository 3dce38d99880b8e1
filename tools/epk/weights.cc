#include "tools/epk/weights.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>


namespace epk::cli {

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
