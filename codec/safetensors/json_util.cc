#include "codec/safetensors/json_util.h"

#include <unordered_set>
#include <vector>

namespace epk::safetensors {

JsonParse parse_json_object_checked(std::span<const std::uint8_t> text) {
  using nlohmann::json;
  JsonParse out;
  // One key set per open object; arrays push nothing (their elements have no keys).
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string name;  // the key this object sits under, for messages
  };
  std::vector<Frame> stack;
  std::string last_key;
  std::string duplicate;

  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        stack.push_back(Frame{{}, last_key});
        break;
      case json::parse_event_t::object_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!stack.empty() && !stack.back().keys.insert(last_key).second && duplicate.empty()) {
          duplicate = "duplicate key '" + last_key + "'";
          if (stack.size() > 1) duplicate += " inside '" + stack.back().name + "'";
        }
        break;
      case json::parse_event_t::array_start:
        last_key.clear();  // objects inside arrays sit under no key
        break;
      default:
        break;
    }
    return true;
  };

  try {
    out.value = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    out.value = json();
    out.error = std::string("not valid JSON: ") + e.what();
    return out;
  }
  if (!duplicate.empty()) {
    out.error = duplicate;
    return out;
  }
  if (!out.value.is_object()) {
    out.error = "a JSON " + json_type(out.value) + ", not an object";
    out.value = json();
  }
  return out;
}

std::string json_type(const nlohmann::json& v) {
  if (v.is_number()) return "number";
  return v.type_name();
}

std::string json_excerpt(const nlohmann::json& v) {
  constexpr std::size_t kMax = 80;
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

}  // namespace epk::safetensors
