// Streams a .epk file (docs/FORMAT.md): tensors are written as they are added, the index and metadata at finish(),
// and the file appears under its final name only when finish() succeeds (temporary file, fsync, rename).
// A tensor's place can also be reserved first and its bytes written later from another thread (reserve_tensor,
// fill_tensor; WritePool does that with several threads): places follow the reservation order, so the file is the
// same byte for byte as add_tensor in that order writes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "codec/common/atomic_file.h"
#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/format.h"
#include "codec/container/tensor.h"

namespace epk::container {

// One buffer of a tensor to be written: a view the caller keeps alive for the duration of add_tensor() only.
struct BufferData {
  std::string name;
  std::span<const std::uint8_t> bytes;
};

// A buffer's name and size, for a reservation.
struct BufferShape {
  std::string name;
  std::uint64_t size = 0;
};

// The names and sizes of `buffers`, as reserve_tensor takes them.
std::vector<BufferShape> buffer_shapes(std::span<const BufferData> buffers);

// What the index records about a tensor, apart from where its bytes land.
struct TensorSpec {
  std::string name;
  std::vector<std::uint64_t> shape;  // rank <= kMaxRank; empty for a scalar
  DType dtype = DType::kF32;         // the source dtype
  Encoding encoding = Encoding::kRaw;
  std::string params_json = "{}";  // a JSON object; empty is taken as "{}"
};

class Writer {
 public:
  Writer() = default;   // not usable: only create() makes a writer that writes
  ~Writer() = default;  // not finished: the temporary file is removed, nothing appears under the final name
  Writer(Writer&& other) noexcept;
  Writer& operator=(Writer&& other) noexcept;  // abandons this writer's unfinished file first
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Opens a temporary file beside `path` and reserves the header. `metadata` keys must be valid UTF-8 names
  // (non-empty, <= kMaxNameLen, no NUL) and values valid UTF-8; refused with kInvalidArgument otherwise.
  static Result<Writer> create(const std::string& path, std::map<std::string, std::string> metadata);

  // Validates the spec (rule 8.3), then hashes and writes the buffers at once, in order, each at a 64-byte offset
  // inside the tensor's section; nothing of the data is kept. A kInvalidArgument error writes nothing and leaves the
  // writer usable; an I/O error leaves it failed (every later call fails; the temporary file is removed on
  // destruction).
  Status add_tensor(const TensorSpec& spec, std::span<const BufferData> buffers);
  Status add_tensor(const TensorSpec& spec, std::initializer_list<BufferData> buffers) {
    return add_tensor(spec, std::span<const BufferData>(buffers.begin(), buffers.size()));
  }

  // The place of a tensor whose bytes fill_tensor writes later.
  class Reservation {
   public:
    Reservation() = default;

   private:
    friend class Writer;
    explicit Reservation(TensorEntry* entry) : entry_(entry) {}
    TensorEntry* entry_ = nullptr;
  };
  // Validates as add_tensor does (the same errors) and places the tensor's section after everything added or
  // reserved before, writing nothing. Main thread (the one that calls add_tensor and finish) only.
  Result<Reservation> reserve_tensor(const TensorSpec& spec, std::span<const BufferShape> buffers);
  // Hashes and writes a reserved tensor's buffers (names and sizes as reserved). Safe from any thread, beside other
  // fill_tensor calls and the main thread's reserve_tensor / add_tensor; each reservation is filled once. An error
  // leaves the writer failed.
  Status fill_tensor(Reservation r, std::span<const BufferData> buffers);

  // Appends index and metadata, patches the header, fsyncs and renames into place. Once only, after every
  // reservation was filled (kInternal otherwise).
  Status finish();

  const std::string& path() const { return file_.final_path(); }
  std::uint64_t tensor_count() const { return entries_.size(); }
  // Bytes written so far (header placeholder included).
  std::uint64_t bytes_written() const { return file_.position(); }

 private:
  Status check_usable() const;
  Status validate(const TensorSpec& spec, std::span<const BufferShape> buffers) const;
  std::string encode_index() const;
  std::string encode_metadata() const;

  AtomicFileWriter file_;
  std::map<std::string, std::string> metadata_;
  std::deque<TensorEntry> entries_;  // a deque: a reservation's entry stays put while later ones are added
  std::unordered_set<std::string> names_;
  std::uint64_t reserved_ = 0;          // reservations made (add_tensor's own included)
  std::atomic<std::uint64_t> filled_{0};  // reservations filled
  bool open_ = false;  // created and neither finished nor failed
  std::atomic<bool> failed_{false};
};

}  // namespace epk::container
