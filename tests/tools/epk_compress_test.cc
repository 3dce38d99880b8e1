// End to end through the real binaries: epk compress -> verify --against -> decompress on the demo model; rules,
// budget mode, calibration, corruption and bad arguments (entropack import/export: epk_entropack_test.cc).
#include <gtest/gtest.h>

#include "tests/tools/epk_cli_fixture.h"
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "codec/common/half.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/reader.h"
#include "codec/safetensors/writer.h"

namespace fs = std::filesystem;

namespace {

using namespace epk_cli_test;  // NOLINT


TEST_F(EpkCompress, RoundTripMeetsTheRateAndErrorFallsWithRate) {
  std::map<std::string, std::map<double, double>> err;  // tensor -> rate -> rel_l2
  for (double bpp : {2.0, 4.0, 6.0}) {
    const std::string e = path("m" + std::to_string(int(bpp)) + ".epk");
    // At 6 bpp a ceiling of 3% sends the four 50x200 k/v projections (~4.1%: 200-wide rows pay the most for
    // their scales) to the raw fallback, and no other weight.
    const std::string ceiling = bpp == 6.0 ? " --max-error 0.03" : "";
    auto r = epk("compress " + model() + " -o " + e + " --bpp " + std::to_string(bpp) + " --threads 2" + ceiling);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("total:"), std::string::npos) << r.out;
    const std::string table = r.out;
    auto j = verified(e);
    ASSERT_FALSE(j.is_discarded());
    int encoded = 0;
    for (const auto& t : j["tensors"]) {
      ASSERT_TRUE(t.contains("rel_l2")) << t.dump();
      if (t["encoding"] != "lattice-rans") {  // raw: kept (1-D, embeddings) or a fallback (the 50x200 k/v at 6 bpp)
        EXPECT_EQ(t["rel_l2"].get<double>(), 0.0) << t["name"];
        continue;
      }
      ++encoded;
      EXPECT_LE(t["rel_l2"].get<double>(), t["max_error"].get<double>()) << t["name"];
      const double stored = t["stored_bpp"].get<double>();
      EXPECT_NEAR(stored / bpp, 1.0, 0.01) << t["name"] << " at " << bpp;
      EXPECT_GT(t["tiles"].get<int>(), 0);
      err[t["name"]][bpp] = t["rel_l2"].get<double>();
    }
    // 14 weights; at 6 bpp the four k/v projections are stored raw (the ceiling above).
    EXPECT_GE(encoded, bpp < 6 ? 14 : 10);
    if (bpp == 6.0) {
      EXPECT_NE(table.find("raw*"), std::string::npos) << table;
    }

    const std::string out = path("d" + std::to_string(int(bpp)) + ".safetensors");
    r = epk("decompress " + e + " -o " + out + " --device cpu");
    ASSERT_EQ(r.status, 0) << r.out;
    auto src = epk::safetensors::Checkpoint::open(model());
    auto back = epk::safetensors::File::open(out);
    ASSERT_TRUE(src && back);
    ASSERT_EQ(back->tensors().size(), src->tensors().size());
    for (const auto& t : src->tensors()) {
      const auto* b = back->find(t.name);
      ASSERT_NE(b, nullptr) << t.name;
      EXPECT_EQ(b->dtype, t.dtype) << t.name;
      EXPECT_EQ(b->shape, t.shape) << t.name;
      if (t.shape.size() == 1) {  // raw: byte-identical
        EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), b->data.begin(), b->data.end())) << t.name;
      }
    }
  }
  for (const auto& [name, by_rate] : err) {
    EXPECT_GT(by_rate.at(2.0), by_rate.at(4.0)) << name;
    if (by_rate.count(6.0)) {
      EXPECT_GT(by_rate.at(4.0), by_rate.at(6.0)) << name;
    }
    // 50x200 k/v projections carry their frequency tables on 10000 weights: about 15% at 4 bpp; large ones 7-9%.
    EXPECT_LT(by_rate.at(4.0), 0.2) << name;
  }
}

