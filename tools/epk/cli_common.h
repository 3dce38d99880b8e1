// Helpers shared by the epk subcommands: error reporting and human-readable figures.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"

namespace epk::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;

// Prints "epk COMMAND: error" to stderr and returns kExitFailure.
int report(std::string_view command, const Error& error);

// "1.50 GiB", "812 B"
std::string human_bytes(std::uint64_t bytes);
// "[4096, 4096]"
std::string shape_string(const std::vector<std::uint64_t>& shape);
std::uint64_t element_count(const std::vector<std::uint64_t>& shape);

// --dtype values: bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, int8 (also the safetensors names BF16, F16, F32, ...).
Result<DType> parse_output_dtype(std::string_view name);

// The tool version written into .epk metadata.
std::string_view tool_version();

// Each subcommand file provides one of these; main.cc registers them. The callback stores its exit code in *exit_code.
void add_pack_command(CLI::App& app, int* exit_code);
void add_inspect_command(CLI::App& app, int* exit_code);
void add_unpack_command(CLI::App& app, int* exit_code);
void add_compress_command(CLI::App& app, int* exit_code);
void add_decompress_command(CLI::App& app, int* exit_code);
void add_verify_command(CLI::App& app, int* exit_code);
void add_import_entropack_command(CLI::App& app, int* exit_code);
void add_export_entropack_command(CLI::App& app, int* exit_code);
void add_get_command(CLI::App& app, int* exit_code);
void add_status_command(CLI::App& app, int* exit_code);
void add_top_command(CLI::App& app, int* exit_code);
void add_import_command(CLI::App& app, int* exit_code);
void add_convert_command(CLI::App& app, int* exit_code);

}  // namespace epk::cli
