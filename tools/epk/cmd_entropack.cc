// epk import-entropack REF.safetensors -o OUT.epk and epk export-entropack IN.epk -o OUT.safetensors: the reference
// package's (entropack 0.1.5) state_dict form, one uint8 quant_state blob per compressed tensor under the key
// `{prefix}.entropack_quant_state` (codec/rans/reference_format.h), both ways without re-encoding. Other tensors pass
// through raw. The blob's key is kept in the tensor's params (entropack_key) so that export writes it back unchanged.
#include <cstdio>
#include <map>

#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rans/reference_export.h"
#include "codec/rans/reference_format.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/writer.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

bool is_quant_state(const safetensors::TensorView& t) {
  const std::string_view leaf = rans::kReferenceLeaf;
  const std::string_view n = t.name;
  return n == leaf || (n.size() > leaf.size() + 1 && n.ends_with(leaf) && n[n.size() - leaf.size() - 1] == '.');
}

// "layer.weight.entropack_quant_state" -> "layer.weight"; the bare leaf keeps its name.
std::string tensor_name(const std::string& key) {
  const std::size_t leaf = rans::kReferenceLeaf.size();
  return key.size() == leaf ? key : key.substr(0, key.size() - leaf - 1);
}

Status run_import(const InputOutputArgs& args) {
  EPK_TRY_ASSIGN(auto checkpoint, safetensors::Checkpoint::open(args.input));
  // Names must stay unique after the leaf is stripped.
  std::map<std::string, std::string> names;
  for (const auto& t : checkpoint.tensors()) {
    const std::string name = is_quant_state(t) ? tensor_name(t.name) : t.name;
    if (auto [it, fresh] = names.emplace(name, t.name); !fresh)
      return make_error(ErrorCode::kBadInput, args.input + ": tensors '" + it->second + "' and '" + t.name +
                                                  "' would both be stored as '" + name + "'");
  }
  std::map<std::string, std::string> metadata = {
      {"source", args.input}, {"tool", "epk " + std::string(tool_version())}, {"settings", "import-entropack"}};
  for (const auto& [k, v] : checkpoint.metadata()) metadata.emplace("entropack." + k, v);
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(args.output, std::move(metadata)));
  std::size_t imported = 0;
  for (const auto& t : checkpoint.tensors()) {
    if (!is_quant_state(t)) {
      container::TensorSpec spec{t.name, t.shape, t.dtype, container::Encoding::kRaw, "{}"};
      container::BufferData data{"data", t.data};
      EPK_TRY(writer.add_tensor(spec, std::span<const container::BufferData>(&data, 1)));
      continue;
    }
    if (t.dtype != DType::kU8 || t.shape.size() != 1)
      return make_error(ErrorCode::kBadInput, args.input + ": tensor '" + t.name +
                                                  "': a quant_state must be a 1-D U8 "
                                                  "tensor, found " +
                                                  std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape));
    const std::string where = args.input + ": tensor '" + t.name + "'";
    EPK_TRY_ASSIGN(
        auto enc,
        rans::parse_reference_quant_state(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data.data()), t.data.size()), where));
    rans::EncodingInfo info;
    info.origin = "entropack";
    info.entropack_key = t.name;
    info.rdo_candidates = 0;
    auto form = rans::to_container(enc, tensor_name(t.name), info);
    EPK_TRY(writer.add_tensor(form.spec, form.buffers));
    ++imported;
  }
  EPK_TRY(writer.finish());
  std::printf("imported %zu entropack tensors and %zu raw tensors into %s\n", imported,
              checkpoint.tensors().size() - imported, args.output.c_str());
  return {};
}

Status run_export(const InputOutputArgs& args) {
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.input));
  std::vector<safetensors::TensorSpec> decls;
  std::map<std::string, const container::TensorEntry*> by_key;
  for (const auto& t : reader.tensors()) {
    EPK_TRY_ASSIGN(rans::ReferenceEntry e, rans::reference_entry(reader, t, args.input));
    const std::string key = e.key;
    decls.push_back({std::move(e.key), e.dtype, std::move(e.shape)});
    if (!by_key.emplace(key, &t).second)
      return make_error(ErrorCode::kBadInput, args.input + ": two tensors export to the key '" + key + "'");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [k, v] : reader.metadata())
    if (k.starts_with("entropack.")) metadata[k.substr(10)] = v;
  EPK_TRY_ASSIGN(auto writer, safetensors::Writer::create(args.output, decls, metadata));
  std::size_t exported = 0;
  for (const auto& spec : writer.tensors()) {
    const auto* t = by_key.at(spec.name);
    EPK_TRY(reader.verify(*t));
    std::vector<std::byte> owned;
    EPK_TRY_ASSIGN(auto bytes, rans::reference_bytes(reader, *t, owned));
    EPK_TRY(writer.write(spec.name, bytes));
    if (rans::exports_as_stream(*t)) ++exported;
  }
  EPK_TRY(writer.finish());
  std::printf("exported %zu lattice-rans tensors and %zu raw tensors to %s\n", exported,
              reader.tensors().size() - exported, args.output.c_str());
  return {};
}

}  // namespace

void add_import_entropack_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "import-entropack",
                  "Store the entropack package's compressed tensors in an .epk file without re-encoding", run_import);
  cmd->add_option("input", args->input, "a .safetensors file holding entropack state_dict entries")->required();
  add_epk_output(*cmd, args->output);
}

void add_export_entropack_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "export-entropack",
                  "Write an .epk file's lattice-rans tensors in the entropack package's state_dict form", run_export);
  add_epk_input(*cmd, args->input);
  add_safetensors_output(*cmd, args->output);
}

}  // namespace epk::cli
