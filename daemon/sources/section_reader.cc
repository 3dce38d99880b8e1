#include "daemon/sources/section_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "codec/common/bytes.h"
#include "shm/unique_fd.h"

namespace epk::daemon {
namespace {

constexpr std::uint64_t kMaxFixedBuffer = std::uint64_t{1} << 30;  // the kernel's limit for one registered buffer

std::string span_text(const std::string& path, std::uint64_t begin, std::uint64_t end) {
  return path + ": bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

Error ends_early(const std::string& path, const ReadRange& r, std::uint64_t file_size) {
  return make_error(ErrorCode::kBadInput, span_text(path, r.offset, r.offset + r.size) + ": the file ends at " +
                                              std::to_string(file_size) + " bytes (truncated?)");
}

Status check_ranges(const std::string& path, std::span<const ReadRange> ranges) {
  for (const ReadRange& r : ranges) {
    std::uint64_t end = 0;
    if (!checked_add(r.offset, r.size, &end)) {
      return make_error(ErrorCode::kInvalidArgument,
                        path + ": range at " + std::to_string(r.offset) + " of " + std::to_string(r.size) +
                            " bytes overflows");
    }
    if (r.size > 0 && r.dst == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, span_text(path, r.offset, end) + ": no destination");
    }
  }
  return {};
}

std::uint64_t file_size_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

bool aligned(std::uint64_t v) { return v % kDirectAlign == 0; }
bool aligned(const std::uint8_t* p) { return reinterpret_cast<std::uintptr_t>(p) % kDirectAlign == 0; }

}  // namespace

// ---- PinnedArena ----

PinnedArena::~PinnedArena() { reset(); }

PinnedArena::PinnedArena(PinnedArena&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)) {}

PinnedArena& PinnedArena::operator=(PinnedArena&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

void PinnedArena::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);  // also unlocks
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

Result<PinnedArena> PinnedArena::create(std::uint64_t bytes, bool lock) {
  PinnedArena a;
  if (bytes == 0) return a;
  // Huge pages where the kernel gives them (transparent, on request): populating 2 MiB pages costs a fraction of 4 KiB
  // ones, and this memory is filled once and kept. The mapping is 2 MiB-aligned so that whole huge pages fit.
  constexpr std::uint64_t kHuge = 2 << 20;
  const std::uint64_t size = align_up(bytes, kHuge);
  void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return make_errno_error("resident arena: mmap of " + std::to_string(size) + " bytes", errno);
  auto* base = static_cast<std::uint8_t*>(raw);
  auto* p = reinterpret_cast<std::uint8_t*>(align_up(reinterpret_cast<std::uintptr_t>(base), kHuge));
  if (p > base) ::munmap(base, static_cast<std::size_t>(p - base));
  ::munmap(p + size, static_cast<std::size_t>(base + size + kHuge - (p + size)));
  a.data_ = p;
  a.size_ = size;
  (void)::madvise(p, size, MADV_HUGEPAGE);  // a hint: without THP the pages are 4 KiB, nothing else changes
  a.locked_ = lock && ::mlock(p, size) == 0;  // mlock populates
  if (!a.locked_ && ::madvise(p, size, MADV_POPULATE_WRITE) != 0) {
    for (std::uint64_t at = 0; at < size; at += 4096) p[at] = 0;  // kernels before 5.14
  }
  return a;
}

// ---- SectionReader ----

struct SectionReader::Ring {
  io_uring ring{};
  SectionReaderOptions options;
  std::uint8_t* registered_base = nullptr;
  std::uint64_t registered_size = 0;
  bool live = false;  // io_uring_queue_init succeeded

  ~Ring() {
    if (!live) return;
    if (registered_size != 0) io_uring_unregister_buffers(&ring);
    io_uring_queue_exit(&ring);
  }
};

SectionReader::SectionReader() = default;
SectionReader::~SectionReader() = default;
SectionReader::SectionReader(SectionReader&&) noexcept = default;
SectionReader& SectionReader::operator=(SectionReader&&) noexcept = default;

