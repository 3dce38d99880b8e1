// epk import IN -o OUT.epk: a GPTQ / AWQ / compressed-tensors / bitsandbytes safetensors checkpoint (its config files
// beside it) or a GGUF file. Quantized linear weights become `intq` tensors in their exact form (docs/FORMAT.md 11):
// nothing is requantized, so the import is lossless; every other tensor is stored raw. Prints, per intq tensor, the
// effective bits per weight split into codes, scales, zeros and indices.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_source.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

struct ImportArgs {
  std::string input;
  std::string output;
  bool quiet = false;
};

std::string_view kind_label(layouts::SourceItem::Kind k) {
  switch (k) {
    case layouts::SourceItem::Kind::kRaw:
      return "raw";
    case layouts::SourceItem::Kind::kInt:
      return "int";
    case layouts::SourceItem::Kind::kGguf:
      return "gguf";
    case layouts::SourceItem::Kind::kBnb4:
      return "bnb4";
    case layouts::SourceItem::Kind::kDense:
      return "dense";
  }
  return "?";
}

Status run_import(const ImportArgs& args) {
  EPK_TRY_ASSIGN(auto source, layouts::QuantSource::open(args.input));
  if (source->format() == "epk") {
    return make_error(ErrorCode::kInvalidArgument, args.input + ": already an .epk file (epk convert writes its intq "
                                                                "tensors in other layouts)");
  }
  std::map<std::string, std::string> metadata = {
      {"source", args.input},
      {"tool", "epk " + std::string(tool_version())},
      {"settings", nlohmann::json{{"import", source->format()}, {"config", source->config_path()}}.dump()},
  };
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(args.output, std::move(metadata)));
  std::vector<std::pair<std::string, std::string>> kinds;  // name, kind label of each intq tensor
  std::uint64_t raw_count = 0;
  for (const auto& item : source->items()) {
    if (item.kind == layouts::SourceItem::Kind::kRaw) {
      container::TensorSpec spec{item.name, item.shape, item.dtype, container::Encoding::kRaw, "{}"};
      container::BufferData data{"data", item.bytes};
      EPK_TRY(writer.add_tensor(spec, std::span<const container::BufferData>(&data, 1)));
      ++raw_count;
      continue;
    }
    layouts::intq::Encoded e;
    if (item.kind == layouts::SourceItem::Kind::kInt) {
      EPK_TRY_ASSIGN(auto t, item.load_int());
      EPK_TRY_ASSIGN(e, layouts::intq::encode_int(t, item.name, item.dtype, item.source));
    } else if (item.kind == layouts::SourceItem::Kind::kGguf) {
      EPK_TRY_ASSIGN(e, layouts::intq::encode_gguf(item.gguf_info, item.bytes, item.name));
    } else {
      EPK_TRY_ASSIGN(e, layouts::intq::encode_bnb4(item.bnb_views, item.name));
    }
    EPK_TRY(writer.add_tensor(e.spec, e.buffers()));
    std::string label = std::string(kind_label(item.kind)) + (item.source.empty() ? "" : " (" + item.source + ")");
    if (e.spec.params_json.find("\"codes\":\"rans\"") != std::string::npos) label += " rans";
    kinds.emplace_back(item.name, std::move(label));
  }
  EPK_TRY(writer.finish());

  // The closing table is computed from the file just written, through the same reader `epk inspect` uses.
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.output));
  if (!args.quiet) {
    std::printf("%-52s %-16s %-16s %8s %8s %8s %8s %8s\n", "tensor", "kind", "shape", "codes", "scales", "zeros",
                "index", "bpw");
  }
  layouts::Footprint total;
  std::uint64_t code_stored = 0, code_packed = 0, rans_tensors = 0;  // integer-grid tensors' codes
  for (const auto& [name, label] : kinds) {
    const auto* entry = reader.find(name);
    if (!entry) return make_error(ErrorCode::kInternal, "import: '" + name + "' missing from the written file");
    EPK_TRY_ASSIGN(auto f, layouts::intq::footprint_of_entry(reader, *entry));
    EPK_TRY_ASSIGN(auto ci, layouts::intq::code_info(reader, *entry));
    code_stored += ci.form == "rans" || ci.form == "packed" ? ci.stored_bytes : 0;
    code_packed += ci.packed_bytes;
    rans_tensors += ci.form == "rans";
    total.code_bytes += f.code_bytes;
    total.scale_bytes += f.scale_bytes;
    total.zero_bytes += f.zero_bytes;
    total.index_bytes += f.index_bytes;
    total.weights += f.weights;
    if (args.quiet) continue;
    auto per = [&](std::uint64_t b) { return f.weights ? 8.0 * static_cast<double>(b) / f.weights : 0.0; };
    std::printf("%-52s %-16s %-16s %8.3f %8.3f %8.3f %8.3f %8.3f\n", printable(name).c_str(), label.c_str(),
                shape_string(entry->shape).c_str(), per(f.code_bytes), per(f.scale_bytes), per(f.zero_bytes),
                per(f.index_bytes), f.bits_per_weight());
  }
  if (code_packed > 0) {
    std::printf("codes: %llu of %zu intq tensors rANS-coded (where smaller than packed); codes take %s, packed %s "
                "(%.2f%% smaller)\n",
                static_cast<unsigned long long>(rans_tensors), kinds.size(), human_bytes(code_stored).c_str(),
                human_bytes(code_packed).c_str(),
                100.0 * (1.0 - static_cast<double>(code_stored) / static_cast<double>(code_packed)));
  }
  std::printf(
      "imported %s (%s): %zu intq tensors, %.3f bits per weight over %llu quantized weights; %llu raw "
      "tensors; wrote %s (%s)\n",
      args.input.c_str(), source->format().c_str(), kinds.size(), total.bits_per_weight(),
      static_cast<unsigned long long>(total.weights), static_cast<unsigned long long>(raw_count), args.output.c_str(),
      human_bytes(reader.file_size()).c_str());
  return {};
}

}  // namespace

void add_import_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] = add_command(
      app, exit_code, "import",
      "Import a GPTQ/AWQ/compressed-tensors/bitsandbytes checkpoint or a GGUF file losslessly (intq)", run_import);
  cmd->add_option("input", args->input, "checkpoint directory, .safetensors, index .json, or .gguf")->required();
  add_epk_output(*cmd, args->output);
  cmd->add_flag("-q,--quiet", args->quiet, "print only the summary line");
}

}  // namespace epk::cli
