// epk compress IN -o OUT.epk --bpp R [--rdo N] [--rule PATTERN=R]... [--budget-bpp R] [--threads N]
//   [--include-embeddings]: 2-D linear weights become lattice-rans tensors, the rest stays raw. One tensor at a time
// is held in memory beyond the mapped input.
#include <fnmatch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rans/decoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/budget.h"
#include "codec/rate/encode.h"
#include "codec/safetensors/checkpoint.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/weights.h"

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
  int threads = 1;
  bool include_embeddings = false;
};

struct Rule {
  std::string pattern;
  std::optional<double> bpp;  // nullopt: raw
};

struct Plan {
  bool encode = false;
  bool fixed = false;  // the rate came from a rule (not from --bpp or the budget)
  double target = 0.0;
  std::string why;  // for raw tensors: why they stay raw
};

inline constexpr double kMaxBpp = 16.0;
inline constexpr double kMinBpp = 0.5;

Result<Rule> parse_rule(const std::string& text) {
  const auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return make_error(ErrorCode::kInvalidArgument,
                      "--rule '" + text + "': expected PATTERN=RATE (RATE a number or raw)");
  Rule r{text.substr(0, eq), std::nullopt};
  const std::string value = text.substr(eq + 1);
  if (value == "raw") return r;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v < kMinBpp || v > kMaxBpp)
    return make_error(ErrorCode::kInvalidArgument,
                      "--rule '" + text + "': rate '" + value + "' is not raw or a number in [0.5, 16]");
  r.bpp = v;
  return r;
}

bool is_embedding(const std::string& name) {
  for (const char* p : {"*embed*", "*wte.*", "*wpe.*", "*tok_embeddings*"})
    if (::fnmatch(p, name.c_str(), 0) == 0) return true;
  return false;
}

Result<Plan> plan_tensor(const safetensors::TensorView& t, const std::vector<Rule>& rules, const CompressArgs& args) {
  const bool encodable = t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0 && t.shape[0] <= 0xffffffffu &&
                         t.shape[1] <= 0xffffffffu && rate::encode_input_supported(t.dtype);
  for (const auto& r : rules) {
    if (::fnmatch(r.pattern.c_str(), t.name.c_str(), 0) != 0) continue;
    if (!r.bpp) return Plan{false, true, 0.0, "rule " + r.pattern};
    if (!encodable)
      return make_error(ErrorCode::kInvalidArgument, "--rule " + r.pattern + ": tensor '" + t.name + "' (" +
                                                         std::string(dtype_name(t.dtype)) + " " +
                                                         shape_string(t.shape) +
                                                         ") cannot be encoded: only 2-D F32, BF16, F16, F8 and I8 "
                                                         "weights can");
    return Plan{true, true, *r.bpp, {}};
  }
  if (t.shape.size() != 2) return Plan{false, false, 0.0, t.shape.size() == 1 ? "1-D" : "not 2-D"};
  if (!encodable) return Plan{false, false, 0.0, "dtype " + std::string(dtype_name(t.dtype))};
  if (!args.include_embeddings && is_embedding(t.name)) return Plan{false, false, 0.0, "embedding"};
  return Plan{true, false, args.bpp.value_or(0.0), {}};
}

struct Row {
  std::string name;
  bool encoded = false;
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
                 current.c_str());
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

// Encodes one tensor; when the stored rate (our count: buffers + index entry) misses the target by more than 0.2%
// because the encoder's calibration counts the reference's header instead of ours, encodes once more with the target
// corrected by the difference.
Result<rans::EncodedTensor> encode_to_target(const safetensors::TensorView& t, double target, const CompressArgs& args,
                                             rate::EncodeReport* report, const rans::EncodingInfo& probe) {
  const auto rows = std::uint32_t(t.shape[0]), cols = std::uint32_t(t.shape[1]);
  const double n = double(rows) * double(cols);
  rate::EncodeOptions o;
  o.target_bpp = target;
  o.rdo_sweeps = args.rdo;
  // --rdo also turns on the encoder's other slower levers (docs/NOTES.md: each pays a little at the same rate).
  o.ecvq = o.prune_tables = o.fine_rate = args.rdo > 0;
  o.threads = args.threads;
  auto weights = std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data.data()), t.data.size());
  EPK_TRY_ASSIGN(auto enc, rate::encode(weights, rows, cols, t.dtype, o, t.name, report));
  auto ours = [&](const rans::EncodedTensor& e) {
    auto form = rans::to_container(e, t.name, probe);
    std::uint64_t b = rans::index_entry_bytes(form.spec, form.buffers);
    for (const auto& buf : form.buffers) b += buf.bytes.size();
    return double(b);
  };
  const double cap = double(dtype_bits(t.dtype));
  const double got = 8.0 * ours(enc) / n;
  if (std::abs(got / target - 1.0) > 0.002 && target < cap) {
    const double ref = 8.0 * double(rans::reference_quant_state_bytes(enc)) / n;
    o.target_bpp = std::min(cap, std::max(0.01, target + (ref - got)));
    rate::EncodeReport r2;
    EPK_TRY_ASSIGN(auto again, rate::encode(weights, rows, cols, t.dtype, o, t.name, &r2));
    if (std::abs(8.0 * ours(again) / n - target) < std::abs(got - target)) {
      enc = std::move(again);
      if (report) *report = r2;
    }
  }
  return enc;
}

