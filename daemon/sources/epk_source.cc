#include "daemon/sources/epk_source.h"

#include <fcntl.h>

#include <cerrno>

#include "codec/container/reader.h"
#include "codec/serve/producer.h"
#include "shm/unique_fd.h"

namespace epk::daemon {
namespace {

class EpkSource final : public ModelSource {
 public:
  static Result<std::unique_ptr<EpkSource>> open(const std::string& path, const EpkSourceOptions& options) {
    std::unique_ptr<EpkSource> s(new EpkSource());
    // One open file for epkd's map and for the read-only fd clients that decode themselves receive (open_stored):
    // both are the same file, whatever happens to the path afterwards. O_NONBLOCK: a FIFO must not block the open.
    s->fd_ = shm::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (!s->fd_.valid()) return make_errno_error(path + ": open", errno);
    EPK_TRY_ASSIGN(s->reader_, container::Reader::open_fd(s->fd_.get(), path));
    if (options.resident) {  // from here on every read is from memory; the map goes with the file's reader
      EPK_TRY_ASSIGN(s->resident_, ResidentModel::load(s->reader_, s->fd_.get(), options.resident_options));
      s->reader_ = s->resident_->take_reader();
    }
    s->origin_ = path;
    for (const container::TensorEntry& e : s->reader_.tensors()) {
      TensorMeta m;
      m.name = e.name;
      m.shape = e.shape;
      m.dtype = e.dtype;
      m.encoding = std::string(container::encoding_name(e.encoding));
      for (const auto& b : e.buffers) m.stored_bytes += b.size;  // disjoint ranges of the file: cannot overflow
      // The producers read through reader_, which stays in place (this object is not moved) while they live.
      EPK_TRY_ASSIGN(std::unique_ptr<serve::Producer> p, serve::make_producer(s->reader_, e, path));
      s->producers_.push_back(std::move(p));
      s->tensors_.push_back(std::move(m));
    }
    if (s->reader_.damaged()) {
      return make_error(ErrorCode::kIo, path + ": the file was truncated, replaced or unreadable while it was opened");
    }
    return s;
  }

  const std::string& origin() const override { return origin_; }
  int file_fd() const override { return fd_.get(); }
  bool damaged() const override { return reader_.damaged(); }
  const std::vector<TensorMeta>& tensors() const override { return tensors_; }
  const serve::Producer* producer(std::size_t tensor) const override {
    return tensor < producers_.size() ? producers_[tensor].get() : nullptr;
  }
  Status verify_stored(std::size_t tensor) const override {
    if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
    return reader_.verify(reader_.tensors()[tensor]);
  }

  Result<ServedTensor> served(std::size_t tensor, shm::Layout layout) const override {
    EPK_TRY(check(tensor));
    return producers_[tensor]->slot(layout);
  }
  Result<ServedTensor> served_shard(std::size_t tensor, shm::Layout layout,
                                    const shm::ShardRange& shard) const override {
    EPK_TRY(check(tensor));
    return producers_[tensor]->shard_slot(layout, shard);
  }

  // Decode first, so a corrupt payload is reported by tile; the checksums then catch what still decoded. The slot
  // of a failed produce is dropped, never served.
  Status produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const override {
    EPK_TRY(check(tensor));
    EPK_TRY(producers_[tensor]->produce(layout, dst));
    return reader_.verify(reader_.tensors()[tensor]);
  }
  Status produce_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                       std::span<std::uint8_t> dst) const override {
    EPK_TRY(check(tensor));
    EPK_TRY(producers_[tensor]->produce_shard(layout, shard, dst));
    return reader_.verify(reader_.tensors()[tensor]);
  }

 private:
  EpkSource() = default;

  // The tensor exists and its rank fits the protocol's shape (the container allows rank 8 = kMaxDims: a guard).
  Status check(std::size_t tensor) const {
    if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
    const container::TensorEntry& e = reader_.tensors()[tensor];
    if (!Shape::fits(e.shape.size())) {
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + e.name + "': rank exceeds the protocol's");
    }
    return {};
  }

  std::string origin_;
  shm::UniqueFd fd_;  // the model file, read-only
  // The memory reader_ reads from when resident (declared first: it outlives reader_).
  std::unique_ptr<ResidentModel> resident_;
  container::Reader reader_;
  std::vector<TensorMeta> tensors_;
  std::vector<std::unique_ptr<serve::Producer>> producers_;  // per tensor; they read through reader_
};

}  // namespace

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path, const EpkSourceOptions& options) {
  EPK_TRY_ASSIGN(std::unique_ptr<EpkSource> s, EpkSource::open(path, options));
  return std::unique_ptr<ModelSource>(std::move(s));
}

}  // namespace epk::daemon