// --rdo 1 (row RDO, then ECVQ with table pruning and the fine rate step): every tensor verifies, meets its rate,
// and the model's total squared error is below the plain encoder's at the same target.
TEST_F(EpkCompress, RdoStreamsVerifyAndLowerTheError) {
  double sq[2] = {0, 0};
  for (int rdo : {0, 1}) {
    const std::string e = path("r" + std::to_string(rdo) + ".epk");
    auto r = epk("compress " + model() + " -o " + e + " --bpp 4 --rdo " + std::to_string(rdo) + " --threads 2");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = verified(e);
    ASSERT_FALSE(j.is_discarded());
    for (const auto& t : j["tensors"]) {
      if (t["encoding"] != "lattice-rans") continue;
      EXPECT_NEAR(t["stored_bpp"].get<double>() / 4.0, 1.0, 0.01) << t["name"] << " rdo " << rdo;
      sq[rdo] += t["rel_l2"].get<double>() * t["rel_l2"].get<double>();
    }
  }
  EXPECT_LT(sq[1], sq[0]);
}

// --profile native: the same tensors at the same stored rate with less error; inspect names the profile; verify
// and decompress read it.
TEST_F(EpkCompress, NativeProfileStoresLessErrorAtTheSameRate) {
  double sq[2] = {0, 0};
  int index = 0;
  for (const std::string profile : {"reference", "native"}) {
    const std::string e = path(profile + ".epk");
    auto r = epk("compress " + model() + " -o " + e + " --bpp 4 --threads 2 --profile " + profile);
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = verified(e);
    ASSERT_FALSE(j.is_discarded());
    int encoded = 0;
    for (const auto& t : j["tensors"]) {
      if (t["encoding"] != "lattice-rans") continue;
      ++encoded;
      EXPECT_NEAR(t["stored_bpp"].get<double>() / 4.0, 1.0, 0.005) << t["name"] << " " << profile;
      sq[index] += t["rel_l2"].get<double>() * t["rel_l2"].get<double>();
    }
    EXPECT_GE(encoded, 14);
    j = parse(epk("inspect --json " + e, false).out);
    for (const auto& t : j["tensors"]) {
      if (t["encoding"] != "lattice-rans") continue;
      EXPECT_EQ(t["lattice_rans"]["profile"], profile) << t["name"];
    }
    ASSERT_EQ(epk("decompress " + e + " -o " + path(profile + ".safetensors") + " --device cpu").status, 0);
    ++index;
  }
  EXPECT_LT(sq[1], sq[0]);
  EXPECT_NE(epk("compress " + model() + " -o " + path("x.epk") + " --bpp 4 --profile fast").status, 0);
}

TEST_F(EpkCompress, DecompressDtypeAppliesToEveryFloatTensor) {
  const std::string e = path("m.epk");
  ASSERT_EQ(epk("compress " + model() + " -o " + e + " --bpp 3").status, 0);
  auto r = epk("decompress " + e + " -o " + path("f32.safetensors") + " --dtype fp32 --device cpu");
  ASSERT_EQ(r.status, 0) << r.out;
  auto back = epk::safetensors::File::open(path("f32.safetensors"));
  ASSERT_TRUE(back);
  auto q = back->find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, epk::DType::kF32);
  auto norm = back->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, epk::DType::kF32);  // raw floating-point tensors too (exact: bf16 -> f32)
  auto src = epk::safetensors::Checkpoint::open(model());
  ASSERT_TRUE(src);
  const auto* norm_src = src->find("model.norm.weight");
  ASSERT_NE(norm_src, nullptr);
  ASSERT_EQ(norm->data.size(), 2 * norm_src->data.size());
  for (std::size_t i = 0; i < norm_src->data.size() / 2; ++i) {
    std::uint32_t f = 0;
    std::memcpy(&f, norm->data.data() + 4 * i, 4);
    const std::uint16_t b = std::uint16_t(norm_src->data[2 * i] | (norm_src->data[2 * i + 1] << 8));
    ASSERT_EQ(f, std::uint32_t(b) << 16) << i;
  }
  // Without --dtype every tensor keeps its source dtype.
  ASSERT_EQ(epk("decompress " + e + " -o " + path("same.safetensors") + " --device cpu").status, 0);
  auto same = epk::safetensors::File::open(path("same.safetensors"));
  ASSERT_TRUE(same);
  EXPECT_EQ(same->find("model.norm.weight")->dtype, epk::DType::kBF16);
  EXPECT_EQ(same->find("model.layers.1.self_attn.q_proj.weight")->dtype, epk::DType::kBF16);
}

