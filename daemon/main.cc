// epkd: see daemon/server.h.
#include <cstdio>
#include <string_view>

#include "daemon/config/config.h"
#include "daemon/server.h"

int main(int argc, char** argv) {
  // `epkd --check-config FILE`: validate and exit, 0 when the file is good, 1 with its problems.
  if (argc == 3 && std::string_view(argv[1]) == "--check-config") {
    auto r = epk::daemon::check_config_file(argv[2]);
    if (!r) {
      std::fprintf(stderr, "epkd: %s\n", r.error().message.c_str());
      return 1;
    }
    std::printf("%s\n", r->c_str());
    return 0;
  }
  auto cfg = epk::daemon::parse_command_line(argc, argv);
  if (!cfg) {
    std::fprintf(stderr, "epkd: %s\n", cfg.error().to_string().c_str());
    return 2;
  }
  if (!cfg->has_value()) return 0;
  return epk::daemon::run_daemon(**cfg);
}
