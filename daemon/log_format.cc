#include "daemon/log_format.h"

#include <spdlog/pattern_formatter.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace epk::daemon {
namespace {

// %* in the pattern: the "<N>" priority prefix of the record's level.
class PriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    char text[8];
    const int n = std::snprintf(text, sizeof(text), "<%d>", syslog_priority(msg.level));
    dest.append(text, text + n);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

}  // namespace

int syslog_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;
  }
}

void configure_log_pattern(spdlog::logger& logger, bool journal) {
  if (journal) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<PriorityFlag>('*').set_pattern("%*[%n] %v");
    logger.set_formatter(std::move(f));
  } else {
    logger.set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  }
}

bool stderr_is_journal() {
  const char* v = std::getenv("JOURNAL_STREAM");
  return v != nullptr && *v != 0;
}

std::string kv(std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || u < 0x20 || u == 0x7f) plain = false;
  }
  if (plain) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string peer_kv(const PeerCredentials& peer) {
  return "uid=" + std::to_string(peer.uid) + " gid=" + std::to_string(peer.gid) + " pid=" + std::to_string(peer.pid);
}

}  // namespace epk::daemon
