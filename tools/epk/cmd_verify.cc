// epk verify IN.epk [--against SRC] [--json] [--device cpu|cuda]: every buffer checksum, every tile of every
// lattice-rans tensor decoded (corrupt tiles named with tensor and tile), every intq tensor dequantized, and with
// --against the stored rate and the relative L2 error of each tensor against the source checkpoint, which must stay
// under the error ceiling (codec/rate/choose.h: --max-error, else the ceiling compress recorded, else the default at
// the tensor's target) and must not be all zero where the source is not. With --calibration STATS (docs/FORMAT.md
// 12) also each tensor's H-weighted relative error tr((W - Q) H (W - Q)^T) / tr(W H W^T) where STATS has its H.
// Exit 1 when anything is wrong.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "codec/container/reader.h"
#include "codec/describe/check_tensor.h"
#include "codec/rate/calibration.h"
#include "codec/safetensors/checkpoint.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/device_decode.h"

namespace epk::cli {
namespace {

struct VerifyArgs {
  std::string input;
  std::string against;
  bool json = false;
  std::string device;
  std::optional<double> max_error;
  int threads = 0;
  std::string calibration;
};

// The --max-error compress applied, from the file's settings metadata ("compress {json}"); nullopt when it used the
// default rule or the file was not written by compress.
std::optional<double> recorded_max_error(const container::Reader& reader) {
  auto it = reader.metadata().find("settings");
  constexpr std::string_view kPrefix = "compress ";
  if (it == reader.metadata().end() || it->second.rfind(kPrefix, 0) != 0) return std::nullopt;
  auto j = nlohmann::json::parse(it->second.substr(kPrefix.size()), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("max_error") || !j["max_error"].is_number()) return std::nullopt;
  return j["max_error"].get<double>();
}

Result<int> run_verify(const VerifyArgs& args) {
  EPK_TRY_ASSIGN(auto device, choose_device(args.device));
  const int threads = args.threads > 0 ? args.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (args.max_error && (!std::isfinite(*args.max_error) || *args.max_error <= 0.0 || *args.max_error > 1.0))
    return make_error(ErrorCode::kInvalidArgument,
                      "--max-error " + std::to_string(*args.max_error) + " is outside (0, 1]");
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.input));
  const std::optional<double> max_error = args.max_error ? args.max_error : recorded_max_error(reader);
  std::optional<safetensors::Checkpoint> source;
  if (!args.against.empty()) {
    EPK_TRY_ASSIGN(auto c, safetensors::Checkpoint::open(args.against));
    source.emplace(std::move(c));
  }
  std::optional<rate::CalibrationSet> calibration;
  if (!args.calibration.empty()) {
    if (!source) return make_error(ErrorCode::kInvalidArgument, "--calibration needs --against (the source weights)");
    EPK_TRY_ASSIGN(auto set, rate::CalibrationSet::open(args.calibration));
    EPK_TRY(set.check_against(source->tensors()));
    calibration.emplace(std::move(set));
  }
  describe::CheckOptions check;
  check.source = source ? &*source : nullptr;
  check.source_name = args.against;
  check.calibration = calibration ? &*calibration : nullptr;
  check.max_error = max_error;
  check.threads = threads;
  if (device == Device::kCuda) {
    check.gpu = [](const serve::Producer& p, std::span<std::uint8_t> dst,
                   std::vector<rans::TileFaultRecord>* faults) -> Result<bool> {
      return gpu_decode(p, DType::kF32, dst, faults);
    };
  }
  std::vector<describe::TensorCheck> reports;
  for (const auto& t : reader.tensors()) reports.push_back(describe::check_tensor(reader, t, check));
  if (source)
    for (const auto& s : source->tensors())
      if (!reader.find(s.name)) {
        describe::TensorCheck rep;
        rep.name = s.name;
        rep.encoding = "missing";
        rep.problems.push_back(args.against + ": tensor '" + s.name + "' is missing from " + args.input);
        reports.push_back(std::move(rep));
      }

