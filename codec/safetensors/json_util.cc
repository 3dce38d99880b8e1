#include "codec/safetensors/json_util.h"

#include <unordered_set>
#include <vector>

namespace epk::safetensors {

namespace {

// SAX pass that only tracks keys, one set per open object. nlohmann's DOM parser keeps the last of duplicate keys
// silently, and its callback parser rescans the parent object at every object end (quadratic in the tensor count:
// 100k tensors took minutes), so duplicates are found here, in linear time, before the DOM parse.
class DuplicateKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;  // first duplicate found, described
  std::string syntax_error;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    frames_.push_back(Frame{{}, pending_key_});
    pending_key_.clear();
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    pending_key_.clear();  // objects inside arrays sit under no key
    return true;
  }
  bool end_array() override { return true; }
  bool key(string_t& k) override {
    if (!frames_.back().keys.insert(k).second && duplicate.empty()) {
      duplicate = "duplicate key '" + k + "'";
      if (frames_.size() > 1) duplicate += " inside '" + frames_.back().name + "'";
    }
    pending_key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    syntax_error = ex.what();
    return false;
  }

 private:
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string name;  // the key this object sits under, for messages
  };
  bool value() {
    pending_key_.clear();
    return true;
  }
  std::vector<Frame> frames_;
  std::string pending_key_;
};

}  // namespace

JsonParse parse_json_object_checked(std::span<const std::uint8_t> text) {
  using nlohmann::json;
  JsonParse out;
  DuplicateKeyFinder finder;
  const bool ok = json::sax_parse(text.begin(), text.end(), &finder, json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (!ok) {
    out.error = "not valid JSON: " + (finder.syntax_error.empty() ? std::string("parse failed") : finder.syntax_error);
    return out;
  }
  if (!finder.duplicate.empty()) {
    out.error = finder.duplicate;
    return out;
  }
  out.value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
  if (out.value.is_discarded()) {  // cannot happen after the SAX pass accepted the same bytes
    out.value = json();
    out.error = "not valid JSON";
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
