// epk compress IN -o OUT.epk --bpp R [--rdo N] [--rule PATTERN=R]... [--budget-bpp R] [--max-error E] [--threads N]
//   [--include-embeddings] [--device cpu|cuda] [--calibration STATS] [--profile reference|native]: 2-D linear
//   weights become lattice-rans tensors (in the stream profile given), the rest stays raw. With --calibration, the
//   weights that have statistics (docs/FORMAT.md 12) are rounded with Hessian-aware error feedback
//   (codec/rate/feedback.h) on the CPU encoder; the others encode as without it. Under --budget-bpp those weights are
//   priced by their estimated output error (codec/rate/output_error.h).
// A weight whose lattice-rans form misses the rate or the error ceiling is stored raw instead (rate::pack_tensor,
// codec/rate/choose.h), and the table says why. One tensor at a time is held in memory beyond the mapped input.
// --device cuda (the default where a GPU is visible) encodes on the GPU (codec/cuda/encode/encode.h): the same streams, so
// the same file, as the CPU encoder. Which tensors are encoded, at what rate, is rate::CompressPlan's
// (codec/rate/compress_plan.h); this file parses the flags, drives the encoders, writes the file and prints the table.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "codec/container/reader.h"
#include "codec/container/write_pool.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rate/calibration.h"
#include "codec/rate/choose.h"
#include "codec/rate/compress_plan.h"
#include "codec/rate/encode.h"
#include "codec/rate/output_error.h"
#include "codec/safetensors/checkpoint.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/device_decode.h"
#include "tools/epk/encode_pipeline.h"
#include "tools/epk/weights.h"

#ifdef EPK_HAVE_CUDA
#include "codec/cuda/encode/encode.h"
#endif

namespace epk::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct CompressArgs {
  std::string input;
  std::string output;
  std::optional<double> bpp;
  int rdo = 0;
  std::vector<std::string> rules;
  std::optional<double> budget_bpp;
  std::optional<double> max_error;
  int threads = 1;
  bool include_embeddings = false;
  std::string device;
  std::string calibration;
  std::string profile = "native";
};

// Device encoders packing tensors together (EncodePipeline): one leaves the GPU mostly idle between its steps' syncs
// (docs/decisions/gpu-encoder.md); 4 were no better than 3 (docs/measurements/compress-end-to-end.md).
inline constexpr int kDeviceEncoders = 3;
// Threads hashing and writing tensors into the file (container::WritePool), and the tensors that may wait for them.
inline constexpr int kWriterThreads = 4;
inline constexpr std::size_t kWritesPending = 8;

// The encoder of a device: the CPU encoder, or the device encoder on GPU 0.
Result<std::unique_ptr<rate::TensorEncoder>> make_encoder(Device device) {
  if (device == Device::kCpu) return std::unique_ptr<rate::TensorEncoder>(std::make_unique<rate::CpuEncoder>());
#ifdef EPK_HAVE_CUDA
  EPK_TRY_ASSIGN(auto gpu, cuda::DeviceEncoder::create(0));
  return std::unique_ptr<rate::TensorEncoder>(std::move(gpu));
#else
  return make_error(ErrorCode::kUnsupported, "--device cuda: this build of epk has no CUDA");
#endif
}

struct Row {
  std::string name;
  bool encoded = false;   // stored lattice-rans
  bool fallback = false;  // planned for lattice-rans, stored raw (note says why)
  double target = 0;
  double stored_bpp = 0;
  double rel_l2 = 0;
  double seconds = 0;
  std::uint64_t weights = 0;
  std::uint64_t stored = 0;
  std::string note;
};