Status run_compress(const CompressArgs& args) {
  if (!args.bpp && !args.budget_bpp)
    return make_error(ErrorCode::kInvalidArgument, "give a rate: --bpp R (every encoded tensor) or --budget-bpp R");
  if (args.bpp && (!std::isfinite(*args.bpp) || *args.bpp < kMinBpp || *args.bpp > kMaxBpp))
    return make_error(ErrorCode::kInvalidArgument, "--bpp " + std::to_string(*args.bpp) + " is outside [0.5, 16]");
  if (args.budget_bpp && (!std::isfinite(*args.budget_bpp) || *args.budget_bpp < 1.0 || *args.budget_bpp > 8.0))
    return make_error(ErrorCode::kInvalidArgument,
                      "--budget-bpp " + std::to_string(*args.budget_bpp) + " is outside [1, 8]");
  if (args.rdo < 0 || args.rdo > 8)
    return make_error(ErrorCode::kInvalidArgument, "--rdo " + std::to_string(args.rdo) + " is outside [0, 8]");
  if (args.threads < 1 || args.threads > 256)
    return make_error(ErrorCode::kInvalidArgument,
                      "--threads " + std::to_string(args.threads) + " is outside [1, 256]");
  std::vector<Rule> rules;
  for (const auto& text : args.rules) {
    EPK_TRY_ASSIGN(auto r, parse_rule(text));
    rules.push_back(std::move(r));
  }
  EPK_TRY_ASSIGN(auto checkpoint, safetensors::Checkpoint::open(args.input));
  const auto& tensors = checkpoint.tensors();

  std::vector<Plan> plans;
  std::uint64_t total_bytes = 0;
  for (const auto& t : tensors) {
    EPK_TRY_ASSIGN(auto p, plan_tensor(t, rules, args));
    plans.push_back(std::move(p));
    total_bytes += t.data.size();
  }

  // The budget covers every encoded tensor; rule-fixed rates are spent first, the rest is allocated.
  if (args.budget_bpp) {
    std::vector<std::size_t> free;
    std::vector<rate::LayerStats> stats;
    double all_weights = 0, fixed_bits = 0, free_weights = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!plans[i].encode) continue;
      const double n = double(element_count(tensors[i].shape));
      all_weights += n;
      if (plans[i].fixed) {
        fixed_bits += plans[i].target * n;
        continue;
      }
      EPK_TRY_ASSIGN(double e, energy(tensors[i]));
      free.push_back(i);
      stats.push_back({element_count(tensors[i].shape), e});
      free_weights += n;
    }
    if (!free.empty()) {
      rate::BudgetOptions bo;
      bo.budget_bpp = (*args.budget_bpp * all_weights - fixed_bits) / free_weights;
      bo.min_bpp = 1.0;
      bo.max_bpp = 8.0;
      if (bo.budget_bpp < bo.min_bpp || bo.budget_bpp > bo.max_bpp)
        return make_error(ErrorCode::kInvalidArgument,
                          "--budget-bpp " + std::to_string(*args.budget_bpp) + ": after the rule-fixed tensors, " +
                              std::to_string(bo.budget_bpp) + " bpp are left for the others, outside [1, 8]");
      EPK_TRY_ASSIGN(auto targets, rate::allocate_budget(stats, bo));
      for (std::size_t k = 0; k < free.size(); ++k) plans[free[k]].target = targets[k];
    }
  }

  nlohmann::json settings = {
      {"bpp", args.bpp ? nlohmann::json(*args.bpp) : nlohmann::json(nullptr)},
      {"budget_bpp", args.budget_bpp ? nlohmann::json(*args.budget_bpp) : nlohmann::json(nullptr)},
      {"rdo", args.rdo},
      // Recorded apart from rdo so that files from before --rdo implied them can be told apart.
      {"encoder_levers", args.rdo > 0 ? nlohmann::json::array({"ecvq", "prune_tables", "fine_rate"})
                                      : nlohmann::json::array()},
      {"rules", args.rules},
      {"include_embeddings", args.include_embeddings}};
  std::map<std::string, std::string> metadata = {{"source", args.input},
                                                 {"tool", "epk " + std::string(tool_version())},
                                                 {"settings", "compress " + settings.dump()}};
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(args.output, std::move(metadata)));

  std::uint64_t total_work = 0, done_work = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (plans[i].encode) total_work += tensors[i].data.size();
  Progress progress(tensors.size(), total_bytes, total_work);
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
    if (!plans[i].encode) {
      container::TensorSpec spec{t.name, t.shape, t.dtype, container::Encoding::kRaw, "{}"};
      container::BufferData data{"data", t.data};
      std::vector<container::BufferData> bufs{data};
      EPK_TRY(writer.add_tensor(spec, bufs));
      row.stored = t.data.size() + rans::index_entry_bytes(spec, bufs);
      row.note = plans[i].why;
    } else {
      rans::EncodingInfo info;
      info.target_bpp = plans[i].target;
      info.rdo_sweeps = args.rdo;
      info.rdo_candidates = rate::EncodeOptions{}.rdo_candidates;
      // params_json's length before the scale is known: a scale printed at full precision.
      rans::EncodingInfo probe_info = info;
      probe_info.scale = 0.123456789012345;
      rate::EncodeReport report;
      EPK_TRY_ASSIGN(auto enc, encode_to_target(t, plans[i].target, args, &report, probe_info));
      info.scale = report.scale;
      info.coarsened = report.coarsened;
      const double enc_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      auto form = rans::to_container(enc, t.name, info);
      EPK_TRY(writer.add_tensor(form.spec, form.buffers));
      row.stored = rans::index_entry_bytes(form.spec, form.buffers);
      for (const auto& b : form.buffers) row.stored += b.bytes.size();
      row.encoded = true;
      row.target = plans[i].target;
      row.stored_bpp = 8.0 * double(row.stored) / double(row.weights);
      // Error against the source: decode what was stored.
      std::vector<float> decoded(row.weights);
      EPK_TRY(rans::decode(enc.view(), t.name, DType::kF32,
                           std::span<std::byte>(reinterpret_cast<std::byte*>(decoded.data()), decoded.size() * 4),
                           args.threads));
      EPK_TRY_ASSIGN(auto src, source_f32(t));
      row.rel_l2 = relative_l2(decoded, src);
      row.seconds = enc_seconds;
    }
    if (!row.encoded) row.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    done_bytes += t.data.size();
    if (plans[i].encode) done_work += t.data.size();
    table.push_back(std::move(row));
  }
  progress.update(tensors.size(), done_bytes, done_work, "finishing");
  EPK_TRY(writer.finish());
  progress.finish();
  const double total_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  EPK_TRY_ASSIGN(auto written, container::Reader::open(args.output));
  std::printf("%-48s %-8s %7s %8s %8s %8s\n", "tensor", "encoding", "target", "stored", "rel_l2", "time_s");
  std::uint64_t enc_weights = 0, enc_stored = 0, all_weights = 0, all_stored = 0, encoded = 0;
  for (const auto& r : table) {
    all_weights += r.weights;
    all_stored += r.stored;
    if (r.encoded) {
      ++encoded;
      enc_weights += r.weights;
      enc_stored += r.stored;
      std::printf("%-48s %-8s %7.3f %8.3f %7.3f%% %8.2f\n", r.name.c_str(), "lattice", r.target, r.stored_bpp,
                  100.0 * r.rel_l2, r.seconds);
    } else {
      std::printf("%-48s %-8s %7s %8.3f %8s %8.2f  (%s)\n", r.name.c_str(), "raw", "-",
                  8.0 * double(r.stored) / double(std::max<std::uint64_t>(r.weights, 1)), "-", r.seconds,
                  r.note.c_str());
    }
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
                  "spend this many bits per weight over all encoded tensors, chosen per layer to minimise error");
  cmd->add_option("--threads", args->threads, "encoder threads");
  cmd->add_flag("--include-embeddings", args->include_embeddings, "encode embedding tables too");
  cmd->callback([args, exit_code] {
    auto st = run_compress(*args);
    *exit_code = st ? kExitOk : report("compress", st.error());
  });
}

}  // namespace epk::cli
