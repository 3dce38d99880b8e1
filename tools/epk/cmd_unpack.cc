// epk unpack FILE.epk -o OUT.safetensors: raw tensors come back byte-identical (checksums verified on the way).
#include <cstdio>

#include "codec/container/reader.h"
#include "codec/decode/decode_tensor.h"
#include "codec/safetensors/writer.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/weights.h"

namespace epk::cli {
namespace {

Status run_unpack(const InputOutputArgs& args) {
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.input));
  std::vector<safetensors::TensorSpec> decls;
  for (const auto& t : reader.tensors()) {
    if (!decode::stored_as(t, t.dtype))
      return make_error(ErrorCode::kUnsupported,
                        args.input + ": tensor '" + t.name + "' is " +
                            std::string(container::encoding_name(t.encoding)) + "-encoded in " +
                            std::to_string(t.buffers.size()) +
                            " buffers; unpack writes raw tensors of one buffer only (use epk decompress)");
    decls.push_back({t.name, t.dtype, t.shape});
  }
  EPK_TRY_ASSIGN(auto metadata, safetensors_metadata(reader));
  EPK_TRY_ASSIGN(auto writer, safetensors::Writer::create(args.output, decls, metadata));
  // The writer sorts tensors as the reference does; supply bytes in its order, each checked against its checksum.
  for (const auto& spec : writer.tensors()) {
    const auto* t = reader.find(spec.name);
    EPK_TRY(reader.verify(*t));
    EPK_TRY(writer.write(spec.name, reader.buffer(*t, 0)));
  }
  EPK_TRY(writer.finish());
  std::printf("unpacked %zu tensors into %s\n", reader.tensors().size(), args.output.c_str());
  return {};
}

}  // namespace

void add_unpack_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "unpack", "Write the raw tensors of an .epk file back to safetensors", run_unpack);
  add_epk_input(*cmd, args->input);
  add_safetensors_output(*cmd, args->output);
}

}  // namespace epk::cli
