// Rate limit for the log lines of refused connections: a uid reconnecting in a loop must not flood the journal (one
// line per refusal was 270,000 lines in 16 s). Each uid gets at most one line per interval; the line carries how many
// refusals of that uid went unlogged since its last one. Not thread-safe: one owner (the accept loop), or a lock
// (the service's log of requests for hidden models).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <unordered_map>

namespace epk::daemon {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kInterval{10};
  // Uids remembered at most; past it the map is cleared (a line too many, never unbounded memory).
  static constexpr std::size_t kMaxUids = 4096;

  // Whether a refusal of `uid` at `now` gets a log line; when it does, *suppressed is the number of its refusals left
  // unlogged since its previous line.
  bool should_log(uid_t uid, Clock::time_point now, std::uint64_t* suppressed);

 private:
  struct Entry {
    Clock::time_point last;
    std::uint64_t suppressed = 0;
  };
  std::unordered_map<uid_t, Entry> by_uid_;
};

}  // namespace epk::daemon
