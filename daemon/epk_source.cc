#include "daemon/epk_source.h"

#include <cstring>

#include "codec/common/bytes.h"
#include "codec/common/float_convert.h"
#include "codec/common/half.h"
#include "codec/container/reader.h"
#include "codec/rans/decoder.h"
#include "daemon/epk_decode.h"

namespace epk::daemon {
namespace {

bool raw_convertible(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2: return true;
    default: return false;
  }
}

float load_as_float(DType t, const std::uint8_t* p, std::uint64_t i) {
  switch (t) {
    case DType::kF32: return load_le<float>(p + i * 4);
    case DType::kF16: return f16_to_f32(load_le<std::uint16_t>(p + i * 2));
    case DType::kBF16: return bf16_to_f32(load_le<std::uint16_t>(p + i * 2));
    case DType::kF64: return static_cast<float>(load_le<double>(p + i * 8));
    case DType::kF8E4M3: return float_from_f8e4m3(p[i]);
    case DType::kF8E5M2: return float_from_f8e5m2(p[i]);
    default: return 0.0f;  // excluded by raw_convertible
  }
}

std::optional<DType> dense_dtype(shm::Layout layout) {
  switch (layout) {
    case shm::Layout::kDenseBF16: return DType::kBF16;
    case shm::Layout::kDenseF16: return DType::kF16;
    case shm::Layout::kDenseF32: return DType::kF32;
    default: return std::nullopt;
  }
}

class EpkSource final : public ModelSource {
 public:
  static Result<std::unique_ptr<EpkSource>> open(const std::string& path) {
    std::unique_ptr<EpkSource> s(new EpkSource());
    EPK_TRY_ASSIGN(s->reader_, container::Reader::open(path));
    s->origin_ = path;
    const auto& entries = s->reader_.tensors();
    s->streams_.resize(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const container::TensorEntry& e = entries[i];
      TensorMeta m;
      m.name = e.name;
      m.shape = e.shape;
      m.dtype = e.dtype;
      for (const auto& b : e.buffers) m.stored_bytes += b.size;  // disjoint ranges of the file: cannot overflow
      if (e.encoding == container::Encoding::kLatticeRans) {
        EPK_TRY_ASSIGN(s->streams_[i], lattice_stream_view(s->reader_, e));
      }
      s->tensors_.push_back(std::move(m));
    }
    return s;
  }

  const std::string& origin() const override { return origin_; }
  const std::vector<TensorMeta>& tensors() const override { return tensors_; }

  Result<ServedTensor> served(std::size_t tensor, shm::Layout layout) const override {
    if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
    const container::TensorEntry& e = reader_.tensors()[tensor];
    ServedTensor out;
    out.shape = e.shape;
    out.strides = row_major_strides(e.shape);
    const std::uint64_t elems = e.element_count();
    std::optional<DType> want = dense_dtype(layout);
    switch (e.encoding) {
      case container::Encoding::kRaw:
        if (layout == shm::Layout::kStored) {
          out.dtype = e.dtype;
          out.bytes = e.buffers[0].size;  // the reader checked it is ceil(count * bits / 8)
          return out;
        }
        if (want && !raw_convertible(e.dtype)) {
          return unsupported(e, layout, "a raw " + std::string(dtype_name(e.dtype)) + " tensor has no dense form");
        }
        break;
      case container::Encoding::kLatticeRans:
        if (layout == shm::Layout::kStored) {
          if (!rans::decode_output_supported(e.dtype)) {
            return unsupported(e, layout, "the decoder cannot write its source dtype " +
                                              std::string(dtype_name(e.dtype)));
          }
          want = e.dtype;
        }
        break;
      default: return unsupported(e, layout, std::string(container::encoding_name(e.encoding)) + " is not served yet");
    }
    if (!want) return unsupported(e, layout, "not implemented for this encoding");
    out.dtype = *want;
    if (!checked_mul(elems, static_cast<std::uint64_t>(dtype_bits(*want) / 8), &out.bytes)) {
      return make_error(ErrorCode::kBadInput, origin_ + ": tensor '" + e.name + "': too large");
    }
    return out;
  }

  Status produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const override {
    EPK_TRY_ASSIGN(ServedTensor st, served(tensor, layout));
    const container::TensorEntry& e = reader_.tensors()[tensor];
    if (dst.size() != st.bytes) {
      return make_error(ErrorCode::kInternal, origin_ + ": tensor '" + e.name + "': destination holds " +
                                                  std::to_string(dst.size()) + " bytes, need " +
                                                  std::to_string(st.bytes));
    }
    if (e.encoding == container::Encoding::kLatticeRans) {
      // Decode first, so a corrupt payload is reported by tile; the checksums then catch what still decoded.
      std::span<std::byte> out(reinterpret_cast<std::byte*>(dst.data()), dst.size());
      if (Status d = decode_lattice(streams_[tensor], e.name, st.dtype, out); !d) {
        return Error{d.error().code, origin_ + ": " + d.error().message};
      }
      return reader_.verify(e);
    }
    EPK_TRY(reader_.verify(e));
    std::span<const std::uint8_t> src = reader_.buffer(e, 0);
    if (layout == shm::Layout::kStored || st.dtype == e.dtype) {
      if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
      return {};
    }
    convert_raw(e.dtype, src.data(), st.dtype, dst.data(), e.element_count());
    return {};
  }

 private:
  EpkSource() = default;

  Error unsupported(const container::TensorEntry& e, shm::Layout layout, const std::string& why) const {
    return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + e.name + "': layout " +
                                                   std::string(shm::layout_name(layout)) + " is not served (" + why +
                                                   ")");
  }

  // Plain scalar conversion through float (exact for every source narrower than F32; F64 rounds once to F32 first).
  static void convert_raw(DType from, const std::uint8_t* src, DType to, std::uint8_t* dst, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const float v = load_as_float(from, src, i);
      switch (to) {
        case DType::kF32: store_le<float>(dst + i * 4, v); break;
        case DType::kBF16: store_le<std::uint16_t>(dst + i * 2, f32_to_bf16(v)); break;
        case DType::kF16: store_le<std::uint16_t>(dst + i * 2, f32_to_f16(v)); break;
        default: break;
      }
    }
  }

  std::string origin_;
  container::Reader reader_;
  std::vector<TensorMeta> tensors_;
  std::vector<rans::LatticeRansStream> streams_;  // views into reader_'s map; empty for other encodings
};

}  // namespace

Result<std::unique_ptr<ModelSource>> open_epk_source(const std::string& path) {
  EPK_TRY_ASSIGN(std::unique_ptr<EpkSource> s, EpkSource::open(path));
  return std::unique_ptr<ModelSource>(std::move(s));
}

}  // namespace epk::daemon
