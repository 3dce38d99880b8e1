#include "shm/decode_status.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include "shm/memfd_seals.h"


namespace epk::shm {
namespace {

constexpr unsigned kStateBits = 2;
constexpr std::uint64_t kStateMask = (1u << kStateBits) - 1;

std::uint64_t word_of(std::uint64_t ticket, DecodeState s) {
  return (ticket << kStateBits) | static_cast<std::uint64_t>(s);
}

// The futex is the word's low half (little-endian x86-64 and aarch64): it changes whenever the word does, unless the
// ticket moved by a multiple of 2^30 at the same state, which a sleeper bounded by its timeout slice survives.
std::uint32_t* low_half(std::uint64_t* w) { return reinterpret_cast<std::uint32_t*>(w); }

void futex_wake_all(std::uint64_t* w) {
  ::syscall(SYS_futex, low_half(w), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::uint64_t* w, std::uint32_t expected, std::chrono::nanoseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000000000), static_cast<long>(slice.count() % 1000000000)};
  ::syscall(SYS_futex, low_half(w), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

DecodeState state_for(std::uint64_t word, std::uint64_t ticket) {
  const std::uint64_t t = word >> kStateBits;
  if (t < ticket) return DecodeState::kPending;  // the entry still holds an older decode: ours is not issued yet
  if (t > ticket) return DecodeState::kLost;
  return static_cast<DecodeState>(word & kStateMask);
}

}  // namespace

const char* decode_state_name(DecodeState s) {
  switch (s) {
    case DecodeState::kPending: return "pending";
    case DecodeState::kOk: return "ok";
    case DecodeState::kFailed: return "failed";
    case DecodeState::kLost: return "lost";
  }
  return "?";
}

Result<StatusTable> StatusTable::create(std::uint32_t entries) {
  if (entries == 0 || entries > kMaxStatusEntries) {
    return make_error(ErrorCode::kInvalidArgument, "decode status table: " + std::to_string(entries) + " entries");
  }
  int raw = ::memfd_create("epkd-status", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return make_errno_error("decode status table: memfd_create", errno);
  StatusTable t;
  t.fd_.reset(raw);
  const std::size_t bytes = std::size_t{entries} * sizeof(std::uint64_t);
  if (::ftruncate(t.fd_.get(), static_cast<off_t>(bytes)) != 0) {
    return make_errno_error("decode status table: ftruncate", errno);
  }
  EPK_TRY_ASSIGN(t.map_, Mapping::map_shared(t.fd_.get(), bytes, "decode status table"));
  // Only epkd writes the table: a client cannot mark another client's decode "ok".
  EPK_TRY(seal_after_mapping(t.fd_.get(), "decode status table"));
  t.entries_ = entries;
  t.next_ = std::make_unique<std::atomic<std::uint64_t>>(0);
  return t;
}

std::uint64_t StatusTable::begin() {
  const std::uint64_t ticket = next_->fetch_add(1, std::memory_order_relaxed) + 1;
  std::atomic_ref<std::uint64_t>(words()[ticket % entries_]).store(word_of(ticket, DecodeState::kPending),
                                                                    std::memory_order_release);
  return ticket;
}

void StatusTable::finish(std::uint64_t ticket, bool ok) {
  std::uint64_t* w = &words()[ticket % entries_];
  std::uint64_t expected = word_of(ticket, DecodeState::kPending);
  if (std::atomic_ref<std::uint64_t>(*w).compare_exchange_strong(
          expected, word_of(ticket, ok ? DecodeState::kOk : DecodeState::kFailed), std::memory_order_acq_rel)) {
    futex_wake_all(w);
  }
}

Result<StatusView> StatusView::map(UniqueFd fd, std::uint32_t entries) {
  if (entries == 0 || entries > kMaxStatusEntries) {
    return make_error(ErrorCode::kBadInput, "epk client: hello reply: status table of " + std::to_string(entries) +
                                                " entries (at most " + std::to_string(kMaxStatusEntries) + ")");
  }
  const std::size_t bytes = std::size_t{entries} * sizeof(std::uint64_t);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_errno_error("epk client: status table: fstat", errno);
  if (static_cast<std::uint64_t>(st.st_size) < bytes) {
    return make_error(ErrorCode::kBadInput, "epk client: status table fd holds " + std::to_string(st.st_size) +
                                                " bytes, the hello announced " + std::to_string(bytes));
  }
  StatusView v;
  // Read-only: epkd seals the table against writable mappings (and an older epkd's unsealed table reads the same).
  EPK_TRY_ASSIGN(v.map_, Mapping::map_shared_readonly(fd.get(), bytes, "decode status table"));
  v.entries_ = entries;
  return v;  // the mapping outlives the fd
}

DecodeState StatusView::peek(std::uint64_t ticket) const {
  const std::uint64_t w = std::atomic_ref<std::uint64_t>(words()[ticket % entries_]).load(std::memory_order_acquire);
  return state_for(w, ticket);
}

Result<DecodeState> StatusView::wait(std::uint64_t ticket, int spin_us, int timeout_ms,
                                     std::chrono::milliseconds slice) const {
  using Clock = std::chrono::steady_clock;
  std::uint64_t* w = &words()[ticket % entries_];
  std::atomic_ref<std::uint64_t> word(*w);
  const auto start = Clock::now();
  const auto spin_end = start + std::chrono::microseconds(spin_us > 0 ? spin_us : 0);
  for (;;) {
    const std::uint64_t now_word = word.load(std::memory_order_acquire);
    const DecodeState s = state_for(now_word, ticket);
    if (s != DecodeState::kPending) return s;
    const auto now = Clock::now();
    if (timeout_ms > 0 && now - start >= std::chrono::milliseconds(timeout_ms)) {
      return make_error(ErrorCode::kIo, "epk client: timed out after " + std::to_string(timeout_ms) +
                                            " ms waiting for epkd's decode status (ticket " + std::to_string(ticket) +
                                            ")");
    }
    if (now < spin_end) continue;
    // A bounded sleep: a wake between the load and the wait is not lost (the futex compares the word), and the slice
    // bounds the rare ABA of the low half.
    futex_wait(w, static_cast<std::uint32_t>(now_word), slice);
  }
}

}  // namespace epk::shm