// Decompress (and unpack) write the source's __metadata__ back (transformers refuses a file whose "format" is missing) and keeps
// epk's own keys under "epk.".
TEST_F(EpkCompress, DecompressKeepsTheSourceMetadata) {
  const std::string src = path("meta.safetensors");
  {
    std::vector<std::uint16_t> w(64 * 256);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::uint16_t(0x3C00 + (i * 2654435761u) % 0x400);  // f16
    std::vector<std::uint8_t> bytes(w.size() * 2);
    std::memcpy(bytes.data(), w.data(), bytes.size());
    std::vector<epk::safetensors::TensorSpec> decl{{"layer.weight", epk::DType::kF16, {64, 256}}};
    auto wr = epk::safetensors::Writer::create(src, decl, {{"format", "pt"}, {"note", "keep \"this\" \u00e9"}});
    ASSERT_TRUE(wr) << wr.error().message;
    ASSERT_TRUE(wr->write("layer.weight", bytes));
    ASSERT_TRUE(wr->finish());
  }
  for (const char* cmd : {"compress", "pack", "pack+unpack"}) {
    const std::string c = cmd;
    const std::string e = path(c + ".epk"), out = path(c + ".out.safetensors");
    ASSERT_EQ(epk((c == "compress" ? "compress " : "pack ") + src + " -o " + e + (c == "compress" ? " --bpp 4" : ""))
                  .status,
              0);
    auto r = epk((c == "pack+unpack" ? "unpack " : "decompress --device cpu ") + e + " -o " + out);
    ASSERT_EQ(r.status, 0) << r.out;
    auto a = epk::safetensors::File::open(src), b = epk::safetensors::File::open(out);
    ASSERT_TRUE(a && b);
    for (const auto& [k, v] : a->metadata()) {
      auto it = b->metadata().find(k);
      ASSERT_NE(it, b->metadata().end()) << cmd << " " << k;
      EXPECT_EQ(it->second, v) << cmd << " " << k;  // byte for byte
    }
    EXPECT_EQ(b->metadata().at("epk.source"), src) << cmd;
    EXPECT_EQ(b->metadata().count("epk_source"), 0u) << cmd;
    EXPECT_EQ(b->metadata().size(), a->metadata().size() + 2) << cmd;  // epk.source, epk.tool
  }
}

// Gaussian bf16 tensors (sigma 0.02, seeded by name) written as one safetensors file, in name order.
void write_gaussian(const std::string& file, const std::vector<std::pair<std::string, std::vector<std::uint64_t>>>& ts) {
  std::vector<epk::safetensors::TensorSpec> decl;
  for (const auto& [name, shape] : ts) decl.push_back({name, epk::DType::kBF16, shape});
  auto wr = epk::safetensors::Writer::create(file, decl, {{"format", "pt"}});
  ASSERT_TRUE(wr) << wr.error().message;
  for (const auto& [name, shape] : ts) {
    std::mt19937 rng(std::uint32_t(std::hash<std::string>{}(name)));
    std::normal_distribution<float> g(0.0f, 0.02f);
    std::vector<std::uint8_t> bytes(2 * shape[0] * shape[1]);
    for (std::size_t i = 0; i < bytes.size() / 2; ++i) {
      const std::uint16_t b = epk::f32_to_bf16(g(rng));
      bytes[2 * i] = std::uint8_t(b & 0xFF);
      bytes[2 * i + 1] = std::uint8_t(b >> 8);
    }
    ASSERT_TRUE(wr->write(name, bytes));
  }
  ASSERT_TRUE(wr->finish());
}

const std::vector<std::pair<std::string, std::vector<std::uint64_t>>> kSmallShapes = {
    {"a_tiny.weight", {1, 8}}, {"b_type.weight", {2, 384}}, {"c_small.weight", {64, 64}}, {"d_big.weight", {256, 256}}};

