// epk inspect FILE [--json]: per tensor name, shape, dtype, encoding, stored bytes and stored rate (docs/FORMAT.md
// 5.11: buffers plus index entry, the figure compress and verify print too); totals.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "codec/container/reader.h"
#include "codec/layouts/intq_io.h"
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

// The encoding parameters of a lattice-rans tensor (params_json and its rows and cols against the shape checked by
// codec/rans/container_io; the shape's own rules by the reader at open).
Result<nlohmann::json> lattice_rans_json(const container::Reader& reader, const container::TensorEntry& t) {
  rans::LatticeRansStream s;
  rans::EncodingInfo info;
  EPK_TRY(rans::parse_entry_params(reader, t, &s, &info));
  const std::uint64_t stored = rans::stored_bytes(t);
  const std::uint64_t n = t.element_count();
  std::uint32_t tiles = 0;
  for (const auto& b : t.buffers)
    if (b.name == rans::kOffsetsBuffer && b.size >= 4) tiles = std::uint32_t(b.size / 4 - 1);
  return nlohmann::json{{"target_bpp", info.target_bpp},
                        {"stored_bytes", stored},
                        {"stored_bpp", n ? 8.0 * double(stored) / double(n) : 0.0},
                        {"prob_bits", s.prob_bits},
                        {"tile_symbols", s.tile_symbols},
                        {"tiles", tiles},
                        {"padded_cols", s.padded_cols},
                        {"rdo_sweeps", info.rdo_sweeps},
                        {"scale", info.scale},
                        {"coarsened", info.coarsened},
                        {"origin", info.origin}};
}

// Effective bits per weight of an intq tensor, split as FORMAT.md 11.6 says (codec/layouts/intq_io.h checks it).
Result<nlohmann::json> intq_json(const container::Reader& reader, const container::TensorEntry& t) {
  EPK_TRY_ASSIGN(auto f, layouts::intq::footprint_of_entry(reader, t));
  auto per = [&](std::uint64_t b) { return f.weights ? 8.0 * static_cast<double>(b) / f.weights : 0.0; };
  EPK_TRY_ASSIGN(auto codes, layouts::intq::code_info(reader, t));
  auto params = nlohmann::json::parse(t.params_json, nullptr, false);
  return nlohmann::json{{"kind", params.value("kind", "")},
                        {"codes", codes.form},
                        {"code_bytes", codes.stored_bytes},
                        {"packed_code_bytes", codes.packed_bytes},
                        {"bits_per_weight", f.bits_per_weight()},
                        {"codes_bpw", per(f.code_bytes)},
                        {"scales_bpw", per(f.scale_bytes)},
                        {"zeros_bpw", per(f.zero_bytes)},
                        {"indices_bpw", per(f.index_bytes)}};
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
      if (t.encoding == container::Encoding::kLatticeRans) {
        EPK_TRY_ASSIGN(auto lr, lattice_rans_json(reader, t));
        entry["lattice_rans"] = std::move(lr);
      }
      if (t.encoding == container::Encoding::kIntq) {
        EPK_TRY_ASSIGN(auto iq, intq_json(reader, t));
        entry["intq"] = std::move(iq);
      }
      tensors.push_back(std::move(entry));
    } else {
      std::printf("%-48s %-18s %-8s %-13s %12s %8.3f\n", printable(t.name).c_str(), shape_string(t.shape).c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), std::string(container::encoding_name(t.encoding)).c_str(),
                  human_bytes(bytes).c_str(), bpw);
      if (t.encoding == container::Encoding::kLatticeRans) {
        EPK_TRY_ASSIGN(auto lr, lattice_rans_json(reader, t));
        char target[32] = "-";
        if (lr["target_bpp"].get<double>() > 0)
          std::snprintf(target, sizeof target, "%.3f", lr["target_bpp"].get<double>());
        std::printf(
            "    target %s bpp, prob bits %u, %u tiles of %u symbols, rdo %d, %s\n", target,
            lr["prob_bits"].get<unsigned>(), lr["tiles"].get<unsigned>(),
            lr["tile_symbols"].get<unsigned>(), lr["rdo_sweeps"].get<int>(),
            lr["origin"].get<std::string>() == "entropack" ? "imported from entropack" : "encoded by epk");
      }
      if (t.encoding == container::Encoding::kIntq) {
        EPK_TRY_ASSIGN(auto iq, intq_json(reader, t));
        // The split of the buffers alone (FORMAT.md 11.6); the tensor's stored rate is the column above.
        std::printf("    intq %s, codes %s: buffers per weight = codes %.3f + scales %.3f + zeros %.3f + indices %.3f "
                    "bits\n",
                    iq["kind"].get<std::string>().c_str(), iq["codes"].get<std::string>().c_str(),
                    iq["codes_bpw"].get<double>(), iq["scales_bpw"].get<double>(), iq["zeros_bpw"].get<double>(),
                    iq["indices_bpw"].get<double>());
      }
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