class Progress {
 public:
  // work: bytes of the tensors to encode (raw ones cost next to nothing), which the ETA is based on.
  Progress(std::size_t tensors, std::uint64_t bytes, std::uint64_t work)
      : tty_(::isatty(2) == 1), tensors_(tensors), bytes_(bytes), work_(work), start_(Clock::now()) {}
  void update(std::size_t done, std::uint64_t bytes_done, std::uint64_t work_done, const std::string& current) {
    if (!tty_) return;
    const double el = std::chrono::duration<double>(Clock::now() - start_).count();
    const double frac = work_ ? double(work_done) / double(work_) : 1.0;
    const std::string eta = frac > 0.0 ? clock_string(el / frac - el) : "?";
    std::fprintf(stderr, "\r\033[K[%zu/%zu tensors] %s / %s, %s elapsed, ETA %s  %s", done, tensors_,
                 human_bytes(bytes_done).c_str(), human_bytes(bytes_).c_str(), clock_string(el).c_str(), eta.c_str(),
                 printable(current).c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
  std::size_t tensors_;
  std::uint64_t bytes_;
  std::uint64_t work_;
  Clock::time_point start_;
};

Status run_compress(const CompressArgs& args) {
  rate::CompressSettings settings;
  settings.bpp = args.bpp;
  settings.budget_bpp = args.budget_bpp;
  settings.include_embeddings = args.include_embeddings;
  EPK_TRY(rate::check_rates(settings));
  if (args.max_error && (!std::isfinite(*args.max_error) || *args.max_error <= 0.0 || *args.max_error > 1.0))
    return make_error(ErrorCode::kInvalidArgument,
                      "--max-error " + std::to_string(*args.max_error) + " is outside (0, 1]");
  if (args.rdo < 0 || args.rdo > 8)
    return make_error(ErrorCode::kInvalidArgument, "--rdo " + std::to_string(args.rdo) + " is outside [0, 8]");
  if (args.threads < 1 || args.threads > 256)
    return make_error(ErrorCode::kInvalidArgument,
                      "--threads " + std::to_string(args.threads) + " is outside [1, 256]");
  for (const auto& text : args.rules) {
    EPK_TRY_ASSIGN(auto r, rate::parse_rate_rule(text));
    settings.rules.push_back(std::move(r));
  }
  if (!args.calibration.empty() && args.rdo > 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "--calibration with --rdo: calibrated rounding does not combine with ECVQ and row RDO");
  EPK_TRY_ASSIGN(Device device, choose_device(args.device));
  EPK_TRY_ASSIGN(auto encoder, make_encoder(device));
  EPK_TRY_ASSIGN(auto checkpoint, safetensors::Checkpoint::open(args.input));
  const auto& tensors = checkpoint.tensors();

  std::optional<rate::CalibrationSet> calibration;
  if (!args.calibration.empty()) {
    EPK_TRY_ASSIGN(auto set, rate::CalibrationSet::open(args.calibration));
    EPK_TRY(set.check_against(tensors));
    calibration.emplace(std::move(set));
  }
  auto stats_of = [&](std::size_t i) -> const rate::HessianView* {
    return calibration ? calibration->find(tensors[i].name) : nullptr;
  };

  // Under a budget with statistics, a tensor that has them is priced by its estimated output error, the others by
  // their weight error (docs/decisions/calibration.md). Without statistics the gain is left out, so the allocation
  // is the weight-error one bit for bit.
  rate::ErrorGain error_gain;
  if (calibration && calibration->size() > 0) {
    error_gain = [&](std::size_t i) -> Result<double> {
      const rate::HessianView* h = stats_of(i);
      if (!h) return 1.0;
      return rate::calibrated_output_gain(*h, tensors[i].name, args.threads);
    };
  }
  EPK_TRY_ASSIGN(auto plan, rate::CompressPlan::create(tensors, settings, error_gain));
  std::uint64_t total_bytes = 0;
  for (const auto& t : tensors) total_bytes += t.data.size();

  nlohmann::json recorded = {
      {"bpp", args.bpp ? nlohmann::json(*args.bpp) : nlohmann::json(nullptr)},
      {"budget_bpp", args.budget_bpp ? nlohmann::json(*args.budget_bpp) : nlohmann::json(nullptr)},
      {"rdo", args.rdo},
      // Recorded apart from rdo so that files from before --rdo implied them can be told apart.
      {"encoder_levers", rate::rdo_levers(args.rdo)},
      {"rules", args.rules},
      {"max_error", args.max_error ? nlohmann::json(*args.max_error) : nlohmann::json("auto")},
      {"include_embeddings", args.include_embeddings}};
  // Recorded only when it holds statistics (the streams are otherwise those of a compress without it), so that the
  // file is byte for byte the one compress writes without --calibration.
  if (calibration && calibration->size() > 0) recorded["calibration"] = args.calibration;
  std::map<std::string, std::string> metadata = {{"source", args.input},
                                                 {"tool", "epk " + std::string(tool_version())},
                                                 {"settings", "compress " + recorded.dump()},
                                                 {"source_metadata", source_metadata_json(checkpoint)}};
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(args.output, std::move(metadata)));
  container::WritePool writes(writer, kWriterThreads, kWritesPending);

  std::uint64_t total_work = 0, done_work = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (plan.plan(i).encode) total_work += tensors[i].data.size();
  Progress progress(tensors.size(), total_bytes, total_work);
  // On a GPU, without a budget (whose allocation follows each tensor's outcome), tensors are packed ahead of the
  // writer by several device encoders; each tensor is packed exactly as below.
  auto options_of = [&](double target, std::size_t i) {
    rate::EncodeOptions o = rate::packer_encode_options(target, args.rdo, args.threads);
    o.calibration = stats_of(i);
    return o;
  };
  auto info_of = [&](double target, std::size_t i) {
    rans::EncodingInfo info = rate::packer_encoding_info(target, args.rdo);
    info.calibrated = stats_of(i) != nullptr;
    info.profile = args.profile == "native" ? rans::StreamProfile::kNative : rans::StreamProfile::kReference;
    return info;
  };
  rate::ChoicePolicy policy;
  policy.max_rel_l2 = args.max_error;
  auto bytes_of = [&](std::size_t i) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(tensors[i].data.data()),
                                      tensors[i].data.size());
  };
  std::unique_ptr<EncodePipeline> pipeline;
  std::vector<std::size_t> job_of(tensors.size(), 0);
  if (device == Device::kCuda && !args.budget_bpp) {
    std::vector<EncodePipeline::Job> jobs;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!plan.plan(i).encode) continue;
      // Without a budget a target does not depend on what was stored before it.
      EPK_TRY_ASSIGN(const double target, plan.target(i));
      job_of[i] = jobs.size();
      jobs.push_back({bytes_of(i), std::uint32_t(tensors[i].shape[0]), std::uint32_t(tensors[i].shape[1]),
                      tensors[i].dtype, options_of(target, i), policy, info_of(target, i), tensors[i].name});
    }
    std::vector<std::unique_ptr<rate::TensorEncoder>> encoders;
    encoders.push_back(std::move(encoder));
    for (int k = 1; k < kDeviceEncoders; ++k) {
      EPK_TRY_ASSIGN(auto more, make_encoder(device));
      encoders.push_back(std::move(more));
    }
    pipeline = std::make_unique<EncodePipeline>(std::move(encoders), std::move(jobs));
  }
  std::vector<Row> table;
  std::uint64_t done_bytes = 0;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    progress.update(i, done_bytes, done_work, t.name);
    const auto t0 = Clock::now();
    Row row;
    row.name = t.name;
    row.weights = element_count(t.shape);
    const rate::TensorPlan& p = plan.plan(i);
    bool store_raw = !p.encode;
    if (p.encode) {
      EPK_TRY_ASSIGN(const double target, plan.target(i));
      rans::EncodingInfo info = info_of(target, i);
      // The result is kept by the write pool until its bytes are in the file.
      auto kept = std::make_shared<rate::Packed>();
      rate::Packed& packed = *kept;
      if (pipeline) {
        EncodePipeline::Done done = pipeline->take(job_of[i]);
        EPK_TRY_ASSIGN(packed, std::move(done.packed));
      } else {
        // The next tensor to encode is copied to the GPU while this one is encoded (a hint; the CPU ignores it).
        std::span<const std::byte> next;
        for (std::size_t j = i + 1; j < tensors.size(); ++j) {
          if (!plan.plan(j).encode) continue;
          next = bytes_of(j);
          break;
        }
        encoder->prefetch_next(next);
        EPK_TRY_ASSIGN(packed, rate::pack_tensor(*encoder, bytes_of(i), std::uint32_t(t.shape[0]),
                                                 std::uint32_t(t.shape[1]), t.dtype, options_of(target, i), policy, info,
                                                 t.name));
      }
      row.target = target;
      if (packed.choice.form == rate::Form::kLatticeRans) {
        info.scale = packed.report.scale;
        info.coarsened = packed.report.coarsened;
        info.profile = packed.profile;
        EPK_TRY_ASSIGN(rans::OwnedContainerForm owned, rans::to_container_as(packed.lattice, t.name, info));
        rans::ContainerForm& form = owned.form;
        row.stored = rans::index_entry_bytes(form.spec, form.buffers);
        for (const auto& b : form.buffers) row.stored += b.bytes.size();
        row.encoded = true;
        row.rel_l2 = packed.rel_l2;
        // The device encoder hands calibrated tensors to the CPU encoder (codec/cuda/encode/encode.h): say so.
        if (stats_of(i)) row.note = device == Device::kCuda ? "calibrated, CPU encoder" : "calibrated";
        if (!packed.profile_note.empty()) row.note += (row.note.empty() ? "" : "; ") + packed.profile_note;
        // The pool owns the result (and a native form's packed buffers) from here on and frees them once written:
        // nothing below may read `packed`.
        struct Kept {
          std::shared_ptr<rate::Packed> packed;
          std::shared_ptr<const rans::NativeMetadata> native;
        };
        auto keep = std::make_shared<const Kept>(Kept{std::move(kept), std::move(owned.native)});
        EPK_TRY(writes.add(form.spec, std::move(form.buffers), std::move(keep)));
        row.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      } else {
        store_raw = true;
        row.fallback = true;
        row.note = packed.choice.reason;
      }
    }
    if (store_raw) {
      container::TensorSpec spec{t.name, t.shape, t.dtype, container::Encoding::kRaw, "{}"};
      container::BufferData data{"data", t.data};
      std::vector<container::BufferData> bufs{data};
      row.stored = t.data.size() + rans::index_entry_bytes(spec, bufs);
      EPK_TRY(writes.add(spec, std::move(bufs), nullptr));  // a view into the mapped input
      if (!row.fallback) row.note = p.why;
    }
    row.stored_bpp = 8.0 * double(row.stored) / double(std::max<std::uint64_t>(row.weights, 1));
    plan.record_stored(i, row.stored);
    if (!row.encoded) row.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    done_bytes += t.data.size();
    if (p.encode) done_work += t.data.size();
    table.push_back(std::move(row));
  }
  progress.update(tensors.size(), done_bytes, done_work, "finishing");
  EPK_TRY(writes.finish());
  progress.finish();
  const double total_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  EPK_TRY_ASSIGN(auto written, container::Reader::open(args.output));
  // Stored rate: the tensor's buffers plus its index entry, per weight (docs/FORMAT.md 10.5), as inspect and verify
  // print it. "raw*": planned for lattice-rans, kept raw (the reason follows).
  std::printf("%-48s %-13s %7s %8s %8s %8s\n", "tensor", "encoding", "target", "stored", "rel_l2", "time_s");
  std::uint64_t plan_weights = 0, plan_stored = 0, enc_weights = 0, enc_stored = 0, all_weights = 0, all_stored = 0,
                encoded = 0, fallbacks = 0;
  for (const auto& r : table) {
    all_weights += r.weights;
    all_stored += r.stored;
    if (r.encoded || r.fallback) {
      plan_weights += r.weights;
      plan_stored += r.stored;
    }
    if (r.encoded) {
      ++encoded;
      enc_weights += r.weights;
      enc_stored += r.stored;
      std::printf("%-48s %-13s %7.3f %8.3f %7.3f%% %8.2f%s%s%s\n", printable(r.name).c_str(), "lattice-rans", r.target,
                  r.stored_bpp, 100.0 * r.rel_l2, r.seconds, r.note.empty() ? "" : "  (", printable(r.note).c_str(),
                  r.note.empty() ? "" : ")");
    } else if (r.fallback) {
      ++fallbacks;
      std::printf("%-48s %-13s %7.3f %8.3f %7.3f%% %8.2f  (%s)\n", printable(r.name).c_str(), "raw*", r.target, r.stored_bpp,
                  0.0, r.seconds, printable(r.note).c_str());
    } else {
      std::printf("%-48s %-13s %7s %8.3f %8s %8.2f  (%s)\n", printable(r.name).c_str(), "raw", "-", r.stored_bpp, "-", r.seconds,
                  printable(r.note).c_str());
    }
  }
  if (fallbacks > 0) {
    std::printf("%llu tensor%s stored raw instead of lattice-rans (raw*): its lattice-rans form missed the rate or the "
                "error ceiling (--max-error %s)\n",
                static_cast<unsigned long long>(fallbacks), fallbacks == 1 ? "" : "s",
                args.max_error ? std::to_string(*args.max_error).c_str() : "auto: min(0.9, max(0.01, 3 * 2^-target))");
  }
  if (args.budget_bpp && plan_weights > 0) {
    std::printf("budget: %.3f bpp asked over the %llu weights planned for lattice-rans, %.3f bpp stored\n",
                *args.budget_bpp, static_cast<unsigned long long>(plan_weights),
                8.0 * double(plan_stored) / double(plan_weights));
  }
  std::printf(
      "total: %zu tensors (%llu encoded, %zu raw), %llu weights; encoded %llu weights in %s = %.3f bpp; "
      "all tensors %s = %.3f bpp; file %s, alignment padding %s (not counted); %.2f s\n",
      table.size(), static_cast<unsigned long long>(encoded), table.size() - std::size_t(encoded),
      static_cast<unsigned long long>(all_weights), static_cast<unsigned long long>(enc_weights),
      human_bytes(enc_stored).c_str(), enc_weights ? 8.0 * double(enc_stored) / double(enc_weights) : 0.0,
      human_bytes(all_stored).c_str(), all_weights ? 8.0 * double(all_stored) / double(all_weights) : 0.0,
      human_bytes(written.file_size()).c_str(), human_bytes(written.padding_bytes()).c_str(), total_seconds);
  return {};
}

}  // namespace

