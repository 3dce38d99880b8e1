// Helpers shared by the epk subcommands: error reporting and human-readable figures.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/common/shape.h"

namespace epk::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;

// Prints "epk COMMAND: error" to stderr and returns kExitFailure.
int report(std::string_view command, const Error& error);

// `s` safe to print on a terminal: valid UTF-8 text is kept, while C0 controls (ESC, BEL, newline, ...), DEL, C1
// controls (U+0080-U+009F) and bytes that are not valid UTF-8 become "\xNN" (one per byte), the bidirectional
// overrides and isolates (U+202A-U+202E, U+2066-U+2069) "\u{NNNN}", and a backslash "\\" so that the escapes are
// unambiguous. Every string a file or epkd controls (tensor and model names, error messages that quote them) goes
// through it before it reaches stdout or stderr: a hostile name cannot set the terminal's title or erase lines.
std::string printable(std::string_view s);

// JSON output: pure ASCII (every non-ASCII character and DEL as \uXXXX; nlohmann escapes the C0 controls itself),
// and bytes that are not valid UTF-8 (a name from epkd's wire) replaced rather than thrown on.
std::string json_text(const nlohmann::json& j);

// "1.50 GiB", "812 B"
std::string human_bytes(std::uint64_t bytes);
// "[4096, 4096]"

// --dtype values: bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, int8 (also the safetensors names BF16, F16, F32, ...).
Result<DType> parse_output_dtype(std::string_view name);

// The tool version written into .epk metadata.
std::string_view tool_version();

// The arguments of a command that reads one file and writes another.
struct InputOutputArgs {
  std::string input;
  std::string output;
};

// Registers subcommand `name`. Its arguments, an `Args` value, are shared by the returned pointer (for the caller to
// bind options to) and the callback, which runs `run(args)` once CLI11 has parsed them. An error is reported as
// "epk NAME: ..." and exits kExitFailure; a Status that holds exits kExitOk; a Result<int> carries the exit code
// (verify: the verdict on the file).
template <class Args, class R>
std::pair<CLI::App*, std::shared_ptr<Args>> add_command(CLI::App& app, int* exit_code, const std::string& name,
                                                        const std::string& description, R (*run)(const Args&)) {
  static_assert(std::is_same_v<R, Status> || std::is_same_v<R, Result<int>>, "run returns Status or Result<int>");
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(name, description);
  cmd->callback([args, exit_code, name, run] {
    const R r = run(*args);
    if (!r) {
      *exit_code = report(name, r.error());
    } else if constexpr (std::is_same_v<R, Result<int>>) {
      *exit_code = *r;
    } else {
      *exit_code = kExitOk;
    }
  });
  return {cmd, args};
}

// Options that several commands take, worded once so that every command's --help says the same.
// The required positional "input": an .epk file.
CLI::Option* add_epk_input(CLI::App& cmd, std::string& input);
// The required -o,--output: the .epk file (or .safetensors file) the command writes.
CLI::Option* add_epk_output(CLI::App& cmd, std::string& output);
CLI::Option* add_safetensors_output(CLI::App& cmd, std::string& output);
// The required --socket: the Unix socket of the epkd to ask.
CLI::Option* add_socket_option(CLI::App& cmd, std::string& socket);

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
