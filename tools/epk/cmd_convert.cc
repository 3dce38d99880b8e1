// epk convert IN --to gptq|gptq-v2|awq|awq-gemv|marlin|ct -o OUT.safetensors: every quantized linear of an .epk
// (intq) or of a quantized checkpoint (GPTQ/AWQ/compressed-tensors/bitsandbytes safetensors, GGUF) rewritten in the
// target layout through the logical matrix (codec/layouts/convert.h); other tensors copied. Integer sources convert
// exactly; NF4/FP4 and GGUF float-grid blocks are requantized (round to nearest, --bits, --group-size) and the added
// error is printed: such a conversion is never lossless. Act-order into a layout without g_idx (AWQ) prints the activation permutation
// and writes it to the output's metadata as "activation_perm.PREFIX" (a JSON array: x' = x[perm]).
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "codec/layouts/bnb.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/quant_source.h"
#include "codec/layouts/requantize.h"
#include "codec/safetensors/writer.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

struct ConvertArgs {
  std::string input;
  std::string to;
  std::string output;
  int bits = 4;
  std::int64_t group_size = 128;
};

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> owned;      // when is_owned
  std::span<const std::uint8_t> bytes;  // otherwise: a view into the source's map
  bool is_owned = false;
  std::span<const std::uint8_t> data() const { return is_owned ? std::span<const std::uint8_t>(owned) : bytes; }
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string prefix_of(const std::string& weight_name) {
  return ends_with(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

class Converter {
 public:
  Converter(const ConvertArgs& args, layouts::Layout target) : args_(args), target_(target) {}

  void add_raw(std::string name, DType dtype, std::vector<std::uint64_t> shape, std::span<const std::uint8_t> bytes) {
    out_.push_back(OutTensor{std::move(name), dtype, std::move(shape), {}, bytes, false});
  }

  Status add_exact(const std::string& name, const layouts::QuantTensor& t, std::string_view from) {
    std::printf("%-52s %-10s -> %-8s exact\n", printable(name).c_str(), std::string(from).c_str(),
                std::string(layouts::layout_name(target_)).c_str());
    return emit(name, t);
  }

  // dense: the nn.Linear weight [N, K] row-major in float32.
  Status add_requantized(const std::string& name, const std::vector<float>& dense,
                         const std::vector<std::uint64_t>& shape, std::string_view from) {
    if (shape.size() != 2) {
      return make_error(ErrorCode::kUnsupported, "convert: '" + name + "' is not 2-D; cannot requantize it");
    }
    const std::int64_t n = static_cast<std::int64_t>(shape[0]), k = static_cast<std::int64_t>(shape[1]);
    std::vector<float> kn(dense.size());
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < k; ++c)
        kn[static_cast<std::size_t>(c * n + r)] = dense[static_cast<std::size_t>(r * k + c)];
    const bool symmetric = target_ == layouts::Layout::kMarlin;
    EPK_TRY_ASSIGN(auto rq, layouts::requantize_rtn(kn, k, n, args_.bits, args_.group_size, symmetric));
    std::printf("%-52s %-10s -> %-8s REQUANTIZED %d-bit g%lld: added error rel_rms %.4g, max_abs %.4g (not lossless)\n",
                printable(name).c_str(), std::string(from).c_str(), std::string(layouts::layout_name(target_)).c_str(), args_.bits,
                static_cast<long long>(args_.group_size), rq.error.rel_rms, rq.error.max_abs);
    requantized_ = true;
    return emit(name, rq.tensor);
  }

  Status finish() {
    std::vector<safetensors::TensorSpec> specs;
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      specs.push_back({out_[i].name, out_[i].dtype, out_[i].shape});
      index[out_[i].name] = i;
    }
    metadata_["format"] = "pt";
    metadata_["epk_convert"] = nlohmann::json{
        {"to", std::string(layouts::layout_name(target_))},
        {"source", args_.input},
        {"requantized",
         requantized_}}.dump();
    EPK_TRY_ASSIGN(auto w, safetensors::Writer::create(args_.output, std::move(specs), metadata_));
    for (const auto& spec : w.tensors()) {
      const auto& t = out_[index.at(spec.name)];
      EPK_TRY(w.write(t.name, t.data()));
    }
    EPK_TRY(w.finish());
    std::printf("wrote %s: %zu tensors (%s)\n", args_.output.c_str(), out_.size(),
                std::string(layouts::layout_name(target_)).c_str());
    return {};
  }

 private:
  Status emit(const std::string& name, const layouts::QuantTensor& t) {
    auto converted = layouts::write_layout(t, target_);
    if (!converted) {
      return make_error(converted.error().code, "convert: '" + name + "': " + converted.error().message);
    }
    const std::string prefix = prefix_of(name);
    for (auto& ct : converted->tensors) {
      OutTensor o;
      o.name = prefix + "." + ct.name;
      o.dtype = ct.dtype;
      for (auto d : ct.shape) o.shape.push_back(static_cast<std::uint64_t>(d));
      o.owned = std::move(ct.bytes);
      o.is_owned = true;
      out_.push_back(std::move(o));
    }
    if (!converted->activation_perm.empty()) {
      const std::string perm = nlohmann::json(converted->activation_perm).dump();
      metadata_["activation_perm." + prefix] = perm;
      std::printf("  activation permutation for %s (x' = x[perm], %zu entries): %s\n", printable(prefix).c_str(),
                  converted->activation_perm.size(),
                  perm.size() > 200 ? (perm.substr(0, 200) + "...").c_str() : perm.c_str());
    }
    return {};
  }

  const ConvertArgs& args_;
  layouts::Layout target_;
  std::vector<OutTensor> out_;
  std::map<std::string, std::string> metadata_;
  bool requantized_ = false;
};

