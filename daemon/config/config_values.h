// What epkd's command line (config.cc) and its config file (config_file.cc) both check and apply, so that a flag and
// its key accept the same values. Not part of daemon/config/config.h's interface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "daemon/config/config.h"

namespace epk::daemon {

// spdlog's level names (spdlog::level::from_str takes these and maps anything else to "off").
inline constexpr const char* kLogLevels = "trace, debug, info, warn, error, critical, off";
bool is_log_level(std::string_view s);

// Models from a later source (the command line after the file, a file's later table) replace those of the same name.
void merge_models(std::vector<ModelSpec>* into, const std::vector<ModelSpec>& from);

// CUDA device ids are in [0, kMaxDeviceId) and listed once: appends `d` to *out, or says why not, after `where`.
inline constexpr int kMaxDeviceId = 64;
Status add_device(std::vector<int>* out, std::int64_t d, const std::string& where);

}  // namespace epk::daemon
