// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/TARGET/) from the project's own writers, so each
// seed is a valid input that reaches deep into its reader: make_corpus OUT_DIR (creates OUT_DIR/TARGET/seed_*).
// Fixed seeds: the output is the same on every run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "codec/safetensors/writer.h"
#include "shm/protocol.h"
#include "tests/codec/layouts/gguf_builder.h"
#include "tests/fuzz/rans_frame.h"

namespace {

using namespace epk;
namespace fs = std::filesystem;

fs::path g_out;

void die(const std::string& what) {
  std::fprintf(stderr, "make_corpus: %s\n", what.c_str());
  std::exit(1);
}
template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().to_string());
  return std::move(r).value();
}
void must(Status s, const char* what) {
  if (!s) die(std::string(what) + ": " + s.error().to_string());
}

void write_seed(const std::string& target, const std::string& name, std::span<const std::uint8_t> bytes) {
  fs::create_directories(g_out / target);
  std::ofstream f(g_out / target / ("seed_" + name), std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) die("cannot write " + (g_out / target / name).string());
}
std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void move_seed(const std::string& target, const std::string& name, const fs::path& tmp) {
  auto bytes = read_all(tmp);
  fs::remove(tmp);
  write_seed(target, name, bytes);
}

rans::EncodedTensor gaussian_stream(std::uint32_t rows, std::uint32_t cols, double bpp, DType dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = d(rng);
  std::vector<std::uint8_t> src;
  if (dtype == DType::kBF16) {
    for (float v : w) {
      std::uint32_t u;
      std::memcpy(&u, &v, 4);
      src.push_back(std::uint8_t(u >> 16));
      src.push_back(std::uint8_t(u >> 24));
    }
  } else {
    src.assign(reinterpret_cast<const std::uint8_t*>(w.data()), reinterpret_cast<const std::uint8_t*>(w.data()) + w.size() * 4);
  }
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  o.tile_symbols = 64;  // several tiles even in a small tensor
  return must(rate::encode({reinterpret_cast<const std::byte*>(src.data()), src.size()}, rows, cols, dtype, o, "w"),
              "encode");
}

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = std::uint8_t(rng());
  return v;
}

void epk_seeds(const std::vector<std::uint8_t>& gguf_file) {
  const fs::path tmp = g_out / "tmp.epk";
  {  // raw tensors of several ranks and dtypes
    auto w = must(container::Writer::create(tmp.string(), {{"source", "fuzz"}}), "create");
    auto a = random_bytes(3 * 5 * 4, 1), b = random_bytes(7 * 2, 2), c = random_bytes(2, 3);
    must(w.add_tensor({"a", {3, 5}, DType::kF32}, {{"data", a}}), "add");
    must(w.add_tensor({"b", {7}, DType::kBF16}, {{"data", b}}), "add");
    must(w.add_tensor({"s", {}, DType::kF16}, {{"data", c}}), "add");
    must(w.finish(), "finish");
    move_seed("epk_reader", "raw", tmp);
  }
  {  // lattice-rans, F32 and BF16 sources
    auto w = must(container::Writer::create(tmp.string(), {}), "create");
    auto t1 = gaussian_stream(4, 24, 4.0, DType::kF32, 4);
    auto t2 = gaussian_stream(3, 10, 2.0, DType::kBF16, 5);
    auto f1 = rans::to_container(t1, "l1", {});
    auto f2 = rans::to_container(t2, "l2", {});
    must(w.add_tensor(f1.spec, f1.buffers), "add");
    must(w.add_tensor(f2.spec, f2.buffers), "add");
    must(w.finish(), "finish");
    move_seed("epk_reader", "lattice_rans", tmp);
  }
  {  // lattice-rans in the native profile (packed metadata, docs/STREAM.md section 9)
    auto w = must(container::Writer::create(tmp.string(), {}), "create");
    auto t = gaussian_stream(5, 40, 3.0, DType::kF32, 7);
    must(rans::round_scales_to_native(t.scales), "round scales");
    rans::EncodingInfo info;
    info.profile = rans::StreamProfile::kNative;
    auto f = must(rans::to_container_as(t, "n1", info), "native form");
    must(w.add_tensor(f.form.spec, f.form.buffers), "add");
    must(w.finish(), "finish");
    move_seed("epk_reader", "lattice_rans_native", tmp);
  }
  {  // intq: packed codes, rANS codes, a GGUF block tensor
    auto w = must(container::Writer::create(tmp.string(), {}), "create");
    std::mt19937 rng(6);
    auto q = layouts::make_quant_tensor(4, 32, 8, 16);
    for (auto& c : q.codes) c = std::uint8_t(rng() & 3);  // skewed: rANS is smaller than the packed words
    for (auto& s : q.scales) s = 0.125f;
    for (auto& z : q.zeros) z = 8;
    auto packed = must(layouts::intq::encode_int(q, "q_packed", DType::kF16, "gptq", layouts::intq::CodeForm::kPacked),
                       "encode_int");
    auto coded = must(layouts::intq::encode_int(q, "q_rans", DType::kF16, "gptq", layouts::intq::CodeForm::kRans),
                      "encode_int");
    must(w.add_tensor(packed.spec, packed.buffers()), "add");
    must(w.add_tensor(coded.spec, coded.buffers()), "add");
    auto g = must(layouts::gguf::File::parse(gguf_file, "gguf_small.gguf"), "gguf");
    for (const auto& t : g.tensors()) {
      auto e = layouts::intq::encode_gguf(t, g.tensor_bytes(t), "g." + std::string(t.name));
      if (!e || t.n_bytes > 2048) continue;
      must(w.add_tensor(e->spec, e->buffers()), "add");
      break;
    }
    must(w.finish(), "finish");
    move_seed("epk_reader", "intq", tmp);
  }
}

