#include "daemon/net/refusal_log.h"

namespace epk::daemon {

bool RefusalLog::should_log(uid_t uid, Clock::time_point now, std::uint64_t* suppressed) {
  auto it = by_uid_.find(uid);
  if (it != by_uid_.end() && now - it->second.last < kInterval) {
    ++it->second.suppressed;
    return false;
  }
  if (it == by_uid_.end()) {
    if (by_uid_.size() >= kMaxUids) by_uid_.clear();
    it = by_uid_.emplace(uid, Entry{}).first;
  }
  *suppressed = it->second.suppressed;
  it->second = Entry{now, 0};
  return true;
}

}  // namespace epk::daemon
