// JSON helpers shared by the safetensors header and index readers (private to codec/safetensors).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace epk::safetensors {

struct JsonParse {
  nlohmann::json value;
  std::string error;  // empty on success
};

// Parses `text` as one JSON object. Refuses invalid JSON (with nlohmann's position), invalid UTF-8, a top level that
// is not an object, and duplicate keys in any object (nlohmann would silently keep the last). No exceptions escape.
JsonParse parse_json_object_checked(std::span<const std::uint8_t> text);

// "object", "array", "string", "number", ...
std::string json_type(const nlohmann::json& v);
// v.dump(), cut to a readable length for error messages.
std::string json_excerpt(const nlohmann::json& v);

}  // namespace epk::safetensors
