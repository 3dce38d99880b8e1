#include "codec/layouts/quant_config.h"

#include <cctype>

#include <nlohmann/json.hpp>

namespace epk::layouts {
namespace {

using nlohmann::json;

Error bad(std::string_view label, const std::string& what) {
  return make_error(ErrorCode::kBadInput, std::string(label) + ": " + what);
}

Error unsupported(std::string_view label, const std::string& what) {
  return make_error(ErrorCode::kUnsupported, std::string(label) + ": " + what);
}

Result<std::int64_t> get_int(const json& j, const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi,
                             std::string_view label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return bad(label, std::string(key) + " is not an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) return bad(label, std::string(key) + " = " + std::to_string(v) + " out of range");
  return v;
}

Result<bool> get_bool(const json& j, const char* key, bool fallback, std::string_view label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return bad(label, std::string(key) + " is not a boolean");
  return it->get<bool>();
}

std::string get_string(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<QuantConfig> parse_ct(const json& q, std::string_view label) {
  QuantConfig c;
  c.format = QuantFormat::kCompressedTensors;
  const std::string fmt = get_string(q, "format");
  if (fmt != "pack-quantized") return unsupported(label, "compressed-tensors format '" + fmt + "'");
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->size() != 1) {
    return unsupported(label, "compressed-tensors needs exactly one config group here");
  }
  const json& g = groups->begin().value();
  auto w = g.find("weights");
  if (w == g.end() || !w->is_object()) return bad(label, "config group without weights");
  EPK_TRY_ASSIGN(std::int64_t bits, get_int(*w, "num_bits", 4, 1, 8, label));
  c.bits = static_cast<int>(bits);
  EPK_TRY_ASSIGN(c.group_size, get_int(*w, "group_size", -1, -1, 1 << 30, label));
  EPK_TRY_ASSIGN(c.symmetric, get_bool(*w, "symmetric", true, label));
  const std::string type = get_string(*w, "type");
  if (!type.empty() && type != "int") return unsupported(label, "compressed-tensors weight type '" + type + "'");
  const std::string strategy = get_string(*w, "strategy");
  if (strategy == "channel") c.group_size = -1;
  else if (strategy != "group") return unsupported(label, "compressed-tensors strategy '" + strategy + "'");
  const std::string actorder = get_string(*w, "actorder");
  c.desc_act = actorder == "group" || actorder == "weight";
  return c;
}

}  // namespace

Result<QuantConfig> parse_quant_config(std::string_view json_text, std::string_view label) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return bad(label, "not a JSON object");
  const json* q = &root;
  auto nested = root.find("quantization_config");
  if (nested != root.end()) {
    if (!nested->is_object()) return bad(label, "quantization_config is not an object");
    q = &*nested;
  }
  std::string method = get_string(*q, "quant_method");
  if (method.empty() && q->contains("bits") && q->contains("group_size")) method = "gptq";  // quantize_config.json
  QuantConfig c;
  if (method == "gptq") {
    c.format = QuantFormat::kGptq;
    EPK_TRY_ASSIGN(std::int64_t bits, get_int(*q, "bits", 4, 2, 8, label));
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8) return unsupported(label, "GPTQ bits " + std::to_string(bits));
    c.bits = static_cast<int>(bits);
    EPK_TRY_ASSIGN(c.group_size, get_int(*q, "group_size", -1, -1, 1 << 30, label));
    EPK_TRY_ASSIGN(c.desc_act, get_bool(*q, "desc_act", false, label));
    EPK_TRY_ASSIGN(c.symmetric, get_bool(*q, "sym", true, label));
    std::string fmt = get_string(*q, "checkpoint_format");
    if (fmt.empty()) fmt = "gptq";
    EPK_TRY_ASSIGN(bool is_marlin, get_bool(*q, "is_marlin_format", false, label));
    if (is_marlin) fmt = "marlin";
    if (fmt == "gptq") c.gptq_zeros = GptqZeros::kV1;
    else if (fmt == "gptq_v2") c.gptq_zeros = GptqZeros::kV2;
    else if (fmt == "marlin") c.gptq_marlin = true;
    else return unsupported(label, "GPTQ checkpoint_format '" + fmt + "'");
    if (c.gptq_marlin) {
      // The Marlin kernel these checkpoints were written for: uint4b8 (symmetric 4-bit), groups in K order.
      if (c.bits != 4) return unsupported(label, "Marlin checkpoint with " + std::to_string(c.bits) + "-bit codes");
      if (!c.symmetric) return unsupported(label, "Marlin checkpoint with asymmetric zero points");
      if (c.desc_act) return unsupported(label, "Marlin checkpoint with desc_act (no g_idx in that format)");
    }
  } else if (method == "awq") {
    c.format = QuantFormat::kAwq;
    EPK_TRY_ASSIGN(std::int64_t bits, get_int(*q, q->contains("w_bit") ? "w_bit" : "bits", 4, 1, 8, label));
    if (bits != 4) return unsupported(label, "AWQ bits " + std::to_string(bits));
    c.bits = 4;
    EPK_TRY_ASSIGN(c.group_size, get_int(*q, q->contains("q_group_size") ? "q_group_size" : "group_size", 128, -1,
                                         1 << 30, label));
    EPK_TRY_ASSIGN(bool zero_point, get_bool(*q, "zero_point", true, label));
    c.symmetric = !zero_point;
    c.awq_version = get_string(*q, "version");
    if (c.awq_version.empty()) c.awq_version = "gemm";
    for (auto& ch : c.awq_version) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (c.awq_version != "gemm" && c.awq_version != "gemv") {
      return unsupported(label, "AWQ version '" + c.awq_version + "'");
    }
  } else if (method == "compressed-tensors") {
    return parse_ct(*q, label);
  } else if (method == "bitsandbytes") {
    c.format = QuantFormat::kBitsandbytes4bit;
    EPK_TRY_ASSIGN(bool four, get_bool(*q, "load_in_4bit", false, label));
    if (!four) return unsupported(label, "bitsandbytes 8-bit");
    c.bnb_quant_type = get_string(*q, "bnb_4bit_quant_type");
    if (c.bnb_quant_type.empty()) c.bnb_quant_type = "fp4";
    if (c.bnb_quant_type != "nf4" && c.bnb_quant_type != "fp4") {
      return bad(label, "bnb_4bit_quant_type '" + c.bnb_quant_type + "'");
    }
    c.bits = 4;
  } else {
    return unsupported(label, "quant_method '" + method + "'");
  }
  return c;
}

}  // namespace epk::layouts
