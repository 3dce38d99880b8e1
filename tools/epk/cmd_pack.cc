// epk pack IN -o OUT.epk: every tensor of a safetensors file or sharded checkpoint, stored raw.
#include <cstdio>
#include <map>

#include "codec/container/writer.h"
#include "codec/safetensors/checkpoint.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/weights.h"

namespace epk::cli {
namespace {

Status run_pack(const InputOutputArgs& args) {
  EPK_TRY_ASSIGN(auto checkpoint, safetensors::Checkpoint::open(args.input));
  std::map<std::string, std::string> metadata = {
      {"source", args.input},
      {"tool", "epk " + std::string(tool_version())},
      {"settings", "pack: raw"},
      {"source_metadata", source_metadata_json(checkpoint)},
  };
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(args.output, std::move(metadata)));
  std::uint64_t bytes = 0;
  for (const auto& t : checkpoint.tensors()) {
    container::TensorSpec spec{t.name, t.shape, t.dtype, container::Encoding::kRaw, "{}"};
    container::BufferData data{"data", t.data};
    EPK_TRY(writer.add_tensor(spec, std::span<const container::BufferData>(&data, 1)));
    bytes += t.data.size();
  }
  EPK_TRY(writer.finish());
  std::printf("packed %zu tensors (%s) into %s\n", checkpoint.tensors().size(), human_bytes(bytes).c_str(),
              args.output.c_str());
  return {};
}

}  // namespace

void add_pack_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] = add_command(app, exit_code, "pack",
                                 "Store every tensor of a safetensors checkpoint raw in an .epk file", run_pack);
  cmd->add_option("input", args->input, "a .safetensors file, a model.safetensors.index.json, or their directory")
      ->required();
  add_epk_output(*cmd, args->output);
}

}  // namespace epk::cli
