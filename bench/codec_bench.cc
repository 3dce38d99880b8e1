// Rate accuracy, error and speed of the CPU EntroPack codec on synthetic layers.
//   codec_bench [--rows R] [--cols C] [--threads T] [--targets 2,3,4,5,6,8] [--rdo N] [--dists iid,gauss,student]
//               [--sample VECTORS] [--calibrate 0|1] [--input RAW_F32_FILE (rows x cols, row-major)]
//               [--list FILE: lines 'raw_f32_path rows cols name [target]'] [--tile-symbols N]
//               [--ecvq 0|1] [--ecvq-lambda F] [--ecvq-iter N] [--prune 0|1] [--fine 0|1] [--rdo-candidates K]
//               [--rdo-range LOW,HIGH]   (the encoder's levers one by one: EncodeOptions in codec/rate/encode.h)
// NF4 column: the same layer under NF4 (blocksize 64, 4.5 bpp).
// Rows are Gaussian or Student-t (3 degrees of freedom), each multiplied by a log-normal row scale (sigma 1). Stored
// bytes are the reference's count (buffers, JSON header, 16-byte alignment: its actual_bpp).
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_layers.h"
#include "codec/rans/decoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/encode.h"

namespace {

using epk::bench::make_layer;
using epk::bench::nf4_error;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: single-thread figures that a loaded machine does not distort.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU time of the whole process (all threads).
double proc_cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atof(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t rows = 4096;
  std::uint32_t cols = 4096;
  int threads = 2;
  int rdo = 0;
  std::uint64_t sample = 262144;
  int calibrate = 1;
  int ecvq = 0;
  int ecvq_iter = 2;
  double ecvq_lambda = 1.0;
  int prune = 0;
  int fine = 0;
  int rdo_candidates = 5;
  double rdo_low = 0.70;
  double rdo_high = 1.45;
  std::string input;
  std::string list;
  std::uint32_t forced_tile = 0;
  std::vector<double> targets = {2, 3, 4, 5, 6, 8};
  std::string dists = "iid,gauss,student";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") rows = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--cols") cols = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--rdo") rdo = std::atoi(argv[i + 1]);
    else if (a == "--sample") sample = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--calibrate") calibrate = std::atoi(argv[i + 1]);
    else if (a == "--ecvq") ecvq = std::atoi(argv[i + 1]);
    else if (a == "--ecvq-iter") ecvq_iter = std::atoi(argv[i + 1]);
    else if (a == "--ecvq-lambda") ecvq_lambda = std::atof(argv[i + 1]);
    else if (a == "--prune") prune = std::atoi(argv[i + 1]);
    else if (a == "--fine") fine = std::atoi(argv[i + 1]);
    else if (a == "--rdo-candidates") rdo_candidates = std::atoi(argv[i + 1]);
    else if (a == "--rdo-range") std::sscanf(argv[i + 1], "%lf,%lf", &rdo_low, &rdo_high);
    else if (a == "--input") input = argv[i + 1];
    else if (a == "--list") list = argv[i + 1];
    else if (a == "--tile-symbols") forced_tile = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--targets") targets = parse_list(argv[i + 1]);
    else if (a == "--dists") dists = argv[i + 1];
  }
  std::printf("layer %ux%u fp32 source, %d encode threads, rdo %d, ecvq %d (lambda %.2f, %d rounds), prune %d, "
              "fine %d; decode timed on 1 thread\n", rows, cols, threads, rdo, ecvq, ecvq_lambda, ecvq_iter, prune, fine);
  std::printf("enc: wall M weights/s (and per CPU-second); dec f32 / bf16: M weights per CPU-second on one thread; "
              "bf16x2: wall, 2 threads\n");
  std::printf("%-8s %6s %8s %8s %8s %9s %9s %10s %10s %10s %4s %8s\n", "dist", "target", "stored", "|s/t-1|", "relL2",
              "enc wall", "enc cpu", "dec f32", "dec bf16", "bf16x2", "pb", "NF4");
  double sum_err = 0, max_err = 0, max_nf4_ratio = 0, sum_rel4 = 0;
  int n_err = 0, n_rel4 = 0;
  auto run_layer = [&](const std::string& dist, const std::vector<float>& w, std::uint32_t n_rows,
                       std::uint32_t n_cols, const std::vector<double>& layer_targets) -> bool {
    double energy = 0;
    for (float v : w) energy += double(v) * v;
    const double nf4 = nf4_error(w, n_cols);
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(w.data()), w.size() * 4);
    const double nw = double(n_rows) * n_cols;
    for (double target : layer_targets) {
      epk::rate::EncodeOptions o;
      o.target_bpp = target;
      o.threads = threads;
      o.rdo_sweeps = rdo;
      o.search_max_vectors = sample;
      o.calibrate_rate = calibrate != 0;
      o.tile_symbols = forced_tile;
      o.ecvq = ecvq != 0;
      o.ecvq_iterations = ecvq_iter;
      o.ecvq_lambda = ecvq_lambda;
      o.prune_tables = prune != 0;
      o.fine_rate = fine != 0;
      o.rdo_candidates = rdo_candidates;
      o.rdo_ratio_low = rdo_low;
      o.rdo_ratio_high = rdo_high;
      epk::rate::EncodeReport rep;
      double t0 = now();
      double c0 = proc_cpu_now();
      auto enc = epk::rate::encode(bytes, n_rows, n_cols, epk::DType::kF32, o, dist, &rep);
      const double t_enc = now() - t0;
      const double c_enc = proc_cpu_now() - c0;
      if (!enc) {
        std::printf("encode failed: %s\n", enc.error().to_string().c_str());
        return false;
      }
      const double stored = 8.0 * double(epk::rans::reference_quant_state_bytes(*enc)) / nw;
      std::vector<float> out(w.size());
      t0 = cpu_now();
      auto st = epk::rans::decode(enc->view(), dist, epk::DType::kF32,
                                  {reinterpret_cast<std::byte*>(out.data()), out.size() * 4}, 1);
      const double t_dec = cpu_now() - t0;
      if (!st) {
        std::printf("decode failed: %s\n", st.error().to_string().c_str());
        return false;
      }
      std::vector<std::uint16_t> bf(w.size());
      t0 = cpu_now();
      st = epk::rans::decode(enc->view(), dist, epk::DType::kBF16,
                             {reinterpret_cast<std::byte*>(bf.data()), bf.size() * 2}, 1);
      const double t_bf = cpu_now() - t0;
      t0 = now();
      st = epk::rans::decode(enc->view(), dist, epk::DType::kBF16,
                             {reinterpret_cast<std::byte*>(bf.data()), bf.size() * 2}, 2);
      const double t_bf2 = now() - t0;
      double err = 0;
      for (std::size_t i = 0; i < w.size(); ++i) err += double(w[i] - out[i]) * double(w[i] - out[i]);
      const double rel = std::sqrt(err / energy);
      const double rate_err = std::fabs(stored / target - 1.0);
      sum_err += rate_err;
      max_err = std::max(max_err, rate_err);
      ++n_err;
      if (std::fabs(target - 4.0) < 1e-9) {
        max_nf4_ratio = std::max(max_nf4_ratio, rel / nf4);
        sum_rel4 += rel;
        ++n_rel4;
      }
      std::printf("%-8s %6.3f %8.4f %7.3f%% %7.3f%% %9.1f %9.1f %10.1f %10.1f %10.1f %4d %7.3f%%\n", dist.c_str(),
                  target, stored, 100 * rate_err, 100 * rel, nw / t_enc / 1e6, nw / c_enc / 1e6, nw / t_dec / 1e6,
                  nw / t_bf / 1e6, nw / t_bf2 / 1e6, rep.prob_bits, 100 * nf4);
      if (std::getenv("EPK_BENCH_VERBOSE")) {
        std::printf("    scale %.6g estimate %.0f B, buffers %llu B, blob %llu B, table entries %zu; ecvq lambda %.4g, "
                    "%llu vectors moved, %llu entries pruned\n", rep.scale, rep.estimated_bytes,
                    (unsigned long long)enc->buffer_bytes(),
                    (unsigned long long)epk::rans::reference_quant_state_bytes(*enc), enc->freq_tables.size(),
                    rep.ecvq_lambda, (unsigned long long)rep.ecvq_changed, (unsigned long long)rep.pruned_entries);
      }
      std::fflush(stdout);
    }
    return true;
  };
  if (!list.empty()) {
    std::FILE* lf = std::fopen(list.c_str(), "r");
    if (!lf) {
      std::printf("cannot open %s\n", list.c_str());
      return 1;
    }
    char line[4096];
    while (std::fgets(line, sizeof line, lf)) {
      char path[2048], name[1024];
      unsigned r = 0, c = 0;
      double t = 0;
      const int got = std::sscanf(line, "%2047s %u %u %1023s %lf", path, &r, &c, name, &t);
      if (got < 4) continue;
      std::vector<float> w(std::size_t(r) * c);
      std::FILE* f = std::fopen(path, "rb");
      if (!f || std::fread(w.data(), 4, w.size(), f) != w.size()) {
        std::printf("cannot read %s\n", path);
        return 1;
      }
      std::fclose(f);
      std::string short_name = name;
      if (short_name.size() > 8) short_name = short_name.substr(short_name.size() - 8);
      std::printf("# %s %ux%u\n", name, r, c);
      if (!run_layer(short_name, w, r, c, got == 5 ? std::vector<double>{t} : targets)) return 1;
    }
    std::fclose(lf);
  } else {
    for (const std::string& dist : {std::string("iid"), std::string("gauss"), std::string("student"), std::string("file")}) {
      if (input.empty() ? (dist == "file" || dists.find(dist) == std::string::npos) : dist != "file") continue;
      std::vector<float> w;
      if (input.empty()) {
        w = make_layer(rows, cols, dist, 42);
      } else {
        w.resize(std::size_t(rows) * cols);
        std::FILE* f = std::fopen(input.c_str(), "rb");
        if (!f || std::fread(w.data(), 4, w.size(), f) != w.size()) {
          std::printf("cannot read %zu floats from %s\n", w.size(), input.c_str());
          return 1;
        }
        std::fclose(f);
      }
      if (!run_layer(dist, w, rows, cols, targets)) return 1;
    }
  }
  if (n_rel4) {
    std::printf("at target 4: mean relative L2 %.3f%%, worst ratio to NF4 %.3f\n", 100 * sum_rel4 / n_rel4,
                max_nf4_ratio);
  }
  std::printf("rate error |stored/target-1|: mean %.3f%%, max %.3f%% over %d runs\n", 100 * sum_err / n_err,
              100 * max_err, n_err);
  return 0;
}