void add_compress_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CompressArgs>();
  auto* cmd = app.add_subcommand("compress", "Encode the 2-D linear weights of a checkpoint with EntroPack");
  cmd->add_option("input", args->input, "a .safetensors file, a model.safetensors.index.json, or their directory")
      ->required();
  cmd->add_option("-o,--output", args->output, "the .epk file to write")->required();
  cmd->add_option("--bpp", args->bpp, "target bits per weight of every encoded tensor (stored, all overhead counted)");
  cmd->add_option("--rdo", args->rdo, "row RDO sweeps (0: none); > 0 also turns on ECVQ point choice, table pruning and the fine rate step");
  cmd->add_option("--rule", args->rules,
                  "PATTERN=R: tensors whose name matches the glob get rate R (or raw); "
                  "first match wins")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--budget-bpp", args->budget_bpp,
                  "spend this many bits per weight over all encoded tensors, chosen per layer to minimise error: the "
                  "weight error, or with --calibration the estimated output error of the weights that have statistics");
  cmd->add_option("--max-error", args->max_error,
                  "ceiling on a tensor's relative L2 error (0, 1]: a weight whose lattice-rans form is worse, or "
                  "misses the rate, is stored raw (default: min(0.9, max(0.01, 3 * 2^-R)) at target R)");
  cmd->add_option("--threads", args->threads, "encoder threads");
  cmd->add_flag("--include-embeddings", args->include_embeddings, "encode embedding tables too");
  cmd->add_option("--calibration", args->calibration,
                  "statistics safetensors (NAME.hessian, NAME.tokens; docs/FORMAT.md 12): weights that have them are "
                  "rounded Hessian-aware, on the CPU encoder");
  cmd->add_option("--device", args->device,
                  "cpu or cuda (default: cuda when a GPU is present); both write the same file");
  cmd->add_option("--profile", args->profile,
                  "native (default: the reference's payload with lighter metadata, so less error at the same stored "
                  "rate; docs/STREAM.md section 9) or reference (the reference package's stream, exported byte for "
                  "byte)")
      ->check(CLI::IsMember({"reference", "native"}));
  cmd->callback([args, exit_code] {
    auto st = run_compress(*args);
    *exit_code = st ? kExitOk : report("compress", st.error());
  });
}

}  // namespace epk::cli
