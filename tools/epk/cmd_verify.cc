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

#include "codec/common/alloc.h"
#include "codec/container/reader.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/rans/decoder.h"
#include "codec/rate/calibration.h"
#include "codec/rate/choose.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/serve/lattice_rans_producer.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/device_decode.h"
#include "tools/epk/weights.h"

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

bool all_zero(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

struct TensorReport {
  std::string name;
  std::string encoding;
  std::vector<std::string> problems;
  std::uint32_t tiles = 0;
  std::vector<std::pair<std::uint32_t, std::string>> bad_tiles;
  std::uint64_t weights = 0;
  std::uint64_t stored = 0;
  double target = 0;
  std::optional<double> rel_l2;
  std::optional<double> max_error;  // the ceiling rel_l2 (h_rel for a calibrated tensor) was held to
  bool calibrated = false;          // rounded with calibration statistics (params.encoder.calibrated)
  std::optional<double> h_rel;      // with --calibration: the H-weighted relative error
};

// Decodes every tile of s; corrupt tiles into rep. With want_f32, also the reconstruction.
void check_stream(const serve::LatticeRansProducer& p, const std::string& where, Device device, int threads,
                  TensorReport& rep, std::vector<float>* f32) {
  const auto& s = p.stream();
  rep.tiles = s.tiles();
  if (device == Device::kCuda) {
    std::vector<float> local;
    auto& out = f32 ? *f32 : local;
    if (auto sized = resize_for_tensor(out, std::uint64_t(s.rows) * s.cols, where + ": float32 weights"); !sized) {
      rep.problems.push_back(sized.error().message);
      return;
    }
    std::vector<GpuTileFault> faults;
    auto stat =
        gpu_decode(p, DType::kF32,
                   std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size() * 4), &faults);
    for (const auto& f : faults) rep.bad_tiles.push_back({f.tile, f.reason});
    if (!stat && faults.empty()) rep.problems.push_back(stat.error().message);
    if (!stat && f32) f32->clear();
    return;
  }
  if (f32) {
    if (auto sized = resize_for_tensor(*f32, std::uint64_t(s.rows) * s.cols, where + ": float32 weights"); !sized) {
      rep.problems.push_back(sized.error().message);
      return;
    }
    std::vector<rans::TileStatus> faults;
    auto stat = rans::decode(s, where, DType::kF32,
                             std::span<std::byte>(reinterpret_cast<std::byte*>(f32->data()), f32->size() * 4), threads,
                             &faults);
    for (const auto& f : faults) rep.bad_tiles.push_back({f.tile, rans::tile_fault_name(f.fault)});
    if (!stat && faults.empty()) rep.problems.push_back(stat.error().message);
    if (!stat) f32->clear();
    return;
  }
  auto faults = rans::check_tiles(s, where, threads);
  if (!faults) {
    rep.problems.push_back(faults.error().message);
    return;
  }
  for (const auto& f : *faults) rep.bad_tiles.push_back({f.tile, rans::tile_fault_name(f.fault)});
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
  std::vector<TensorReport> reports;
  for (const auto& t : reader.tensors()) {
    TensorReport rep;
    rep.name = t.name;
    rep.encoding = std::string(container::encoding_name(t.encoding));
    rep.weights = t.element_count();
    rep.stored = rans::stored_bytes(t);
    const std::string where = reader.path() + ": tensor '" + t.name + "'";
    if (auto st = reader.verify(t); !st) rep.problems.push_back(st.error().message);
    const safetensors::TensorView* src = nullptr;
    if (source) {
      src = source->find(t.name);
      if (!src) {
        rep.problems.push_back(where + ": not in " + args.against);
      } else if (src->shape != t.shape) {
        rep.problems.push_back(where + ": shape " + shape_string(t.shape) + " differs from the source's " +
                               shape_string(src->shape));
        src = nullptr;
      }
    }
    std::vector<float> decoded;
    bool have_decoded = false;
    if (t.encoding == container::Encoding::kLatticeRans) {
      auto stored = rans::from_container(reader, t);
      if (!stored) {
        rep.problems.push_back(stored.error().message);
      } else {
        rep.target = stored->info.target_bpp;
        rep.calibrated = stored->info.calibrated;
        const serve::LatticeRansProducer producer(reader, t, reader.path(), std::move(*stored));
        check_stream(producer, where, device, threads, rep, src ? &decoded : nullptr);
        have_decoded = src && !decoded.empty();
      }
    } else if (src || t.encoding != container::Encoding::kRaw) {
      // Every tensor that is not stored as plain bytes is decoded, source or not: a tensor reported ok must be one
      // that decompress, convert and epkd can read.
      auto d = decode::decode_tensor_f32(reader, t);
      if (d) {
        decoded = std::move(*d);
        have_decoded = src != nullptr;
      } else if (src && t.encoding == container::Encoding::kRaw && src->dtype == t.dtype && t.buffers.size() == 1) {
        // A raw tensor of a non-float dtype: compared byte for byte.
        auto bytes = reader.buffer(t, 0);
        const bool same = bytes.size() == src->data.size() && std::equal(bytes.begin(), bytes.end(), src->data.begin());
        rep.rel_l2 = same ? 0.0 : 1.0;
        if (!same) rep.problems.push_back(where + ": raw bytes differ from the source");
      } else {
        rep.problems.push_back(d.error().message);
      }
    }
    if (have_decoded) {
      auto ref = source_f32(*src);
      if (ref) {
        rep.rel_l2 = relative_l2(decoded, *ref);
        if (const rate::HessianView* h = calibration ? calibration->find(t.name) : nullptr)
          rep.h_rel = rate::h_weighted_relative_error(*ref, decoded, ref->size() / h->cols, *h, threads);
        if (all_zero(decoded) && !all_zero(*ref)) {
          rep.problems.push_back(where + ": decodes to all zeros where the source is not");
        } else if (t.encoding == container::Encoding::kLatticeRans && (!rep.calibrated || rep.h_rel)) {
          // The ceiling at the tensor's target rate (its stored rate when no target was recorded, as for streams
          // imported from the reference package). A calibrated tensor is judged by its H-weighted error, as compress
          // judged it (docs/FORMAT.md 12.4), so only when its statistics are given.
          const double rate = rep.target > 0 ? rep.target : 8.0 * double(rep.stored) / double(std::max<std::uint64_t>(rep.weights, 1));
          const double ceiling = max_error.value_or(rate::default_max_rel_l2(rate));
          rep.max_error = ceiling;
          const double e = rep.calibrated ? *rep.h_rel : *rep.rel_l2;
          if (!(e <= ceiling)) {
            char buf[160];
            std::snprintf(buf, sizeof buf, ": %s error %.4f%% is above the ceiling %.4f%%",
                          rep.calibrated ? "H-weighted relative L2" : "relative L2", 100.0 * e, 100.0 * ceiling);
            rep.problems.push_back(where + buf);
          }
        }
      } else {
        rep.problems.push_back(ref.error().message);
      }
      if (t.encoding == container::Encoding::kRaw && rep.rel_l2 && *rep.rel_l2 != 0.0)
        rep.problems.push_back(where + ": raw tensor differs from the source");
    }
    for (const auto& [tile, why] : rep.bad_tiles)
      rep.problems.push_back(where + ": tile " + std::to_string(tile) + " is corrupt (" + why + ")");
    reports.push_back(std::move(rep));
  }
  if (source)
    for (const auto& s : source->tensors())
      if (!reader.find(s.name)) {
        TensorReport rep;
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