  std::size_t bad = 0;
  std::uint64_t weights = 0, stored = 0, tiles = 0;
  for (const auto& r : reports) {
    bad += r.problems.empty() ? 0 : 1;
    weights += r.weights;
    stored += r.stored;
    tiles += r.tiles;
  }
  if (args.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : reports) {
      nlohmann::json bt = nlohmann::json::array();
      for (const auto& [tile, why] : r.bad_tiles) bt.push_back({{"tile", tile}, {"reason", why}});
      nlohmann::json j = {{"name", r.name},         {"encoding", r.encoding},  {"ok", r.problems.empty()},
                          {"problems", r.problems}, {"tiles", r.tiles},        {"bad_tiles", bt},
                          {"weights", r.weights},   {"stored_bytes", r.stored}};
      j["stored_bpp"] = r.weights ? 8.0 * double(r.stored) / double(r.weights) : 0.0;
      if (r.target > 0) j["target_bpp"] = r.target;
      if (r.rel_l2) j["rel_l2"] = *r.rel_l2;
      if (r.max_error) j["max_error"] = *r.max_error;
      if (r.h_rel) j["h_weighted_rel_error"] = *r.h_rel;
      if (r.calibrated) j["calibrated"] = true;
      arr.push_back(std::move(j));
    }
    nlohmann::json out = {{"file", args.input},
                          {"ok", bad == 0},
                          {"device", device == Device::kCuda ? "cuda" : "cpu"},
                          {"tensors", arr},
                          {"totals",
                           {{"tensors", reports.size()},
                            {"bad_tensors", bad},
                            {"tiles", tiles},
                            {"weights", weights},
                            {"stored_bytes", stored},
                            {"stored_bpp", weights ? 8.0 * double(stored) / double(weights) : 0.0}}}};
    if (!args.against.empty()) out["against"] = args.against;
    std::printf("%s\n", json_text(out).c_str());
  } else {
    // The h_rel column only with --calibration, so that the table is unchanged without it.
    const bool h_column = calibration.has_value();
    std::printf("%-48s %-13s %6s %8s %7s %9s%s  %s\n", "tensor", "encoding", "tiles", "stored", "target", "rel_l2",
                h_column ? "     h_rel" : "", "status");
    for (const auto& r : reports) {
      char err[32] = "-", tgt[32] = "-", hrel[32] = "";
      if (r.rel_l2) std::snprintf(err, sizeof err, "%.4f%%", 100.0 * *r.rel_l2);
      if (r.target > 0) std::snprintf(tgt, sizeof tgt, "%.3f", r.target);
      if (h_column) std::snprintf(hrel, sizeof hrel, " %9s", "-");
      if (h_column && r.h_rel) std::snprintf(hrel, sizeof hrel, " %8.4f%%", 100.0 * *r.h_rel);
      std::printf("%-48s %-13s %6u %8.3f %7s %9s%s  %s\n", printable(r.name).c_str(), r.encoding.c_str(), r.tiles,
                  r.weights ? 8.0 * double(r.stored) / double(r.weights) : 0.0, tgt, err, hrel,
                  r.problems.empty() ? "ok" : "BAD");
      for (const auto& p : r.problems) std::printf("    %s\n", printable(p).c_str());
    }
    std::printf("%s: %zu tensors, %llu tiles decoded on the %s, %zu bad\n", bad ? "FAILED" : "ok", reports.size(),
                static_cast<unsigned long long>(tiles), device == Device::kCuda ? "GPU" : "CPU", bad);
  }
  if (args.json)  // the text table already lists them
    for (const auto& r : reports)
      for (const auto& p : r.problems) std::fprintf(stderr, "epk verify: %s\n", printable(p).c_str());
  return bad ? kExitFailure : kExitOk;
}

}  // namespace

void add_verify_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "verify", "Check every checksum and tile of an .epk file; rate and error vs a source",
                  run_verify);
  add_epk_input(*cmd, args->input);
  cmd->add_option("--against", args->against, "the source checkpoint: report rate and relative L2 error per tensor");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_option("--device", args->device, "cpu or cuda (default: cuda when a GPU is present)");
  cmd->add_option("--max-error", args->max_error,
                  "with --against: ceiling on a lattice-rans tensor's relative L2 error (default: the one compress "
                  "applied, recorded in the file; else min(0.9, max(0.01, 3 * 2^-R)) at its target R)");
  cmd->add_option("--threads", args->threads, "CPU decoder threads (default: all cores)");
  cmd->add_option("--calibration", args->calibration,
                  "with --against: statistics safetensors (docs/FORMAT.md 12); also print each tensor's H-weighted "
                  "relative error tr((W-Q) H (W-Q)^T) / tr(W H W^T)");
}

}  // namespace epk::cli
