// Runs a command line through /bin/sh for the end-to-end tool tests: exit status and captured output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace epk::test {

struct CommandResult {
  int status;  // the exit code; -1 if the command could not start or died of a signal
  std::string out;
};

// stdout, and stderr too unless with_stderr is false (then it is discarded).
inline CommandResult run_command(const std::string& cmd, bool with_stderr = true) {
  CommandResult r{-1, {}};
  FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace epk::test
