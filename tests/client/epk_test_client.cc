// A small client process for the integration tests and by hand. Subcommands (exit 0 on success, 1 on failure with the
// error on stderr):
//   acquire SOCKET MODEL TENSOR LAYOUT HOLD_MS [gate]
//                                                acquire (checking synthetic contents), print "acquired HANDLE", hold
//                                                HOLD_MS (-1: until killed), release, print "released". With `gate`:
//                                                print "connected" once connected, then wait for a byte on stdin
//   loop SOCKET MODEL TENSOR LAYOUT N             N acquire+release round trips, contents checked once
//   cycle SOCKET MODEL TENSORS LAYOUT ROUNDS      acquire, check and release each of the comma-separated TENSORS,
//   ROUNDS
//                                                times; a no-space answer is retried (other clients hold pins)
//   stats SOCKET                                  print the daemon's stats as key=value lines
//   devhash SOCKET MODEL TENSOR LAYOUT HOLD_MS [gate] [device=N]
//                                                device pools: acquire, wait for the decode-done event, copy the
//                                                slot to host, print "hash XXH3 HANDLE", hold HOLD_MS (-1: until
//                                                killed), release with a CUDA event fence, print "released"
//   tamper SOCKET MODEL TENSOR LAYOUT UID [GID]   become UID (and GID, by default the same; no supplementary groups)
//                                                before connecting;
//                                                print "pools ID,..." (the pool ids the hello gave), acquire, then try
//                                                to overwrite the slot with 0xEE: a device slot by a copy into this
//                                                process's mapping of the pool, a host slot by making its pages
//                                                writable; print "overwrote POOL" or "refused POOL", release
#include <grp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "codec/common/checksum.h"
#include "daemon/sources/synthetic_source.h"
#if EPK_HAVE_CUDA
#include "shm/device_pool.h"
#endif

namespace {

using epk::client::Client;
using epk::client::Tensor;

int die(const std::string& msg) {
  std::fprintf(stderr, "epk_test_client: %s\n", msg.c_str());
  return 1;
}

// Checks a synthetic tensor (tensor number = index in the model's spec; tests name tensors tN).
bool check_synthetic(const Tensor& t, std::uint32_t tensor_index) {
  std::uint64_t elems = 1;
  for (auto d : t.shape) elems *= d;
  const auto* p = static_cast<const std::uint8_t*>(t.data);
  for (std::uint64_t i = 0; i < elems; ++i) {
    float v = epk::daemon::synthetic_value(tensor_index, i);
    if (t.dtype == epk::DType::kF32) {
      float got;
      std::memcpy(&got, p + i * 4, 4);
      if (got != v) return false;
    } else {
      std::uint16_t got;
      std::memcpy(&got, p + i * 2, 2);
      std::uint16_t want = t.dtype == epk::DType::kBF16 ? epk::daemon::f32_to_bf16(v) : epk::daemon::f32_to_f16(v);
      if (got != want) return false;
    }
  }
  return true;
}

std::uint32_t index_of(const std::string& tensor) {
  return tensor.size() > 1 && tensor[0] == 't' ? static_cast<std::uint32_t>(std::atoi(tensor.c_str() + 1)) : 0;
}

// The words after HOLD_MS: "gate" (after connecting, print "connected" and wait for a byte on stdin) and "device=N"
// (the CUDA device whose pool serves the tensor; 0 by default).
struct HoldOptions {
  bool gate = false;
  std::uint32_t device = 0;
};

HoldOptions parse_hold_options(int argc, char** argv, int first) {
  HoldOptions o;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "gate") o.gate = true;
    if (a.rfind("device=", 0) == 0) o.device = static_cast<std::uint32_t>(std::atoi(a.c_str() + 7));
  }
  return o;
}

bool wait_for_gate() {
  std::printf("connected\n");
  std::fflush(stdout);
  char b;
  return ::read(0, &b, 1) == 1;
}

}  // namespace