// Tensors lattice-rans cannot serve at 4 bpp (they decoded to all zeros or came back 40% wrong) are stored raw and
// said so; verify --against passes; the large one stays encoded.
TEST_F(EpkCompress, TinyTensorsAreStoredRawNotDestroyed) {
  const std::string src = path("small.safetensors"), e = path("small.epk");
  write_gaussian(src, kSmallShapes);
  auto r = epk("compress " + src + " -o " + e + " --bpp 4");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* name : {"a_tiny.weight", "b_type.weight", "c_small.weight"}) {
    const auto at = r.out.find(name);
    ASSERT_NE(at, std::string::npos) << r.out;
    EXPECT_NE(r.out.substr(at, r.out.find('\n', at) - at).find("raw*"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("3 tensors stored raw instead of lattice-rans"), std::string::npos) << r.out;
  auto v = epk("verify " + e + " --against " + src + " --json", false);
  ASSERT_EQ(v.status, 0) << v.out;
  auto j = parse(v.out);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ((*find_tensor(j, "d_big.weight"))["encoding"], "lattice-rans");
  for (const char* name : {"a_tiny.weight", "b_type.weight", "c_small.weight"}) {
    EXPECT_EQ((*find_tensor(j, name))["encoding"], "raw") << name;
    EXPECT_EQ((*find_tensor(j, name))["rel_l2"].get<double>(), 0.0) << name;
  }
  // A looser ceiling keeps the 64x64 encoded (40% < 50%); the all-zero ones stay raw whatever the ceiling.
  r = epk("compress " + src + " -o " + path("loose.epk") + " --bpp 4 --max-error 0.5");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 tensors stored raw"), std::string::npos) << r.out;
  v = epk("verify " + path("loose.epk") + " --against " + src, false);
  EXPECT_EQ(v.status, 0) << v.out;  // the recorded --max-error is the ceiling verify applies
}

// --budget-bpp counts a fallback at its raw size and takes the extra bits from the tensors after it.
TEST_F(EpkCompress, BudgetAccountsForRawFallbacks) {
  const std::string src = path("small.safetensors"), e = path("budget.epk");
  write_gaussian(src, kSmallShapes);
  auto r = epk("compress " + src + " -o " + e + " --budget-bpp 4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("budget: 4.000 bpp asked"), std::string::npos) << r.out;
  auto j = parse(epk("verify --json " + e, false).out);
  ASSERT_FALSE(j.is_discarded());
  double weights = 0, bits = 0;
  for (const auto& t : j["tensors"]) {
    weights += t["weights"].get<double>();
    bits += 8.0 * t["stored_bytes"].get<double>();
  }
  EXPECT_NEAR(bits / weights / 4.0, 1.0, 0.01);
  EXPECT_LT((*find_tensor(j, "d_big.weight"))["target_bpp"].get<double>(), 3.5);
}

// Statistics for one 256-column weight: H = sum x x^T of 512 correlated inputs with log-normal scales.
void write_stats(const std::string& file, const std::string& weight, std::uint32_t cols) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> scale(cols), z(cols), x(cols);
  for (auto& v : scale) v = std::exp(1.5f * n(rng));
  std::vector<double> h(std::size_t(cols) * cols, 0.0);
  for (int t = 0; t < 512; ++t) {
    for (auto& v : z) v = n(rng);
    for (std::uint32_t j = 0; j < cols; ++j)
      x[j] = scale[j] * (z[j] + 0.9f * z[(j + 1) % cols] + 0.7f * z[(j * 7 + 3) % cols]);
    for (std::uint32_t i = 0; i < cols; ++i)
      for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(i) * cols + j] += double(x[i]) * x[j];
  }
  std::vector<float> hf(h.begin(), h.end());
  const std::int64_t tokens = 512;
  auto wr = epk::safetensors::Writer::create(
      file, {{weight + ".hessian", epk::DType::kF32, {cols, cols}}, {weight + ".tokens", epk::DType::kI64, {}}});
  ASSERT_TRUE(wr) << wr.error().message;
  // The reference order puts the 8-byte-aligned I64 first; supply the bytes in the writer's file order.
  while (!wr->next_tensor().empty()) {
    const std::string next(wr->next_tensor());
    if (next == weight + ".hessian")
      ASSERT_TRUE(wr->write(next, {reinterpret_cast<const std::uint8_t*>(hf.data()), hf.size() * 4}));
    else
      ASSERT_TRUE(wr->write(next, {reinterpret_cast<const std::uint8_t*>(&tokens), 8}));
  }
  ASSERT_TRUE(wr->finish());
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// --calibration: an empty statistics file gives the file compress writes without it, byte for byte; statistics for
// one weight lower its H-weighted error (verify --calibration) and leave the other weight's stream as it was.
TEST_F(EpkCompress, CalibrationLowersTheWeightedErrorAndChangesNothingElse) {
  const std::string src = path("cal.safetensors");
  write_gaussian(src, {{"p.weight", {256, 256}}, {"q.weight", {128, 256}}});
  const std::string stats = path("stats.safetensors"), empty = path("empty_stats.safetensors");
  write_stats(stats, "p.weight", 256);
  {
    auto wr = epk::safetensors::Writer::create(empty, {});
    ASSERT_TRUE(wr && wr->finish());
  }
  const std::string plain = path("plain.epk"), none = path("none.epk"), cal = path("cal.epk");
  ASSERT_EQ(epk("compress " + src + " -o " + plain + " --bpp 4 --device cpu").status, 0);
  auto r = epk("compress " + src + " -o " + none + " --bpp 4 --device cpu --calibration " + empty);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(file_bytes(plain), file_bytes(none));
  r = epk("compress " + src + " -o " + cal + " --bpp 4 --device cpu --calibration " + stats);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(calibrated)"), std::string::npos) << r.out;
  auto h_error = [&](const std::string& file) {
    auto v = epk("verify " + file + " --against " + src + " --calibration " + stats + " --json", false);
    EXPECT_EQ(v.status, 0) << v.out;
    auto j = parse(v.out);
    EXPECT_FALSE(j.is_discarded()) << v.out;
    EXPECT_FALSE(find_tensor(j, "q.weight")->contains("h_weighted_rel_error"));
    EXPECT_FALSE(find_tensor(j, "q.weight")->contains("calibrated"));
    const auto& p = *find_tensor(j, "p.weight");
    EXPECT_EQ(p["encoding"], "lattice-rans") << v.out;
    return std::pair{p["h_weighted_rel_error"].get<double>(), p.contains("calibrated")};
  };
  const auto [e_plain, plain_marked] = h_error(plain);
  const auto [e_cal, cal_marked] = h_error(cal);
  std::printf("p.weight H-weighted relative L2 error: %.5f uncalibrated, %.5f calibrated\n", e_plain, e_cal);
  EXPECT_LT(e_cal, 0.85 * e_plain);
  EXPECT_FALSE(plain_marked);
  EXPECT_TRUE(cal_marked);
  // The text table gains the h_rel column.
  r = epk("verify " + cal + " --against " + src + " --calibration " + stats, false);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("h_rel"), std::string::npos) << r.out;
  // Refusals: statistics for a weight the checkpoint lacks, --calibration without --against (--budget-bpp with
  // --calibration: epk_calib_budget_test.cc).
  const std::string orphan = path("orphan.safetensors");
  write_stats(orphan, "nothere.weight", 256);
  r = epk("compress " + src + " -o " + path("x.epk") + " --bpp 4 --calibration " + orphan);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("nothere.weight.hessian"), std::string::npos) << r.out;
  r = epk("verify " + cal + " --calibration " + stats);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--against"), std::string::npos) << r.out;
}

