#include "codec/layouts/quant_source.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "codec/common/alloc.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/linear_reader.h"
#include "codec/layouts/requantize.h"

namespace epk::layouts {
namespace {

namespace fs = std::filesystem;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool read_text(const fs::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::optional<DType> gguf_plain_dtype(std::uint32_t type) {
  switch (static_cast<gguf::GgmlType>(type)) {
    case gguf::GgmlType::kF32:
      return DType::kF32;
    case gguf::GgmlType::kF16:
      return DType::kF16;
    case gguf::GgmlType::kBF16:
      return DType::kBF16;
    case gguf::GgmlType::kF64:
      return DType::kF64;
    case gguf::GgmlType::kI8:
      return DType::kI8;
    case gguf::GgmlType::kI16:
      return DType::kI16;
    case gguf::GgmlType::kI32:
      return DType::kI32;
    case gguf::GgmlType::kI64:
      return DType::kI64;
    default:
      return std::nullopt;
  }
}

}  // namespace

Result<std::unique_ptr<QuantSource>> QuantSource::open(const std::string& path) {
  auto s = std::unique_ptr<QuantSource>(new QuantSource());
  if (ends_with(path, ".gguf")) {
    EPK_TRY(s->open_gguf(path));
  } else if (ends_with(path, ".epk")) {
    EPK_TRY(s->open_epk(path));
  } else {
    EPK_TRY(s->open_safetensors(path));
  }
  return s;
}

Status QuantSource::open_gguf(const std::string& path) {
  EPK_TRY_ASSIGN(auto file, gguf::File::open(path));
  gguf_.emplace(std::move(file));
  format_ = "gguf";
  for (const auto& info : gguf_->tensors()) {
    SourceItem item;
    item.name = std::string(info.name);
    item.bytes = gguf_->tensor_bytes(info);
    for (auto d : info.torch_shape()) item.shape.push_back(static_cast<std::uint64_t>(d));
    if (auto dt = gguf_plain_dtype(info.type)) {
      item.kind = SourceItem::Kind::kRaw;
      item.dtype = *dt;
    } else if ((info.type == static_cast<std::uint32_t>(gguf::GgmlType::kQ4_0) ||
                info.type == static_cast<std::uint32_t>(gguf::GgmlType::kQ8_0)) &&
               info.ne.size() == 2) {
      item.kind = SourceItem::Kind::kInt;
      item.dtype = DType::kF32;
      item.source = info.type == static_cast<std::uint32_t>(gguf::GgmlType::kQ4_0) ? "gguf-q4_0" : "gguf-q8_0";
      const gguf::TensorInfo* ip = &info;
      auto bytes = item.bytes;
      item.load_int = [ip, bytes]() { return gguf_to_quant_tensor(*ip, bytes); };
      item.gguf_info = info;
    } else {
      item.kind = SourceItem::Kind::kGguf;
      item.dtype = DType::kF32;
      item.gguf_info = info;
    }
    items_.push_back(std::move(item));
  }
  return {};
}

Status QuantSource::open_epk(const std::string& path) {
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(path));
  EPK_TRY(reader.verify_all());
  epk_.emplace(std::move(reader));
  format_ = "epk";
  const container::Reader& r = *epk_;
  for (const auto& e : r.tensors()) {
    SourceItem item;
    item.name = e.name;
    item.dtype = e.dtype;
    item.shape = e.shape;
    if (e.encoding == container::Encoding::kRaw) {
      EPK_TRY_ASSIGN(item.bytes, r.buffer(e, container::kRawBufferName));
    } else if (e.encoding == container::Encoding::kIntq) {
      EPK_TRY_ASSIGN(const intq::Kind kind, intq::kind_of(r, e));
      const container::TensorEntry* entry = &e;
      if (kind == intq::Kind::kInt) {
        item.kind = SourceItem::Kind::kInt;
        item.source = "intq";
        item.load_int = [&r, entry]() { return intq::read_int(r, *entry); };
      } else {
        item.kind = SourceItem::Kind::kDense;
        item.source = kind == intq::Kind::kGguf ? "gguf" : "bnb4";
        item.load_dense = [&r, entry, path]() -> Result<std::vector<float>> {
          std::vector<float> dense;
          EPK_TRY(resize_for_tensor(dense, entry->element_count(),
                                    path + ": tensor '" + entry->name + "': float32 weights"));
          EPK_TRY(intq::dequantize_intq(
              r, *entry, DType::kF32,
              std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(dense.data()), dense.size() * 4)));
          return dense;
        };
      }
    } else {
      return make_error(ErrorCode::kUnsupported, path + ": tensor '" + e.name + "' is " +
                                                     std::string(container::encoding_name(e.encoding)) +
                                                     ", not raw or intq (decompress it first)");
    }
    items_.push_back(std::move(item));
  }
  return {};
}