Result<SectionReader> SectionReader::create(const SectionReaderOptions& options) {
  if (options.queue_depth == 0 || options.chunk_bytes == 0 || !aligned(options.chunk_bytes) ||
      options.chunk_bytes > kMaxFixedBuffer) {
    return make_error(ErrorCode::kInvalidArgument,
                      "section reader: queue_depth must be > 0 and chunk_bytes a multiple of 4096 up to 1 GiB");
  }
  auto ring = std::make_unique<Ring>();
  ring->options = options;
  const int rc = io_uring_queue_init(options.queue_depth, &ring->ring, 0);
  if (rc < 0) {
    return make_error(ErrorCode::kUnsupported, std::string("io_uring is not available here: ") + std::strerror(-rc));
  }
  ring->live = true;
  SectionReader r;
  r.ring_ = std::move(ring);
  return r;
}

bool SectionReader::registered() const { return ring_ != nullptr && ring_->registered_size != 0; }

Status SectionReader::register_memory(std::span<std::uint8_t> memory) {
  if (ring_ == nullptr) return make_error(ErrorCode::kInvalidArgument, "section reader: not created");
  if (ring_->registered_size != 0) {
    io_uring_unregister_buffers(&ring_->ring);
    ring_->registered_base = nullptr;
    ring_->registered_size = 0;
  }
  if (memory.empty()) return {};
  std::vector<iovec> iov;
  for (std::uint64_t at = 0; at < memory.size(); at += kMaxFixedBuffer) {
    iov.push_back({memory.data() + at, static_cast<std::size_t>(std::min<std::uint64_t>(kMaxFixedBuffer,
                                                                                        memory.size() - at))});
  }
  const int rc = io_uring_register_buffers(&ring_->ring, iov.data(), static_cast<unsigned>(iov.size()));
  if (rc < 0) {
    return make_error(ErrorCode::kIo, "io_uring_register_buffers of " + std::to_string(memory.size()) +
                                          " bytes: " + std::strerror(-rc));
  }
  ring_->registered_base = memory.data();
  ring_->registered_size = memory.size();
  return {};
}

