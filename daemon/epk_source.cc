#include "daemon/epk_source.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "codec/container/reader.h"
#include "codec/decode/decode_slice.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "daemon/intq_serving.h"
#include "daemon/shard_slice.h"
#include "shm/unique_fd.h"

namespace epk::daemon {
namespace {

// The element type a layout asks for, given the tensor's source dtype; nullopt for layouts with no dense form here.
std::optional<DType> layout_dtype(shm::Layout layout, DType source) {
  switch (layout) {
    case shm::Layout::kStored:
      return source;
    case shm::Layout::kDenseBF16:
      return DType::kBF16;
    case shm::Layout::kDenseF16:
      return DType::kF16;
    case shm::Layout::kDenseF32:
      return DType::kF32;
    default:
      return std::nullopt;
  }
}

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
      EPK_TRY_ASSIGN(s->resident_, ResidentModel::load(s->reader_, options.resident_options));
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
      if (e.encoding == container::Encoding::kLatticeRans) {
        // Validated here once, so a malformed stream refuses the model instead of failing its first acquire.
        EPK_TRY_ASSIGN(rans::StoredStream st, rans::from_container(s->reader_, e));
        s->streams_.resize(s->tensors_.size() + 1);
        s->streams_.back() = std::move(st);
      }
      EPK_TRY_ASSIGN(auto header, intq_serving::inspect(s->reader_, e));
      s->intq_.push_back(std::move(header));
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
  const rans::LatticeRansStream* lattice_stream(std::size_t tensor) const override {
    return tensor < streams_.size() && streams_[tensor] ? &streams_[tensor]->stream : nullptr;
  }
  Status verify_stored(std::size_t tensor) const override {
    if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
    return reader_.verify(reader_.tensors()[tensor]);
  }
  const std::vector<TensorMeta>& tensors() const override { return tensors_; }
  const layouts::intq::IntHeader* intq_header(std::size_t tensor) const override {
    return tensor < intq_.size() && intq_[tensor] ? &*intq_[tensor] : nullptr;
  }
  Status read_intq(std::size_t tensor, layouts::QuantTensor* out) const override {
    if (intq_header(tensor) == nullptr) {
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor index " + std::to_string(tensor) +
                                                     " is not an intq int tensor");
    }
    EPK_TRY_ASSIGN(*out, layouts::intq::read_int(reader_, reader_.tensors()[tensor]));
    return {};
  }

