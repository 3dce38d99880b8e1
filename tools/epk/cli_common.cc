#include "tools/epk/cli_common.h"

#include <algorithm>
#include <cstdio>

namespace epk::cli {

int report(std::string_view command, const Error& error) {
  std::fprintf(stderr, "epk %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               printable(error.to_string()).c_str());
  return kExitFailure;
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (no overlongs, no surrogates, at most U+10FFFF) and
// its code point; 0 when it is not one.
std::size_t utf8_sequence(std::string_view s, char32_t* cp) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t n;
  char32_t v;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2, v = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, v = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, v = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(i) & 0x3f);
  }
  if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s.substr(i), &cp);
    if (n == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
      // Each byte of it escaped: an invalid byte alone, a control (C1 ones are two bytes in UTF-8) whole.
      for (std::size_t k = 0; k < std::max<std::size_t>(n, 1); ++k) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i + k]));
        out += buf;
      }
      i += std::max<std::size_t>(n, 1);
      continue;
    }
    if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
      std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp == '\\') {
      out += "\\\\";
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

CLI::Option* add_epk_input(CLI::App& cmd, std::string& input) {
  return cmd.add_option("input", input, "the .epk file")->required();
}

CLI::Option* add_epk_output(CLI::App& cmd, std::string& output) {
  return cmd.add_option("-o,--output", output, "the .epk file to write")->required();
}

CLI::Option* add_safetensors_output(CLI::App& cmd, std::string& output) {
  return cmd.add_option("-o,--output", output, "the .safetensors file to write")->required();
}

CLI::Option* add_socket_option(CLI::App& cmd, std::string& socket) {
  return cmd.add_option("--socket", socket, "epkd's socket")->required();
}

std::string human_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

Result<DType> parse_output_dtype(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"bf16", DType::kBF16},       {"fp16", DType::kF16}, {"f16", DType::kF16},
      {"fp32", DType::kF32},        {"f32", DType::kF32},  {"fp8_e4m3", DType::kF8E4M3},
      {"fp8_e5m2", DType::kF8E5M2}, {"int8", DType::kI8},  {"i8", DType::kI8}};
  for (const auto& [n, t] : kNames)
    if (n == name) return t;
  if (auto t = dtype_from_name(name)) return *t;
  return make_error(ErrorCode::kInvalidArgument,
                    "--dtype '" + std::string(name) + "': expected bf16, fp16, fp32, fp8_e4m3, fp8_e5m2 or int8");
}

std::string_view tool_version() { return EPK_VERSION; }

}  // namespace epk::cli