Status convert_checkpoint(const ConvertArgs& args, Converter& conv) {
  EPK_TRY_ASSIGN(auto source, layouts::QuantSource::open(args.input));
  for (const auto& item : source->items()) {
    switch (item.kind) {
      case layouts::SourceItem::Kind::kRaw:
        conv.add_raw(item.name, item.dtype, item.shape, item.bytes);
        break;
      case layouts::SourceItem::Kind::kInt: {
        EPK_TRY_ASSIGN(auto t, item.load_int());
        EPK_TRY(conv.add_exact(item.name, t, item.source));
        break;
      }
      case layouts::SourceItem::Kind::kGguf: {
        EPK_TRY_ASSIGN(auto dense,
                       layouts::gguf::dequantize(item.gguf_info.type, item.bytes, item.gguf_info.n_elements));
        EPK_TRY(conv.add_requantized(item.name, dense, item.shape, "gguf"));
        break;
      }
      case layouts::SourceItem::Kind::kDense: {
        EPK_TRY_ASSIGN(auto dense, item.load_dense());
        EPK_TRY(conv.add_requantized(item.name, dense, item.shape, item.source));
        break;
      }
      case layouts::SourceItem::Kind::kBnb4: {
        EPK_TRY_ASSIGN(auto state, layouts::bnb::read_state(item.bnb_views));
        EPK_TRY_ASSIGN(auto dense, layouts::bnb::dequantize_f32(item.bnb_views.weight, state));
        EPK_TRY(conv.add_requantized(item.name, dense, item.shape, "bnb4"));
        break;
      }
    }
  }
  return conv.finish();
}

Status run_convert(const ConvertArgs& args) {
  auto target = layouts::layout_from_name(args.to);
  if (!target) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--to '" + args.to + "': one of gptq, gptq-v2, awq, awq-gemv, marlin, ct");
  }
  if (args.bits < 2 || args.bits > 8 || args.group_size < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--bits must be 2..8 and --group-size positive");
  }
  Converter conv(args, *target);
  return convert_checkpoint(args, conv);
}

}  // namespace

void add_convert_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "convert", "Rewrite the quantized linears of an .epk or checkpoint in another layout",
                  run_convert);
  cmd->add_option("input", args->input, ".epk file, checkpoint directory, .safetensors, index .json, or .gguf")
      ->required();
  cmd->add_option("--to", args->to, "gptq, gptq-v2, awq, awq-gemv, marlin or ct")->required();
  add_safetensors_output(*cmd, args->output);
  cmd->add_option("--bits", args->bits, "code width when NF4/FP4/GGUF blocks must be requantized (default 4)");
  cmd->add_option("--group-size", args->group_size, "group size when requantizing (default 128)");
}

}  // namespace epk::cli
