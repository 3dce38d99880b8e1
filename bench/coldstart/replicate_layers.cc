// A large synthetic .epk for the attach benchmark, written at disk speed: the decoder layers of an existing model
// (tensors named PREFIX.N.REST, e.g. model.layers.7.mlp.up_proj.weight) copied, stored bytes as they are, under new
// layer numbers until the file holds --layers layers; every other tensor once. The streams are the source's (already
// encoded and valid), so nothing is encoded again; the writer recomputes every checksum.
//   epk_replicate_layers SRC.epk -o OUT.epk --layers N [--prefix model.layers.]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "codec/container/reader.h"
#include "codec/container/writer.h"

namespace {

using namespace epk;  // NOLINT

// The layer number of `name` under `prefix` and the rest after its dot, or false.
bool split_layer(const std::string& name, const std::string& prefix, unsigned* layer, std::string* rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  const std::size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) return false;
  *layer = static_cast<unsigned>(std::stoul(digits));
  *rest = name.substr(dot);
  return true;
}

Status copy_tensor(const container::Reader& src, const container::TensorEntry& t, const std::string& name,
                   container::Writer& w) {
  container::TensorSpec spec{name, t.shape, t.dtype, t.encoding, t.params_json};
  std::vector<container::BufferData> buffers;
  for (std::size_t i = 0; i < t.buffers.size(); ++i) buffers.push_back({t.buffers[i].name, src.buffer(t, i)});
  return w.add_tensor(spec, buffers);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a large synthetic .epk from an existing model's layers (the attach benchmark)"};
  std::string in, out, prefix = "model.layers.";
  unsigned layers = 0;
  app.add_option("src", in, "an .epk with decoder layers")->required();
  app.add_option("-o,--out", out, "the .epk to write")->required();
  app.add_option("--layers", layers, "layers in the output")->required()->check(CLI::Range(1u, 100000u));
  app.add_option("--prefix", prefix, "the layers' name prefix");
  CLI11_PARSE(app, argc, argv);
  const auto t0 = std::chrono::steady_clock::now();
  auto src = container::Reader::open(in);
  if (!src) {
    std::fprintf(stderr, "epk_replicate_layers: %s\n", src.error().to_string().c_str());
    return 1;
  }
  std::map<unsigned, std::vector<std::pair<const container::TensorEntry*, std::string>>> by_layer;
  std::vector<const container::TensorEntry*> others;
  for (const container::TensorEntry& t : src->tensors()) {
    unsigned layer = 0;
    std::string rest;
    if (split_layer(t.name, prefix, &layer, &rest)) {
      by_layer[layer].emplace_back(&t, rest);
    } else {
      others.push_back(&t);
    }
  }
  if (by_layer.empty()) {
    std::fprintf(stderr, "epk_replicate_layers: %s has no tensor named %sN.*\n", in.c_str(), prefix.c_str());
    return 1;
  }
  std::map<std::string, std::string> meta = src->metadata();
  meta["epk.synthetic"] = "layers of " + in + " repeated to " + std::to_string(layers) + " (attach benchmark)";
  auto w = container::Writer::create(out, meta);
  if (!w) {
    std::fprintf(stderr, "epk_replicate_layers: %s\n", w.error().to_string().c_str());
    return 1;
  }
  std::vector<unsigned> source_layers;
  for (const auto& [layer, tensors] : by_layer) source_layers.push_back(layer);
  std::uint64_t tensors = 0;
  for (const container::TensorEntry* t : others) {
    if (Status st = copy_tensor(*src, *t, t->name, *w); !st) {
      std::fprintf(stderr, "epk_replicate_layers: %s\n", st.error().to_string().c_str());
      return 1;
    }
    ++tensors;
  }
  for (unsigned l = 0; l < layers; ++l) {
    for (const auto& [t, rest] : by_layer[source_layers[l % source_layers.size()]]) {
      if (Status st = copy_tensor(*src, *t, prefix + std::to_string(l) + rest, *w); !st) {
        std::fprintf(stderr, "epk_replicate_layers: %s\n", st.error().to_string().c_str());
        return 1;
      }
      ++tensors;
    }
  }
  if (Status st = w->finish(); !st) {
    std::fprintf(stderr, "epk_replicate_layers: %s\n", st.error().to_string().c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %llu tensors, %u layers (from %zu), %.1f s\n", out.c_str(),
              static_cast<unsigned long long>(tensors), layers, source_layers.size(), s);
  return 0;
}
