// epkd: see daemon/server.h.
#include <cstdio>

#include "daemon/config.h"
#include "daemon/server.h"

int main(int argc, char** argv) {
  auto cfg = epk::daemon::parse_command_line(argc, argv);
  if (!cfg) {
    std::fprintf(stderr, "epkd: %s\n", cfg.error().to_string().c_str());
    return 2;
  }
  if (!cfg->has_value()) return 0;
  return epk::daemon::run_daemon(**cfg);
}