Result<ReadStats> SectionReader::read(int file, const std::string& path, std::span<const ReadRange> ranges) {
  if (ring_ == nullptr) return make_error(ErrorCode::kInvalidArgument, "section reader: not created");
  EPK_TRY(check_ranges(path, ranges));
  const SectionReaderOptions& opt = ring_->options;
  // Both descriptors the ring reads through are opened again through `file`, never the path: the same file, whatever
  // the path names now. Not `file` itself: its O_NONBLOCK (epkd opens models with it, against FIFOs) would make the
  // ring's buffered reads of uncached pages fail with EAGAIN. Without /proc the caller reads with pread_ranges.
  const std::string self = "/proc/self/fd/" + std::to_string(file);
  shm::UniqueFd buffered(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!buffered.valid()) {
    const int e = errno;
    const bool no_proc = ::access("/proc/self/fd", F_OK) != 0;
    return make_error(no_proc ? ErrorCode::kUnsupported : ErrorCode::kIo,
                      path + ": reopen through " + self + ": " + std::strerror(e));
  }
  shm::UniqueFd direct;
  if (opt.direct) direct.reset(::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));  // tmpfs and others refuse

  struct Request {
    std::uint64_t offset;
    std::uint8_t* dst;
    std::uint64_t len;
    std::uint32_t range;
    bool direct;
  };
  std::vector<Request> reqs;
  auto add = [&](std::uint64_t off, std::uint8_t* dst, std::uint64_t len, std::uint32_t range, bool dio) {
    for (std::uint64_t at = 0; at < len; at += opt.chunk_bytes) {
      reqs.push_back({off + at, dst + at, std::min(opt.chunk_bytes, len - at), range, dio});
    }
  };
  for (std::uint32_t i = 0; i < ranges.size(); ++i) {
    const ReadRange& r = ranges[i];
    std::uint64_t body = 0;
    if (direct.valid() && aligned(r.offset) && aligned(r.dst)) body = r.size / kDirectAlign * kDirectAlign;
    add(r.offset, r.dst, body, i, true);
    add(r.offset + body, r.dst + body, r.size - body, i, false);
  }

  ReadStats stats;
  std::vector<std::uint32_t> ready(reqs.size());
  for (std::uint32_t i = 0; i < ready.size(); ++i) ready[i] = static_cast<std::uint32_t>(ready.size() - 1 - i);
  io_uring* ring = &ring_->ring;
  unsigned inflight = 0;
  // The outcome so far: ok until the first error, which is kept. After an error nothing new is submitted, but what is
  // in flight still completes before read() returns (it writes into the destinations).
  Status outcome;
  auto fail = [&](Error e) {
    if (outcome) outcome = std::move(e);
    ready.clear();
  };
  while ((!ready.empty() && outcome) || inflight > 0) {
    while (outcome && !ready.empty() && inflight < opt.queue_depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      const std::uint32_t idx = ready.back();
      ready.pop_back();
      Request& q = reqs[idx];
      const int fd = q.direct ? direct.get() : buffered.get();
      const auto len = static_cast<unsigned>(q.len);
      const std::uint8_t* base = ring_->registered_base;
      const bool fixed = base != nullptr && q.dst >= base && q.dst + q.len <= base + ring_->registered_size &&
                         static_cast<std::uint64_t>(q.dst - base) / kMaxFixedBuffer ==
                             static_cast<std::uint64_t>(q.dst + q.len - 1 - base) / kMaxFixedBuffer;
      if (fixed) {
        io_uring_prep_read_fixed(sqe, fd, q.dst, len, q.offset,
                                 static_cast<int>(static_cast<std::uint64_t>(q.dst - base) / kMaxFixedBuffer));
        ++stats.fixed_requests;
      } else {
        io_uring_prep_read(sqe, fd, q.dst, len, q.offset);
      }
      io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<std::uintptr_t>(idx)));
      ++inflight;
      ++stats.requests;
    }
    const int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // The ring itself failed (not seen in practice): what is in flight cannot be waited for through it.
      return make_error(ErrorCode::kIo, path + ": io_uring_submit: " + std::strerror(-rc));
    }
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(ring, &cqe) == 0 && cqe != nullptr) {
      const auto idx = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(io_uring_cqe_get_data(cqe)));
      std::int64_t res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      --inflight;
      Request& q = reqs[idx];
      const ReadRange& r = ranges[q.range];
      if (res == -EAGAIN || res == -EINTR) {
        ready.push_back(idx);
        continue;
      }
      if (res == -EINVAL && q.direct) {  // this filesystem (or this range) refuses O_DIRECT: read it buffered
        q.direct = false;
        ready.push_back(idx);
        continue;
      }
      if (res < 0) {
        fail(make_error(ErrorCode::kIo, span_text(path, q.offset, q.offset + q.len) + " of range [" +
                                            std::to_string(r.offset) + ", " + std::to_string(r.offset + r.size) +
                                            "): read: " + std::strerror(static_cast<int>(-res))));
        continue;
      }
      if (res == 0) {
        fail(ends_early(path, r, file_size_of(buffered.get())));
        continue;
      }
      if (opt.clip_completions_to != 0) res = std::min<std::int64_t>(res, opt.clip_completions_to);
      const auto got = static_cast<std::uint64_t>(res);
      (q.direct ? stats.direct_bytes : stats.buffered_bytes) += got;
      if (got < q.len) {
        ++stats.short_reads;
        q.offset += got;
        q.dst += got;
        q.len -= got;
        if (q.direct && !(aligned(q.offset) && aligned(q.dst) && aligned(q.len))) q.direct = false;
        ready.push_back(idx);
      }
    }
  }
  if (!outcome) return std::move(outcome).error();
  return stats;
}

Status pread_ranges(int file, const std::string& path, std::span<const ReadRange> ranges) {
  EPK_TRY(check_ranges(path, ranges));
  for (const ReadRange& r : ranges) {
    std::uint64_t done = 0;
    while (done < r.size) {
      const std::uint64_t want = std::min<std::uint64_t>(r.size - done, kMaxFixedBuffer);
      ssize_t n = ::pread(file, r.dst + done, want, static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return make_error(ErrorCode::kIo,
                          span_text(path, r.offset + done, r.offset + r.size) + ": read: " + std::strerror(errno));
      }
      if (n == 0) return ends_early(path, r, file_size_of(file));
      done += static_cast<std::uint64_t>(n);
    }
  }
  return {};
}

}  // namespace epk::daemon
