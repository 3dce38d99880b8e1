// epk inspect FILE [--json]: per tensor name, shape, dtype, encoding, stored bytes and stored rate (docs/FORMAT.md
// 5.11: buffers plus index entry, the figure compress and verify print too); totals.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "codec/container/reader.h"
#include "codec/describe/tensor_details.h"
#include "codec/rans/container_io.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

struct InspectArgs {
  std::string input;
  bool json = false;
};

double bits_per_weight(std::uint64_t bytes, std::uint64_t elements) {
  return elements ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0;
}

Status run_inspect(const InspectArgs& args) {
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.input));
  std::uint64_t total_bytes = 0, total_elements = 0;
  nlohmann::json tensors = nlohmann::json::array();
  if (!args.json)
    std::printf("%-48s %-18s %-8s %-13s %12s %8s\n", "tensor", "shape", "dtype", "encoding", "stored", "stored_bpp");
  for (const auto& t : reader.tensors()) {
    const std::uint64_t bytes = rans::stored_bytes(t);
    std::uint64_t elements = element_count(t.shape);
    total_bytes += bytes;
    total_elements += elements;
    double bpw = bits_per_weight(bytes, elements);
    EPK_TRY_ASSIGN(const describe::TensorDetails details, describe::tensor_details(reader, t));
    if (args.json) {
      nlohmann::json buffers = nlohmann::json::array();
      for (const auto& b : t.buffers)
        buffers.push_back({{"name", b.name}, {"offset", b.offset}, {"size", b.size}, {"xxh3", b.xxh3}});
      nlohmann::json entry = {{"name", t.name},
                              {"shape", t.shape},
                              {"dtype", std::string(dtype_name(t.dtype))},
                              {"encoding", std::string(container::encoding_name(t.encoding))},
                              {"params", nlohmann::json::parse(t.params_json, nullptr, false)},
                              {"stored_bytes", bytes},
                              {"stored_bpp", bpw},
                              {"bits_per_weight", bpw},
                              {"buffers", buffers}};
      if (!details.section.empty()) entry[details.section] = nlohmann::json::parse(details.json);
      tensors.push_back(std::move(entry));
    } else {
      std::printf("%-48s %-18s %-8s %-13s %12s %8.3f\n", printable(t.name).c_str(), shape_string(t.shape).c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), std::string(container::encoding_name(t.encoding)).c_str(),
                  human_bytes(bytes).c_str(), bpw);
      if (!details.summary.empty()) std::printf("    %s\n", details.summary.c_str());
    }
  }
  double total_bpw = bits_per_weight(total_bytes, total_elements);
  if (args.json) {
    nlohmann::json out = {{"file", args.input},
                          {"file_bytes", reader.file_size()},
                          {"padding_bytes", reader.padding_bytes()},
                          {"metadata", reader.metadata()},
                          {"tensors", tensors},
                          {"totals",
                           {{"tensors", reader.tensors().size()},
                            {"elements", total_elements},
                            {"stored_bytes", total_bytes},
                            {"stored_bpp", total_bpw},
                            {"bits_per_weight", total_bpw}}}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    std::printf("total: %zu tensors, %llu weights, %s stored, %.3f bits per weight; file %s (padding %s)\n",
                reader.tensors().size(), static_cast<unsigned long long>(total_elements),
                human_bytes(total_bytes).c_str(), total_bpw, human_bytes(reader.file_size()).c_str(),
                human_bytes(reader.padding_bytes()).c_str());
  }
  return {};
}

}  // namespace

void add_inspect_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] = add_command(app, exit_code, "inspect",
                                 "List the tensors of an .epk file with their encodings and rates", run_inspect);
  add_epk_input(*cmd, args->input);
  cmd->add_flag("--json", args->json, "print JSON (fields: docs/FORMAT.md, 'epk inspect --json')");
}

}  // namespace epk::cli
