#include "tools/epk/cli_common.h"

#include <cstdio>

namespace epk::cli {

int report(std::string_view command, const Error& error) {
  std::fprintf(stderr, "epk %.*s: %s\n", static_cast<int>(command.size()), command.data(), error.to_string().c_str());
  return kExitFailure;
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