  Result<ServedTensor> served(std::size_t tensor, shm::Layout layout) const override {
    if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
    const container::TensorEntry& e = reader_.tensors()[tensor];
    if (!Shape::fits(e.shape.size())) {  // the container allows rank 8 = kMaxDims: a guard, not a case
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + e.name + "': rank exceeds the protocol's");
    }
    if (shm::is_packed_int(layout)) return intq_serving::served(intq_[tensor], origin_, e, layout);
    if (shm::is_rowwise(layout) && decode::can_decode_rowwise(e)) {
      // Values then per-row scales in one slot (shm/layout.h); the reader bounded rows * cols by the file.
      ServedTensor out;
      out.dtype = layout == shm::Layout::kRowwiseI8 ? DType::kI8 : DType::kF8E4M3;
      out.shape = e.shape;
      out.strides = row_major_strides(e.shape);
      out.bytes = shm::rowwise_scales_offset(e.shape[0], e.shape[1]) + e.shape[0] * 4;
      return out;
    }
    std::optional<DType> dtype = layout_dtype(layout, e.dtype);
    if (!dtype || !decode::can_decode(e, *dtype)) {
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + e.name + "': layout " +
                                                     std::string(shm::layout_name(layout)) + " is not served for " +
                                                     std::string(container::encoding_name(e.encoding)) + " " +
                                                     std::string(dtype_name(e.dtype)));
    }
    ServedTensor out;
    out.dtype = *dtype;
    out.shape = e.shape;
    out.strides = row_major_strides(e.shape);
    out.bytes = decode::decoded_bytes(e, *dtype);
    if (out.bytes == 0 && e.element_count() != 0) {
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + e.name + "': no whole-byte size");
    }
    return out;
  }

  Status produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const override {
    EPK_TRY_ASSIGN(ServedTensor st, served(tensor, layout));
    const container::TensorEntry& e = reader_.tensors()[tensor];
    // Decode first, so a corrupt payload is reported by tile; the checksums then catch what still decoded. The slot
    // of a failed produce is dropped, never served.
    if (shm::is_packed_int(layout)) {
      EPK_TRY(intq_serving::produce(reader_, e, layout, dst));
      return reader_.verify(e);
    }
    if (shm::is_rowwise(layout)) {
      const std::uint64_t rows = e.shape[0], values = rows * e.shape[1];
      const std::uint64_t at = shm::rowwise_scales_offset(rows, e.shape[1]);
      // Slots start at the allocator's alignment (>= 64), so the scales are 4-byte aligned.
      std::span<float> scales(reinterpret_cast<float*>(dst.data() + at), rows);
      EPK_TRY(decode::decode_tensor_rowwise(
          reader_, e, layout == shm::Layout::kRowwiseI8 ? rans::RowwiseType::kInt8 : rans::RowwiseType::kF8E4M3,
          dst.first(values), scales));
      std::fill(dst.begin() + values, dst.begin() + at, 0);  // padding: no stale bytes of an earlier slot
      return reader_.verify(e);
    }
    EPK_TRY(decode::decode_tensor(reader_, e, st.dtype, dst));
    return reader_.verify(e);
  }

  // Shards decode only what they cover (codec/decode/decode_slice.h): raw tensors slice their stored bytes,
  // lattice-rans row shards decode the tiles of their rows, column shards every row in bands keeping their columns.
  // What decode_slice does not serve (intq dense layouts) is the default: the whole tensor, then the slice.
  Result<ServedTensor> served_shard(std::size_t tensor, shm::Layout layout,
                                    const shm::ShardRange& shard) const override {
    if (tensor < tensors_.size() && shm::is_packed_int(layout)) {
      return intq_serving::served_shard(intq_[tensor], origin_, reader_.tensors()[tensor], layout, shard);
    }
    return ModelSource::served_shard(tensor, layout, shard);
  }

  Status produce_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                       std::span<std::uint8_t> dst) const override {
    if (shard.whole()) return produce(tensor, layout, dst);
    if (shm::is_packed_int(layout)) {  // the layout written from the logical tensor's cut (intq_serving.h)
      EPK_TRY(intq_serving::produce_shard(reader_, reader_.tensors()[tensor], layout, shard, dst));
      return reader_.verify(reader_.tensors()[tensor]);
    }
    EPK_TRY_ASSIGN(ServedTensor st, served_shard(tensor, layout, shard));
    if (dst.size() != st.bytes) {
      return make_error(ErrorCode::kInvalidArgument, origin_ + ": shard output size does not match the shard");
    }
    const container::TensorEntry& e = reader_.tensors()[tensor];
    const decode::Slice slice{shard.axis(), shard.begin, shard.end};
    if (shm::is_rowwise(layout)) {
      const std::uint64_t rows = st.shape[0], values = rows * st.shape[1];
      const std::uint64_t at = shm::rowwise_scales_offset(rows, st.shape[1]);
      std::span<float> scales(reinterpret_cast<float*>(dst.data() + at), rows);
      EPK_TRY(decode::decode_tensor_rowwise_slice(
          reader_, e, layout == shm::Layout::kRowwiseI8 ? rans::RowwiseType::kInt8 : rans::RowwiseType::kF8E4M3,
          slice, dst.first(values), scales));
      std::fill(dst.begin() + values, dst.begin() + at, 0);
      return reader_.verify(e);
    }
    if (!shm::is_packed_int(layout) && decode::can_decode_slice(e, st.dtype, slice.axis)) {
      EPK_TRY(decode::decode_tensor_slice(reader_, e, st.dtype, slice, dst));
      return reader_.verify(e);
    }
    return ModelSource::produce_shard(tensor, layout, shard, dst);
  }

 private:
  EpkSource() = default;

  std::string origin_;
  shm::UniqueFd fd_;  // the model file, read-only
  // The memory reader_ reads from when resident (declared first: it outlives reader_).
  std::unique_ptr<ResidentModel> resident_;
  container::Reader reader_;
  std::vector<TensorMeta> tensors_;
  std::vector<std::optional<rans::StoredStream>> streams_;  // lattice-rans tensors' views (the GPU path's input)
  std::vector<std::optional<layouts::intq::IntHeader>> intq_;  // per tensor: the params of intq "int" tensors
};

}  // namespace

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path, const EpkSourceOptions& options) {
  EPK_TRY_ASSIGN(std::unique_ptr<EpkSource> s, EpkSource::open(path, options));
  return std::unique_ptr<ModelSource>(std::move(s));
}

}  // namespace epk::daemon