Status QuantSource::open_safetensors(const std::string& path) {
  EPK_TRY_ASSIGN(auto ckpt, safetensors::Checkpoint::open(path));
  checkpoint_.emplace(std::move(ckpt));
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  std::string text;
  bool have_config = false;
  for (const char* name : {"quantize_config.json", "config.json"}) {
    const fs::path p = dir / name;
    if (fs::exists(p)) {
      if (!read_text(p, &text)) return make_error(ErrorCode::kIo, p.string() + ": cannot read");
      auto cfg = parse_quant_config(text, p.string());
      if (!cfg) {
        // A plain model's config.json has no quantization_config: that is an unquantized checkpoint.
        if (std::string(name) == "config.json" && text.find("quantization_config") == std::string::npos) break;
        return cfg.error();
      }
      config_ = *cfg;
      config_path_ = p.string();
      have_config = true;
      break;
    }
  }
  views_.reserve(checkpoint_->tensors().size());
  std::unordered_map<std::string_view, std::size_t> by_name;
  std::vector<std::string> names;
  for (const auto& t : checkpoint_->tensors()) {
    std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    views_.push_back(TensorView{t.name, t.dtype, std::move(shape), t.data});
    by_name[t.name] = views_.size() - 1;
    names.push_back(t.name);
  }
  auto lookup = [this, by_name](std::string_view name) -> std::optional<TensorView> {
    auto it = by_name.find(name);
    if (it == by_name.end()) return std::nullopt;
    return views_[it->second];
  };
  std::unordered_map<std::string, std::size_t> consumed;  // member tensor -> index into `quantized`
  std::vector<SourceItem> quantized;
  if (have_config && config_.format != QuantFormat::kBitsandbytes4bit) {
    switch (config_.format) {
      case QuantFormat::kGptq:
        format_ = "gptq";
        break;
      case QuantFormat::kAwq:
        format_ = "awq";
        break;
      default:
        format_ = "compressed-tensors";
        break;
    }
    std::string source = config_.format == QuantFormat::kGptq
                             ? (config_.gptq_zeros == GptqZeros::kV2 ? "gptq-v2" : "gptq")
                             : (config_.format == QuantFormat::kAwq ? "awq" : "ct");
    if (config_.format == QuantFormat::kGptq && config_.gptq_marlin) source = "gptq-marlin";
    if (config_.format == QuantFormat::kAwq && config_.awq_version == "gemv") source = "awq-gemv";
    for (const auto& prefix : quantized_linear_prefixes(names, config_)) {
      SourceItem item;
      item.kind = SourceItem::Kind::kInt;
      item.name = prefix + ".weight";
      item.source = source;
      const std::string scale_name =
          prefix + (config_.format == QuantFormat::kCompressedTensors ? ".weight_scale" : ".scales");
      auto sv = lookup(scale_name);
      if (!sv && config_.gptq_marlin) sv = lookup(prefix + ".s");
      item.dtype = sv ? sv->dtype : DType::kF16;
      QuantConfig cfg = config_;
      item.load_int = [lookup, prefix, cfg]() { return read_quantized_linear(lookup, prefix, cfg); };
      for (const char* suffix : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_shape",
                                 ".weight_scale", ".weight_zero_point", ".weight_g_idx", ".B", ".s", ".workspace"}) {
        const std::string_view sfx(suffix);
        if (!config_.gptq_marlin && (sfx == ".B" || sfx == ".s" || sfx == ".workspace")) continue;
        consumed.emplace(prefix + suffix, quantized.size());
      }
      quantized.push_back(std::move(item));
    }
  } else if (have_config) {
    format_ = "bitsandbytes";
    for (const auto& n : names) {
      for (std::string_view tag : {".weight.quant_state.bitsandbytes__nf4", ".weight.quant_state.bitsandbytes__fp4"}) {
        if (!ends_with(n, tag)) continue;
        const std::string prefix = n.substr(0, n.size() - tag.size()) + ".weight";
        SourceItem item;
        item.kind = SourceItem::Kind::kBnb4;
        item.name = prefix;
        auto need = [&](const std::string& name) -> Result<TensorView> {
          auto v = lookup(name);
          if (!v) return make_error(ErrorCode::kBadInput, path + ": tensor '" + name + "' is missing");
          return *v;
        };
        EPK_TRY_ASSIGN(item.bnb_views.weight, need(prefix));
        EPK_TRY_ASSIGN(item.bnb_views.absmax, need(prefix + ".absmax"));
        item.bnb_views.quant_map = lookup(prefix + ".quant_map");
        item.bnb_views.nested_absmax = lookup(prefix + ".nested_absmax");
        item.bnb_views.nested_quant_map = lookup(prefix + ".nested_quant_map");
        item.bnb_views.quant_state = *lookup(n);
        for (const char* suffix : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}) {
          consumed.emplace(prefix + suffix, quantized.size());
        }
        consumed.emplace(n, quantized.size());
        EPK_TRY_ASSIGN(auto state, bnb::read_state(item.bnb_views));
        item.dtype = state.dtype;
        for (auto d : state.shape) item.shape.push_back(static_cast<std::uint64_t>(d));
        quantized.push_back(std::move(item));
      }
    }
  }
  // File order for raw tensors; each quantized linear takes the place of its first member.
  std::vector<bool> placed(quantized.size(), false);
  for (const auto& t : checkpoint_->tensors()) {
    if (auto it = consumed.find(t.name); it != consumed.end()) {
      if (!placed[it->second]) {
        placed[it->second] = true;
        items_.push_back(std::move(quantized[it->second]));
      }
      continue;
    }
    SourceItem item;
    item.kind = SourceItem::Kind::kRaw;
    item.name = t.name;
    item.dtype = t.dtype;
    item.shape = t.shape;
    item.bytes = t.data;
    items_.push_back(std::move(item));
  }
  for (std::size_t i = 0; i < quantized.size(); ++i)
    if (!placed[i]) items_.push_back(std::move(quantized[i]));
  return {};
}

}  // namespace epk::layouts
