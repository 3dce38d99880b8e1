// make_demo_model OUT_DIR [--layers N] [--hidden H]: writes a small transformer-shaped BF16 checkpoint as a sharded
// safetensors checkpoint (two shards + model.safetensors.index.json), deterministic for a given size. Used by the
// README demo and by end-to-end tests, so nobody needs to download a model.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/common/half.h"
#include "codec/safetensors/writer.h"

namespace {

// splitmix64: a fixed, portable generator so the demo model is the same on every machine.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double gaussian() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint16_t> bf16;
};

// A linear weight [out, in] with Gaussian rows whose scales vary by row, like trained layers.
Tensor linear(Rng& rng, std::string name, std::uint64_t out, std::uint64_t in) {
  Tensor t{std::move(name), {out, in}, {}};
  t.bf16.resize(out * in);
  for (std::uint64_t r = 0; r < out; ++r) {
    double row_scale = 0.02 * std::exp(0.5 * rng.gaussian());
    for (std::uint64_t c = 0; c < in; ++c)
      t.bf16[r * in + c] = epk::f32_to_bf16(static_cast<float>(row_scale * rng.gaussian()));
  }
  return t;
}

Tensor norm(std::string name, std::uint64_t n) {
  Tensor t{std::move(name), {n}, {}};
  t.bf16.assign(n, epk::f32_to_bf16(1.0f));
  return t;
}

epk::Status write_shard(const std::filesystem::path& path, const std::vector<Tensor>& tensors) {
  std::vector<epk::safetensors::TensorSpec> decls;
  for (const auto& t : tensors) decls.push_back({t.name, epk::DType::kBF16, t.shape});
  EPK_TRY_ASSIGN(auto writer, epk::safetensors::Writer::create(path.string(), decls, {{"format", "pt"}}));
  // The writer sorts tensors as the reference does; supply bytes in its order.
  for (const auto& spec : writer.tensors()) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const Tensor& t) { return t.name == spec.name; });
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(it->bf16.data());
    EPK_TRY(writer.write(spec.name, std::span<const std::uint8_t>(bytes, it->bf16.size() * 2)));
  }
  return writer.finish();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a small deterministic BF16 transformer checkpoint (sharded safetensors)"};
  std::string out_dir;
  std::uint64_t layers = 4, hidden = 256;
  app.add_option("out_dir", out_dir, "directory to create")->required();
  app.add_option("--layers", layers, "transformer blocks")->check(CLI::Range(1, 64));
  app.add_option("--hidden", hidden, "hidden size (multiple of 8)")->check(CLI::Range(8, 8192));
  CLI11_PARSE(app, argc, argv);

  std::filesystem::create_directories(out_dir);
  Rng rng{0x5eed};
  const std::uint64_t mlp = hidden * 4 - 8;  // not a power of two, to exercise odd sizes
  std::vector<std::vector<Tensor>> shards(2);
  shards[0].push_back(linear(rng, "model.embed_tokens.weight", 512, hidden));
  for (std::uint64_t l = 0; l < layers; ++l) {
    auto& shard = shards[l < layers / 2 ? 0 : 1];
    std::string p = "model.layers." + std::to_string(l) + ".";
    shard.push_back(norm(p + "input_layernorm.weight", hidden));
    shard.push_back(linear(rng, p + "self_attn.q_proj.weight", hidden, hidden));
    shard.push_back(linear(rng, p + "self_attn.k_proj.weight", hidden / 4, hidden));
    shard.push_back(linear(rng, p + "self_attn.v_proj.weight", hidden / 4, hidden));
    shard.push_back(linear(rng, p + "self_attn.o_proj.weight", hidden, hidden));
    shard.push_back(norm(p + "post_attention_layernorm.weight", hidden));
    shard.push_back(linear(rng, p + "mlp.gate_proj.weight", mlp, hidden));
    shard.push_back(linear(rng, p + "mlp.up_proj.weight", mlp, hidden));
    shard.push_back(linear(rng, p + "mlp.down_proj.weight", hidden, mlp));
  }
  shards[1].push_back(norm("model.norm.weight", hidden));

  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    auto st = write_shard(std::filesystem::path(out_dir) / file, shards[s]);
    if (!st) {
      std::fprintf(stderr, "make_demo_model: %s\n", st.error().to_string().c_str());
      return 1;
    }
    for (const auto& t : shards[s]) {
      index["weight_map"][t.name] = file;
      total += t.bf16.size() * 2;
    }
  }
  index["metadata"]["total_size"] = total;
  std::ofstream(std::filesystem::path(out_dir) / "model.safetensors.index.json") << index.dump(2) << "\n";
  std::printf("wrote a %llu-layer demo model (hidden %llu, %.1f MB of BF16) to %s\n",
              static_cast<unsigned long long>(layers), static_cast<unsigned long long>(hidden), total / 1e6,
              out_dir.c_str());
  return 0;
}