void safetensors_seeds() {
  const fs::path tmp = g_out / "tmp.safetensors";
  auto a = random_bytes(2 * 3 * 2, 7), b = random_bytes(4 * 4, 8), c = random_bytes(5, 9);
  std::vector<safetensors::TensorSpec> specs = {
      {"w", DType::kBF16, {2, 3}}, {"b", DType::kF32, {4}}, {"e", DType::kF16, {0, 3}}, {"u", DType::kU8, {5}}};
  auto w = must(safetensors::Writer::create(tmp.string(), specs, {{"format", "pt"}}), "create");
  const std::map<std::string, std::vector<std::uint8_t>*> data = {{"w", &a}, {"b", &b}, {"u", &c}};
  for (const auto& t : w.tensors())
    if (auto it = data.find(t.name); it != data.end()) must(w.write(t.name, *it->second), "write");
  must(w.finish(), "finish");
  move_seed("safetensors_reader", "mixed", tmp);
}

void gguf_seeds() {
  layouts::testing::GgufBuilder g;
  g.kv_string("general.architecture", "llama");
  g.kv_u32("general.alignment", 32);
  g.kv_f32_array("tokenizer.scores", {0.5f, -1.0f, 2.0f});
  auto q8 = random_bytes(34 * 2, 10), q4k = random_bytes(144, 11), f16 = random_bytes(16 * 2, 12);
  for (std::size_t i = 0; i < q8.size(); i += 34) q8[i + 1] = 0x2c;  // finite fp16 block scales
  q4k[1] = q4k[3] = 0x2c;
  for (auto i = 1u; i < f16.size(); i += 2) f16[i] &= 0x3f;
  g.tensor("blk.0.q8", {32, 2}, 8, std::string(q8.begin(), q8.end()));
  g.tensor("blk.0.q4k", {256}, 12, std::string(q4k.begin(), q4k.end()));
  g.tensor("blk.0.f16", {4, 4}, 1, std::string(f16.begin(), f16.end()));
  write_seed("gguf_reader", "mixed", g.build());
}

void protocol_seeds() {
  using namespace shm;
  std::vector<std::uint8_t> m;
  auto put = [&](const char* name) { write_seed("protocol", name, m); };
  encode_hello(1, {1234, 0}, &m), put("hello");
  encode_open_model(2, {"llama"}, &m), put("open_model");
  encode_acquire(3, {7, Layout::kStored, "blk.0.attn_q.weight", 0}, &m), put("acquire");
  encode_prefetch(4, {7, Layout::kStored, {"a", "bb"}, 1}, &m), put("prefetch");
  ReleaseRequest rel;
  rel.handle = (std::uint64_t(1) << kHandlePoolShift) | 42;
  encode_release(5, rel, &m), put("release");
  rel.fence = FenceKind::kCudaEvent;
  rel.event.fill(0x5a);
  encode_release(6, rel, &m), put("release_event");
  encode_empty(7, MsgType::kStats, &m), put("stats");
  HelloReply hr;
  hr.pools = {{0, PoolKind::kHost, -1, 1 << 20}};
  hr.status_entries = 64;
  encode_hello_reply(8, hr, &m), put("hello_reply");
  encode_open_model_reply(9, {3, 100}, &m), put("open_model_reply");
  AcquireReply ar;
  ar.handle = 99, ar.bytes = 64, ar.shape = {4, 8}, ar.strides = {8, 1}, ar.status_ticket = 5;
  encode_acquire_reply(10, ar, &m), put("acquire_reply");
  encode_prefetch_reply(11, {2}, &m), put("prefetch_reply");
  StatsReply sr;
  sr.budget_bytes = 1 << 30, sr.pools = {PoolStats{0, -1, 1 << 30, 4096}};
  encode_stats_reply(12, sr, &m), put("stats_reply");
  ModelsReply mr;
  mr.total = 1, mr.models = {{"llama", 10, 2, 4096, 1}};
  encode_models_reply(13, mr, &m), put("models_reply");
  encode_error(14, {WireStatus::kNotFound, "no tensor 'x'"}, &m), put("error");
}

void rans_seeds() {
  write_seed("rans_tile", "f32_4x24_4bpp", fuzz::frame_stream(gaussian_stream(4, 24, 4.0, DType::kF32, 13)));
  write_seed("rans_tile", "bf16_3x10_2bpp", fuzz::frame_stream(gaussian_stream(3, 10, 2.0, DType::kBF16, 14)));
  write_seed("rans_tile", "f32_9x17_7bpp", fuzz::frame_stream(gaussian_stream(9, 17, 7.0, DType::kF32, 15)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) die("usage: make_corpus OUT_DIR GGUF_SEED_FILE");
  g_out = argv[1];
  fs::create_directories(g_out);
  epk_seeds(read_all(argv[2]));
  safetensors_seeds();
  gguf_seeds();
  protocol_seeds();
  rans_seeds();
  return 0;
}
