// The CPU path's shard decodes (codec/decode/decode_slice.h) against the whole tensor's: one lattice-rans layer at
// 4 bits per weight into bf16, one thread, the best of a few runs. Row shards decode only their tiles; column
// shards decode every row in bands and keep their columns.
//   shard_decode_bench [ROWS COLS]   (default 4096 x 4096)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

#include "bench/timing.h"
#include "codec/container/writer.h"
#include "codec/decode/decode_slice.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"

using namespace epk;  // NOLINT

int main(int argc, char** argv) {
  const std::uint32_t rows = argc > 2 ? static_cast<std::uint32_t>(std::atoi(argv[1])) : 4096;
  const std::uint32_t cols = argc > 2 ? static_cast<std::uint32_t>(std::atoi(argv[2])) : 4096;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = d(rng);
  rate::EncodeOptions o;
  o.target_bpp = 4.0;
  auto e = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, rows, cols, DType::kF32, o, "w");
  if (!e) return std::fprintf(stderr, "%s\n", e.error().to_string().c_str()), 1;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("shard_decode_bench_" + std::to_string(::getpid()) + ".epk")).string();
  {
    auto wr = container::Writer::create(path, {});
    auto form = rans::to_container(*e, "w", {});
    if (!wr || !wr->add_tensor(form.spec, form.buffers) || !wr->finish()) return std::fprintf(stderr, "write\n"), 1;
  }
  auto r = container::Reader::open(path);
  if (!r) return 1;
  const auto& entry = *r->find("w");
  auto best_ms = [](auto&& fn) {
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      auto t0 = bench::Clock::now();
      if (!fn()) return -1.0;
      best = std::min(best, bench::us_since(t0) / 1e3);
    }
    return best;
  };
  std::vector<std::uint8_t> whole(std::size_t(rows) * cols * 2);
  const double t_whole = best_ms([&] { return static_cast<bool>(decode::decode_tensor(*r, entry, DType::kBF16, whole)); });
  std::printf("%u x %u at 4 bpp -> bf16, 1 thread, best of 5\n%-28s %10s %8s\n", rows, cols, "decode", "ms",
              "x whole");
  std::printf("%-28s %10.2f %8.3f\n", "whole", t_whole, 1.0);
  struct Case {
    const char* name;
    decode::Slice s;
  };
  const std::vector<Case> cases = {
      {"rows, rank 0 of 2", {0, 0, (rows + 1) / 2}},
      {"rows, rank 1 of 2", {0, (rows + 1) / 2, rows}},
      {"rows, rank 3 of 8", {0, 3 * ((rows + 7) / 8), 4 * ((rows + 7) / 8)}},
      {"cols, rank 0 of 2", {1, 0, (cols + 1) / 2}},
      {"cols, rank 1 of 2", {1, (cols + 1) / 2, cols}},
      {"cols, rank 3 of 8", {1, 3 * ((cols + 7) / 8), 4 * ((cols + 7) / 8)}},
  };
  for (const Case& c : cases) {
    const std::uint64_t n = c.s.axis == 0 ? (c.s.end - c.s.begin) * cols : std::uint64_t{rows} * (c.s.end - c.s.begin);
    std::vector<std::uint8_t> out(n * 2);
    const double t = best_ms([&] { return static_cast<bool>(decode::decode_tensor_slice(*r, entry, DType::kBF16, c.s, out)); });
    std::printf("%-28s %10.2f %8.3f\n", c.name, t, t / t_whole);
  }
  std::filesystem::remove(path);
  return 0;
}
