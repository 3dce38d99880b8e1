// Open time of the resident tier: reading every tensor section of a .epk into memory with io_uring (O_DIRECT where
// aligned, or all buffered), with pread, or by touching every page of the file's map; cold-ish (the file's pages
// dropped from the page cache with posix_fadvise DONTNEED before each run; the share of pages still cached after the
// drop is printed) and warm. Each row: median of --runs, the read alone and the read plus the XXH3 of every buffer.
//
//   epk_bench_resident FILE.epk [--runs 5]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codec/container/reader.h"
#include "daemon/sources/resident_model.h"
#include "shm/unique_fd.h"

namespace {

using Clock = std::chrono::steady_clock;
using epk::daemon::ResidentModel;
using epk::daemon::ResidentOptions;
using epk::daemon::ResidentRead;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Drops the file's clean pages from the page cache; returns the fraction of pages still cached afterwards.
double drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  double cached = -1;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  if (p != MAP_FAILED) {
    const std::size_t pages = (static_cast<std::size_t>(size) + 4095) / 4096;
    std::vector<unsigned char> vec(pages);
    if (::mincore(p, static_cast<std::size_t>(size), vec.data()) == 0) {
      std::size_t in = 0;
      for (unsigned char c : vec) in += c & 1;
      cached = static_cast<double>(in) / static_cast<double>(pages);
    }
    ::munmap(p, static_cast<std::size_t>(size));
  }
  ::close(fd);
  return cached;
}

struct Row {
  double read_ms = 0, total_ms = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epk_bench_resident: open time of the resident tier (io_uring vs pread vs touching the map)"};
  std::string path;
  int runs = 5;
  bool no_lock = false, no_register = false;
  unsigned depth = 64;
  std::uint64_t chunk_kib = 1024;
  app.add_option("file", path, "a .epk file")->required();
  app.add_flag("--no-lock", no_lock, "do not mlock the arena");
  app.add_flag("--no-register", no_register, "no io_uring fixed buffers");
  app.add_option("--depth", depth, "io_uring queue depth");
  app.add_option("--chunk-kib", chunk_kib, "bytes per io_uring request, KiB (multiple of 4)");
  app.add_option("--runs", runs, "runs per row (median)");
  CLI11_PARSE(app, argc, argv);
  epk::shm::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    std::fprintf(stderr, "%s: open: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  auto file = epk::container::Reader::open_fd(fd.get(), path);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.error().to_string().c_str());
    return 1;
  }
  std::uint64_t section_bytes = 0;
  for (const auto& t : file->tensors()) section_bytes += t.section_size;
  std::printf("%s: %zu tensors, %.1f MB of sections, file %.1f MB\n", path.c_str(), file->tensors().size(),
              section_bytes / 1e6, file->file_size() / 1e6);

  enum class Method { kIoUringDirect, kIoUringBuffered, kPread, kMapTouch };
  const char* names[] = {"io_uring (O_DIRECT where aligned)", "io_uring (buffered)", "pread", "mmap, touch pages"};
  bool ok = true;
  for (bool cold : {true, false}) {
    double cached_after_drop = 0;
    for (Method m : {Method::kIoUringDirect, Method::kIoUringBuffered, Method::kPread, Method::kMapTouch}) {
      std::vector<double> read_ms, total_ms, arena_ms, register_ms;
      bool uring = false, registered = false, locked = false;
      for (int run = 0; run < runs + 1; ++run) {  // run 0 warms the cache for the warm rows and is not counted
        if (cold) cached_after_drop = std::max(cached_after_drop, drop_cache(path));
        Row row;
        if (m == Method::kMapTouch) {
          auto t0 = Clock::now();
          auto r = epk::container::Reader::open(path);  // a fresh map: no pages of this process mapped yet
          if (!r) return 1;
          std::uint64_t sum = 0;
          for (const auto& t : r->tensors()) {
            for (std::size_t i = 0; i < t.buffers.size(); ++i) {
              auto b = r->buffer(t, i);
              for (std::size_t at = 0; at < b.size(); at += 4096) sum += b[at];
            }
          }
          row.read_ms = ms_since(t0);
          asm volatile("" : : "r"(sum));
          if (!r->verify_all()) ok = false;
          row.total_ms = ms_since(t0);
        } else {
          ResidentOptions o;
          o.lock = !no_lock;
          o.register_buffers = !no_register;
          o.reader.queue_depth = depth;
          o.reader.chunk_bytes = chunk_kib << 10;
          o.method = m == Method::kPread ? ResidentRead::kPread : ResidentRead::kIoUring;
          o.reader.direct = m == Method::kIoUringDirect;
          auto t0 = Clock::now();
          auto res = ResidentModel::load(*file, fd.get(), o);
          const double total = ms_since(t0);
          if (!res) {
            std::fprintf(stderr, "%s\n", res.error().to_string().c_str());
            return 1;
          }
          row.read_ms = total - (*res)->stats().checksum_ms;  // arena (populated pages) + reads
          row.total_ms = total;
          uring = (*res)->stats().io_uring;
          registered = (*res)->stats().registered;
          locked = (*res)->stats().locked;
          if (run > 0) {
            arena_ms.push_back((*res)->stats().arena_ms);
            register_ms.push_back((*res)->stats().register_ms);
          }
        }
        if (run == 0) continue;
        read_ms.push_back(row.read_ms);
        total_ms.push_back(row.total_ms);
      }
      const double rm = median(read_ms), tm = median(total_ms);
      char parts[96] = "";
      if (!arena_ms.empty()) {
        std::snprintf(parts, sizeof(parts), "  (arena %.1f, register %.1f ms)", median(arena_ms), median(register_ms));
      }
      std::printf("%-5s %-34s read %8.2f ms (%7.0f MB/s)  read+xxh3 %8.2f ms%s%s\n", cold ? "cold" : "warm",
                  names[int(m)], rm, section_bytes / 1e3 / rm, tm, parts,
                  m == Method::kMapTouch || m == Method::kPread
                      ? ""
                      : (std::string(uring ? "" : "  [io_uring unavailable: pread]") +
                         (registered ? "  [fixed buffers]" : "  [not registered]") + (locked ? " [mlocked]" : ""))
                            .c_str());
    }
    if (cold) std::printf("cold rows: at most %.1f%% of the file's pages were still cached after each drop\n",
                          cached_after_drop * 100);
  }
  return ok ? 0 : 1;
}
