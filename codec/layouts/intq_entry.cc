#include "codec/layouts/intq_entry.h"

#include <algorithm>

namespace epk::layouts::intq::detail {
namespace {

Result<json> parse_params(const Where& w) {
  json j = json::parse(w.entry.params_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return w.bad("params", "not a JSON object");
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_unsigned() || v->get<std::uint64_t>() != kParamsVersion) {
    return w.bad("params.version", "missing or not " + std::to_string(kParamsVersion));
  }
  return j;
}

Result<Kind> parse_kind(const Where& w, const json& j) {
  EPK_TRY_ASSIGN(std::string k, get_string(w, j, "kind"));
  for (Kind kind : {Kind::kInt, Kind::kGguf, Kind::kBnb4})
    if (kind_name(kind) == k) return kind;  // kind_name holds the names
  return make_error(ErrorCode::kUnsupported,
                    w.reader.path() + ": tensor '" + w.entry.name + "' intq params.kind: unknown kind '" + k + "'");
}

}  // namespace

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::kInt:
      return "int";
    case Kind::kGguf:
      return "gguf";
    case Kind::kBnb4:
      return "bnb4";
  }
  return "?";
}

Result<Params> read_params(const Where& w) {
  if (w.entry.encoding != container::Encoding::kIntq) return w.bad("encoding", "not intq");
  EPK_TRY_ASSIGN(json j, parse_params(w));
  EPK_TRY_ASSIGN(Kind kind, parse_kind(w, j));
  return Params{std::move(j), kind};
}

Result<std::int64_t> get_int(const Where& w, const json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    return w.bad(std::string("params.") + key, "missing or not an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) {
    return w.bad(std::string("params.") + key,
                 std::to_string(v) + " outside " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

Result<std::string> get_string(const Where& w, const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return w.bad(std::string("params.") + key, "missing or not a string");
  return it->get<std::string>();
}

Result<bool> get_bool(const Where& w, const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return w.bad(std::string("params.") + key, "missing or not a boolean");
  return it->get<bool>();
}

Result<std::span<const std::uint8_t>> need_buffer(const Where& w, std::string_view name, std::uint64_t size) {
  auto b = w.reader.buffer(w.entry, name);
  if (!b) return w.bad(std::string("buffers.") + std::string(name), "missing");
  if (b->size() != size) {
    return w.bad(std::string("buffers.") + std::string(name),
                 "size " + std::to_string(b->size()) + ", expected " + std::to_string(size));
  }
  return *b;
}

Status only_buffers(const Where& w, std::initializer_list<std::string_view> allowed) {
  for (const auto& b : w.entry.buffers) {
    if (std::find(allowed.begin(), allowed.end(), std::string_view(b.name)) == allowed.end()) {
      return w.bad("buffers." + b.name, "not a buffer of this kind");
    }
  }
  return {};
}

Status check_shape(const Where& w, std::span<const std::uint64_t> want) {
  if (!std::equal(w.entry.shape.begin(), w.entry.shape.end(), want.begin(), want.end())) {
    std::string s = "[";
    for (std::size_t i = 0; i < want.size(); ++i) s += (i ? ", " : "") + std::to_string(want[i]);
    return w.bad("shape", "does not match the params, expected " + s + "]");
  }
  return {};
}

}  // namespace epk::layouts::intq::detail
