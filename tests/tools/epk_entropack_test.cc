// The reference package's form both ways through the real binary: import-entropack of the committed reference
// vectors then decompress against the reference decoder's output, export byte-identical to the imported blobs,
// altered blobs refused naming the tensor, and epk's own streams exported and imported again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/reader.h"
#include "codec/safetensors/writer.h"
#include "tests/tools/epk_cli_fixture.h"

namespace {

using namespace epk_cli_test;  // NOLINT

class EpkEntropack : public EpkCompress {};

std::vector<std::string> vector_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(std::string(EPK_SOURCE_DIR) + "/tests/data/entropack"))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(EpkEntropack, ImportThenDecompressEqualsTheReferenceDecoder) {
  const std::vector<std::pair<std::string, std::string>> dtypes = {
      {"fp32", "decoded.float32"},           {"bf16", "decoded.bfloat16"},        {"fp16", "decoded.float16"},
      {"fp8_e4m3", "decoded.float8_e4m3fn"}, {"fp8_e5m2", "decoded.float8_e5m2"}, {"int8", "decoded.int8"}};
  const auto files = vector_files();
  ASSERT_GE(files.size(), 10u);
  int compared = 0;
  for (const auto& f : files) {
    const std::string e = path("v.epk");
    auto r = epk("import-entropack " + f + " -o " + e);
    ASSERT_EQ(r.status, 0) << f << "\n" << r.out;
    ASSERT_EQ(epk("verify " + e).status, 0) << f;
    auto ref = epk::safetensors::File::open(f);
    ASSERT_TRUE(ref);
    for (const auto& [flag, key] : dtypes) {
      const auto* want = ref->find(key);
      if (!want) continue;
      const std::string out = path("v." + flag + ".safetensors");
      r = epk("decompress " + e + " -o " + out + " --device cpu --dtype " + flag);
      ASSERT_EQ(r.status, 0) << f << " " << flag << "\n" << r.out;
      auto got_file = epk::safetensors::File::open(out);
      ASSERT_TRUE(got_file);
      const auto* got = got_file->find("entropack_quant_state");
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(got->dtype, want->dtype) << f << " " << flag;
      EXPECT_EQ(got->shape, want->shape) << f << " " << flag;
      EXPECT_TRUE(std::equal(got->data.begin(), got->data.end(), want->data.begin(), want->data.end()))
          << f << " " << flag;
      ++compared;
    }
  }
  EXPECT_GE(compared, 60);
}

TEST_F(EpkEntropack, ExportGivesByteIdenticalBlobs) {
  for (const auto& f : vector_files()) {
    ASSERT_EQ(epk("import-entropack " + f + " -o " + path("v.epk")).status, 0) << f;
    auto r = epk("export-entropack " + path("v.epk") + " -o " + path("v.safetensors"));
    ASSERT_EQ(r.status, 0) << f << "\n" << r.out;
    auto ref = epk::safetensors::File::open(f);
    auto got = epk::safetensors::File::open(path("v.safetensors"));
    ASSERT_TRUE(ref && got);
    ASSERT_EQ(got->tensors().size(), ref->tensors().size()) << f;
    for (const auto& t : ref->tensors()) {
      const auto* g = got->find(t.name);
      ASSERT_NE(g, nullptr) << f << " " << t.name;
      EXPECT_EQ(g->dtype, t.dtype);
      EXPECT_EQ(g->shape, t.shape);
      EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), g->data.begin(), g->data.end())) << f << " " << t.name;
    }
    EXPECT_EQ(got->metadata(), ref->metadata()) << f;
  }
}

TEST_F(EpkEntropack, ATruncatedOrAlteredBlobIsRefusedNamingTheTensor) {
  auto ref = epk::safetensors::File::open(std::string(EPK_SOURCE_DIR) +
                                          "/tests/data/entropack/gauss_f32_33x100_3bpp.safetensors");
  ASSERT_TRUE(ref);
  const auto* blob = ref->find("entropack_quant_state");
  ASSERT_NE(blob, nullptr);
  const std::vector<std::uint8_t> whole(blob->data.begin(), blob->data.end());
  auto with_blob = [&](const std::string& file, std::vector<std::uint8_t> bytes) {
    auto w = epk::safetensors::Writer::create(
        file, {{"layer.weight.entropack_quant_state", epk::DType::kU8, {bytes.size()}}});
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->write("layer.weight.entropack_quant_state", bytes));
    ASSERT_TRUE(w->finish());
  };
  std::vector<std::uint8_t> truncated(whole.begin(), whole.end() - 40);
  std::vector<std::uint8_t> bad_length = whole;
  bad_length[7] = 0x7f;  // a JSON length far past the blob
  std::vector<std::uint8_t> altered = whole;
  altered[altered.size() - 200] ^= 0xff;  // inside a buffer: caught by the stream's validation or its tiles
  for (const auto& [what, bytes] : std::vector<std::pair<std::string, std::vector<std::uint8_t>>>{
           {"truncated", truncated}, {"bad_length", bad_length}}) {
    const std::string f = path(what + ".safetensors");
    with_blob(f, bytes);
    auto r = epk("import-entropack " + f + " -o " + path(what + ".epk"));
    EXPECT_EQ(r.status, 1) << what << "\n" << r.out;
    EXPECT_NE(r.out.find("layer.weight.entropack_quant_state"), std::string::npos) << what << "\n" << r.out;
    EXPECT_FALSE(fs::exists(path(what + ".epk")));
  }
  with_blob(path("altered.safetensors"), altered);
  auto r = epk("import-entropack " + path("altered.safetensors") + " -o " + path("altered.epk"));
  if (r.status == 0) {
    r = epk("verify " + path("altered.epk"));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("layer.weight"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("layer.weight.entropack_quant_state"), std::string::npos) << r.out;
  }
}

TEST_F(EpkEntropack, CompressedTensorsExportAndReimport) {
  // Our own streams in the reference's form: export, import again, decode identically. A native-profile file
  // exports its streams expanded to the reference's buffers (the same tiles, payload and tables; its fp16 scales as
  // the float32 values they stand for), so they decode identically too.
  for (const std::string profile : {"reference", "native"}) {
    const std::string m = path(profile + ".epk");
    ASSERT_EQ(epk("compress " + model() + " -o " + m + " --bpp 4 --profile " + profile).status, 0);
    ASSERT_EQ(epk("export-entropack " + m + " -o " + path("x.safetensors")).status, 0);
    auto x = epk::safetensors::File::open(path("x.safetensors"));
    ASSERT_TRUE(x);
    EXPECT_NE(x->find("model.layers.0.mlp.up_proj.weight.entropack_quant_state"), nullptr);
    ASSERT_EQ(epk("import-entropack " + path("x.safetensors") + " -o " + path("y.epk")).status, 0);
    ASSERT_EQ(epk("decompress " + m + " -o " + path("a.safetensors") + " --device cpu").status, 0);
    ASSERT_EQ(epk("decompress " + path("y.epk") + " -o " + path("b.safetensors") + " --device cpu").status, 0);
    auto a = epk::safetensors::File::open(path("a.safetensors"));
    auto b = epk::safetensors::File::open(path("b.safetensors"));
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (const auto& t : a->tensors()) {
      const auto* u = b->find(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), u->data.begin(), u->data.end())) << t.name << " "
                                                                                           << profile;
    }
  }
}

}  // namespace