// verify --against fails a lattice-rans tensor above the ceiling or decoded to zeros (a file another writer made).
TEST_F(EpkCompress, VerifyFailsTensorsAboveTheCeilingOrDecodedToZeros) {
  const std::string src = path("small.safetensors"), e = path("bad.epk");
  write_gaussian(src, {{"a_tiny.weight", {1, 8}}, {"c_small.weight", {64, 64}}});
  auto ckpt = epk::safetensors::Checkpoint::open(src);
  ASSERT_TRUE(ckpt);
  {
    auto w = epk::container::Writer::create(e, {});
    ASSERT_TRUE(w);
    for (const auto& t : ckpt->tensors()) {
      epk::rate::EncodeOptions o;
      o.target_bpp = 4;
      auto enc = epk::rate::encode(std::as_bytes(std::span(t.data)), std::uint32_t(t.shape[0]),
                                   std::uint32_t(t.shape[1]), t.dtype, o, t.name);
      ASSERT_TRUE(enc) << enc.error().message;
      epk::rans::EncodingInfo info;
      info.target_bpp = 4;
      auto form = epk::rans::to_container(*enc, t.name, info);
      ASSERT_TRUE(w->add_tensor(form.spec, form.buffers));
    }
    ASSERT_TRUE(w->finish());
  }
  auto v = epk("verify " + e + " --against " + src);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_NE(v.out.find("'a_tiny.weight': decodes to all zeros where the source is not"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("'c_small.weight': relative L2 error"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("above the ceiling 18.7500%"), std::string::npos) << v.out;
  v = epk("verify " + e + " --against " + src + " --max-error 0.9");
  EXPECT_EQ(v.status, 1) << v.out;  // the zeros still fail
  EXPECT_EQ(v.out.find("'c_small.weight': relative L2 error"), std::string::npos) << v.out;
}

TEST_F(EpkCompress, RulesFirstMatchWinsAndRawDefaults) {
  const std::string e = path("m.epk");
  auto r = epk("compress " + model() + " -o " + e + " --bpp 3 --rule '*.down_proj.*=raw' --rule '*q_proj*=6' " +
               "--rule '*proj*=5'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = parse(epk("inspect --json " + e, false).out);
  ASSERT_FALSE(j.is_discarded());
  int checked = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    const std::string enc = t["encoding"];
    if (name.find("down_proj") != std::string::npos || name.find("norm") != std::string::npos ||
        name.find("embed") != std::string::npos) {
      EXPECT_EQ(enc, "raw") << name;
    } else if (name.find("q_proj") != std::string::npos) {
      ASSERT_EQ(enc, "lattice-rans") << name;
      EXPECT_DOUBLE_EQ(t["lattice_rans"]["target_bpp"].get<double>(), 6.0) << name;
      EXPECT_NEAR(t["lattice_rans"]["stored_bpp"].get<double>() / 6.0, 1.0, 0.01) << name;
    } else if (name.find("proj") != std::string::npos) {
      ASSERT_EQ(enc, "lattice-rans") << name;
      EXPECT_DOUBLE_EQ(t["lattice_rans"]["target_bpp"].get<double>(), 5.0) << name;
    } else {
      continue;
    }
    ++checked;
  }
  EXPECT_GT(checked, 15);
  // The embedding is encoded only when asked.
  ASSERT_EQ(epk("compress " + model() + " -o " + path("e.epk") + " --bpp 3 --include-embeddings").status, 0);
  j = parse(epk("inspect --json " + path("e.epk"), false).out);
  const auto* emb = find_tensor(j, "model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ((*emb)["encoding"], "lattice-rans");
  EXPECT_EQ((*find_tensor(j, "model.norm.weight"))["encoding"], "raw");
}

TEST_F(EpkCompress, BudgetModeSpendsTheBudgetWithinOnePercent) {
  const std::string e = path("m.epk");
  auto r = epk("compress " + model() + " -o " + e + " --budget-bpp 3 --threads 2");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = parse(epk("verify --json " + e, false).out);
  ASSERT_FALSE(j.is_discarded());
  double weights = 0, bits = 0;
  std::set<double> targets;
  for (const auto& t : j["tensors"]) {
    if (t["encoding"] != "lattice-rans") continue;
    weights += t["weights"].get<double>();
    bits += 8.0 * t["stored_bytes"].get<double>();
    targets.insert(t["target_bpp"].get<double>());
  }
  ASSERT_GT(weights, 0);
  EXPECT_NEAR(bits / weights / 3.0, 1.0, 0.01);
  EXPECT_GT(targets.size(), 1u) << "the budget gave every layer the same rate";
}

TEST_F(EpkCompress, CorruptPayloadByteFailsVerifyNamingTensorAndTile) {
  const std::string e = path("m.epk");
  ASSERT_EQ(epk("compress " + model() + " -o " + e + " --bpp 4").status, 0);
  auto j = parse(epk("inspect --json " + e, false).out);
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  const auto* t = find_tensor(j, victim);
  ASSERT_NE(t, nullptr);
  std::uint64_t at = 0;
  for (const auto& b : (*t)["buffers"])
    if (b["name"] == "payload") at = b["offset"].get<std::uint64_t>() + b["size"].get<std::uint64_t>() / 2;
  ASSERT_GT(at, 0u);
  {
    std::fstream f(e, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(at));
    f.write(&c, 1);
  }
  auto r = epk("verify " + e);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checksum"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tile "), std::string::npos) << r.out;
  auto jv = parse(epk("verify --json " + e, false).out);
  ASSERT_FALSE(jv.is_discarded());
  EXPECT_FALSE(jv["ok"].get<bool>());
  const auto* bad = find_tensor(jv, victim);
  ASSERT_NE(bad, nullptr);
  EXPECT_FALSE((*bad)["ok"].get<bool>());
  EXPECT_GE((*bad)["bad_tiles"].size(), 1u);
  EXPECT_EQ(jv["totals"]["bad_tensors"].get<int>(), 1);
  // Decompress refuses the file instead of writing garbage.
  EXPECT_EQ(epk("decompress " + e + " -o " + path("x.safetensors") + " --device cpu").status, 1);
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
}

TEST_F(EpkCompress, BadArgumentsAreClearErrors) {
  struct Case {
    std::string args;
    std::string says;
  };
  const std::string out = path("o.epk");
  const std::vector<Case> cases = {
      {"compress " + model() + " -o " + out, "--bpp"},
      {"compress " + model() + " -o " + out + " --bpp 40", "--bpp"},
      {"compress " + model() + " -o " + out + " --bpp 4 --rule nothing", "PATTERN=RATE"},
      {"compress " + model() + " -o " + out + " --bpp 4 --rule '*=fast'", "rate 'fast'"},
      {"compress " + model() + " -o " + out + " --bpp 4 --rule '*norm*=4'", "cannot be encoded"},
      {"compress " + model() + " -o " + out + " --budget-bpp 0.2", "--budget-bpp"},
      {"compress " + model() + " -o " + out + " --bpp 4 --threads 0", "--threads"},
      {"compress " + path("missing") + " -o " + out + " --bpp 4", path("missing")},
  };
  for (const auto& c : cases) {
    auto r = epk(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  ASSERT_EQ(epk("compress " + model() + " -o " + out + " --bpp 4").status, 0);
  for (const auto& c : std::vector<Case>{
           {"decompress " + out + " -o " + path("d.st") + " --dtype fp12", "--dtype 'fp12'"},
           {"decompress " + out + " -o " + path("d.st") + " --device tpu", "--device 'tpu'"},
           {"verify " + path("nothing.epk"), path("nothing.epk")},
           {"import-entropack " + out + " -o " + path("i.epk"), out},
       }) {
    auto r = epk(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST_F(EpkCompress, DeviceCudaWithoutAGpuSaysSo) {
  if (run("nvidia-smi -L").status == 0) GTEST_SKIP() << "a GPU is present";
  ASSERT_EQ(epk("compress " + model() + " -o " + path("m.epk") + " --bpp 4").status, 0);
  auto r = epk("decompress " + path("m.epk") + " -o " + path("d.safetensors") + " --device cuda");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--device cuda"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("d.safetensors")));
  // The default falls back to the CPU.
  EXPECT_EQ(epk("decompress " + path("m.epk") + " -o " + path("d.safetensors")).status, 0);
}

// The reference package's vectors (tests/data/entropack): import, then decompress to every dtype gives the
// reference decoder's own output bit for bit; export gives the reference's blob byte for byte.
}  // namespace
