// epkd's log lines: an event name, then key=value fields ("decoded model=llama tensor=w0 layout=dense:bf16 bytes=512
// us=61.2"), so that journald, grep and log shippers can pick fields without parsing prose. Per-request lines
// (decodes, connects, releases) are at debug; events an operator acts on are at info and above.
// Under systemd (JOURNAL_STREAM in the environment: stderr is connected to the journal) every line starts with the
// sd-daemon priority prefix "<N>" (sd-daemon(3)), which journald turns into the record's PRIORITY; the timestamp is
// left out there (journald keeps its own).
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "daemon/net/peer_access.h"

namespace epk::daemon {

// The syslog priority journald maps a level to: critical 2, error 3, warn 4, info 6, debug and trace 7.
int syslog_priority(spdlog::level::level_enum level);
// Sets `logger`'s pattern: "<N>[name] message" when `journal`, else "[time] [name] [level] message".
void configure_log_pattern(spdlog::logger& logger, bool journal);
// Whether stderr goes to the journal (systemd sets JOURNAL_STREAM for services whose stderr is the journal).
bool stderr_is_journal();

// A field value: as is when it is non-empty and has no space, quote, '=' or control character, else in double quotes
// with '"' and '\' escaped and control characters as \n, \t or \xHH.
std::string kv(std::string_view value);
// "uid=1000 gid=1000 pid=4242"
std::string peer_kv(const PeerCredentials& peer);

}  // namespace epk::daemon
