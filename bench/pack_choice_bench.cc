// What rate::pack_tensor stores for Gaussian weights of every shape from 1x8 up, at 2, 4 and 8 bpp: the lattice-rans
// candidate's stored rate and error, and the form chosen (codec/rate/choose.h). Prints one table row per case.
//   pack_choice_bench [--max-rows R] [--max-cols C] [--bpp A,B,...]   (defaults 4096 x 4096 and 2,4,8; bf16 input,
//   seed fixed per shape)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "codec/common/half.h"
#include "codec/rate/choose.h"

int main(int argc, char** argv) {
  std::uint32_t max_rows = 4096, max_cols = 4096;
  std::vector<double> rates = {2.0, 4.0, 8.0};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-rows") == 0) {
      max_rows = std::uint32_t(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--max-cols") == 0) {
      max_cols = std::uint32_t(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--bpp") == 0) {
      rates.clear();
      for (char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        const double r = std::strtod(p, &end);
        if (end == p || r < 0.5 || r > 16) {
          std::fprintf(stderr, "--bpp: rates in [0.5, 16], comma-separated\n");
          return 2;
        }
        rates.push_back(r);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--max-rows R] [--max-cols C] [--bpp A,B,...]\n", argv[0]);
      return 2;
    }
  }
  const std::pair<std::uint32_t, std::uint32_t> shapes[] = {
      {1, 8},     {1, 64},    {8, 8},     {2, 384},   {16, 16},    {32, 64},    {16, 256},   {64, 64},
      {128, 128}, {256, 256}, {512, 512}, {384, 1536}, {1024, 1024}, {4096, 4096}};
  std::printf("%-11s %6s %10s %10s %9s %9s  %-13s %s\n", "shape", "bpp", "lat_bpp", "stored", "lat_err", "stored_err",
              "chosen", "reason");
  for (const auto& [rows, cols] : shapes) {
    if (rows > max_rows || cols > max_cols) continue;
    std::mt19937 rng(rows * 7919u + cols);
    std::normal_distribution<float> g(0.0f, 0.02f);
    std::vector<std::uint16_t> w(std::size_t(rows) * cols);
    for (auto& v : w) v = epk::f32_to_bf16(g(rng));
    for (double bpp : rates) {
      epk::rate::EncodeOptions o;
      o.target_bpp = bpp;
      o.threads = 2;
      epk::rans::EncodingInfo info;
      info.target_bpp = bpp;
      auto p = epk::rate::pack_tensor(std::as_bytes(std::span(w)), rows, cols, epk::DType::kBF16, o, {}, info,
                                      "model.layers.0.mlp.weight");
      if (!p) {
        std::fprintf(stderr, "%ux%u at %.0f bpp: %s\n", rows, cols, bpp, p.error().to_string().c_str());
        return 1;
      }
      char shape[32];
      std::snprintf(shape, sizeof shape, "%ux%u", rows, cols);
      std::printf("%-11s %6.1f %10.3f %10.3f %8.3f%% %8.3f%%  %-13s %s\n", shape, bpp, p->candidate.lattice_bpp,
                  p->stored_bpp, 100.0 * p->candidate.lattice_rel_l2, 100.0 * p->rel_l2,
                  epk::rate::form_name(p->choice.form), p->choice.reason.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
