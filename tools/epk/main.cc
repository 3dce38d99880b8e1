// epk: compress, inspect, verify and convert checkpoints for epkd.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "tools/epk/cli_common.h"

int main(int argc, char** argv) {
  CLI::App app{"epk: compressed checkpoints for the epkd weight server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(epk::cli::tool_version()));
  int exit_code = epk::cli::kExitOk;
  epk::cli::add_pack_command(app, &exit_code);
  epk::cli::add_inspect_command(app, &exit_code);
  epk::cli::add_unpack_command(app, &exit_code);
  epk::cli::add_compress_command(app, &exit_code);
  epk::cli::add_decompress_command(app, &exit_code);
  epk::cli::add_verify_command(app, &exit_code);
  epk::cli::add_import_entropack_command(app, &exit_code);
  epk::cli::add_export_entropack_command(app, &exit_code);
  epk::cli::add_get_command(app, &exit_code);
  epk::cli::add_status_command(app, &exit_code);
  epk::cli::add_top_command(app, &exit_code);
  epk::cli::add_import_command(app, &exit_code);
  epk::cli::add_convert_command(app, &exit_code);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::exception& e) {  // bad_alloc on hostile input, say: a clear message, never an abort
    std::fprintf(stderr, "epk: %s\n", epk::cli::printable(e.what()).c_str());
    return epk::cli::kExitFailure;
  }
  return exit_code;
}