// `tamper`: what a client of another trust domain can do to the slot it is served (see the comment at the top).
int tamper(int argc, char** argv) {
  if (argc < 7) return die("usage: tamper SOCKET MODEL TENSOR LAYOUT UID [GID]");
  const auto uid = static_cast<uid_t>(std::atol(argv[6]));
  const auto gid = static_cast<gid_t>(argc > 7 ? std::atol(argv[7]) : std::atol(argv[6]));
  if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) return die("cannot become that uid");
  auto layout = epk::shm::layout_from_name(argv[5]);
  if (!layout) return die(std::string("unknown layout ") + argv[5]);
  auto c = Client::connect(argv[2]);
  if (!c) return die(c.error().to_string());
  std::string ids;
  for (const auto& p : c->pools()) ids += (ids.empty() ? "" : ",") + std::to_string(p.pool_id);
  std::printf("pools %s\n", ids.c_str());
  auto t = c->acquire(argv[3], argv[4], *layout);
  if (!t) return die(t.error().to_string());
  if (auto st = c->wait(*t, nullptr); !st) return die(st.error().to_string());
  const auto pool = static_cast<unsigned>(epk::shm::handle_pool(t->handle));
  std::vector<std::uint8_t> junk(t->bytes, 0xEE);
  bool overwrote = false;
  if (t->on_device) {
#if EPK_HAVE_CUDA
    overwrote = static_cast<bool>(
        epk::shm::copy_to_device(epk::DeviceAddress::of(t->data), junk.data(), junk.size(), t->device));
#endif
  } else {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto at = reinterpret_cast<std::uintptr_t>(t->data);
    const std::uintptr_t begin = at / page * page, end = (at + t->bytes + page - 1) / page * page;
    overwrote = ::mprotect(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE) == 0;
    if (overwrote) std::memcpy(t->data, junk.data(), junk.size());
  }
  std::printf("%s %u\n", overwrote ? "overwrote" : "refused", pool);
  std::fflush(stdout);
  if (auto st = c->release(t->handle); !st) return die(st.error().to_string());
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return die("usage: see the comment at the top of epk_test_client.cc");
  std::string cmd = argv[1];
  if (cmd == "tamper") return tamper(argc, argv);
  auto c = Client::connect(argv[2]);
  if (!c) return die(c.error().to_string());
  if (cmd == "stats") {
    auto s = c->stats();
    if (!s) return die(s.error().to_string());
    std::printf("used=%llu budget=%llu pins=%llu hits=%llu misses=%llu evictions=%llu decodes=%llu clients=%llu\n",
                (unsigned long long)s->used_bytes, (unsigned long long)s->budget_bytes, (unsigned long long)s->pins,
                (unsigned long long)s->hits, (unsigned long long)s->misses, (unsigned long long)s->evictions,
                (unsigned long long)s->decodes, (unsigned long long)s->clients);
    return 0;
  }
  if (argc < 7) return die("usage: see the comment at the top of epk_test_client.cc");
  std::string model = argv[3], tensor = argv[4];
  auto layout = epk::shm::layout_from_name(argv[5]);
  if (!layout) return die(std::string("unknown layout ") + argv[5]);
  if (cmd == "acquire") {
    int hold_ms = std::atoi(argv[6]);
    const HoldOptions opt = parse_hold_options(argc, argv, 7);
    if (opt.gate && !wait_for_gate()) return die("gate: stdin closed");
    auto t = c->acquire(model, tensor, *layout, opt.device);
    if (!t) return die(t.error().to_string());
    if (!check_synthetic(*t, index_of(tensor)))
      return die("contents of " + tensor + " differ from the synthetic values");
    std::printf("acquired %llu\n", (unsigned long long)t->handle);
    std::fflush(stdout);
    if (hold_ms < 0) {
      for (;;) ::pause();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    if (auto st = c->release(t->handle); !st) return die(st.error().to_string());
    std::printf("released\n");
    return 0;
  }
  if (cmd == "devhash") {
    int hold_ms = std::atoi(argv[6]);
    const HoldOptions opt = parse_hold_options(argc, argv, 7);
    if (opt.gate && !wait_for_gate()) return die("gate: stdin closed");
    auto t = c->acquire(model, tensor, *layout, opt.device);
    if (!t) return die(t.error().to_string());
    if (!t->on_device || t->event == nullptr) return die("not a device slot with an event");
    if (t->device != static_cast<int>(opt.device)) return die("served from device " + std::to_string(t->device));
    if (auto st = c->wait(*t, nullptr); !st) return die(st.error().to_string());
    std::vector<std::uint8_t> host(t->bytes);
    if (auto st = c->copy_to_host(*t, host.data()); !st) return die(st.error().to_string());
    std::printf("hash %016llx %llu\n", (unsigned long long)epk::xxh3_64(host),
                (unsigned long long)t->handle);
    std::fflush(stdout);
    if (hold_ms < 0) {
      for (;;) ::pause();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    if (auto st = c->release_after(t->handle, nullptr); !st) return die(st.error().to_string());
    std::printf("released\n");
    return 0;
  }
  if (cmd == "cycle") {
    std::vector<std::string> names;
    for (std::size_t start = 0;;) {
      std::size_t comma = tensor.find(',', start);
      names.push_back(tensor.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    long rounds = std::atol(argv[6]);
    long retries = 0;
    for (long r = 0; r < rounds; ++r) {
      for (const std::string& name : names) {
        auto t = c->acquire(model, name, *layout);
        while (!t && t.error().code == epk::ErrorCode::kNoSpace && retries < 5000) {
          ++retries;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          t = c->acquire(model, name, *layout);
        }
        if (!t) return die(name + ": " + t.error().to_string());
        if (!check_synthetic(*t, index_of(name))) return die("contents of " + name + " differ");
        if (auto st = c->release(t->handle); !st) return die(st.error().to_string());
      }
    }
    std::printf("done %ld retries %ld\n", rounds, retries);
    return 0;
  }
  if (cmd == "loop") {
    long n = std::atol(argv[6]);
    for (long i = 0; i < n; ++i) {
      auto t = c->acquire(model, tensor, *layout);
      if (!t) return die(t.error().to_string());
      if (i == 0 && !check_synthetic(*t, index_of(tensor))) return die("contents differ from the synthetic values");
      if (auto st = c->release(t->handle); !st) return die(st.error().to_string());
    }
    std::printf("done %ld\n", n);
    return 0;
  }
  return die("unknown subcommand " + cmd);
}
