// Files from our Writer, loaded by the reference Python package. Needs /opt/refvenv/bin/python with safetensors;
// skips cleanly without it (CI has no torch). Label: reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "codec/safetensors/writer.h"
#include "tests/codec/safetensors/sha256.h"
#include "tests/codec/safetensors/test_files.h"

namespace epk::safetensors {
namespace {

constexpr const char* kPython = "/opt/refvenv/bin/python";

bool run(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  return ::pclose(p) == 0;
}

bool have_reference() {
  if (::access(kPython, X_OK) != 0) return false;
  std::string out;
  return run(std::string(kPython) + " -c 'import safetensors' 2>/dev/null", &out);
}

TEST(SafetensorsReference, PythonPackageLoadsOurFiles) {
  if (!have_reference()) GTEST_SKIP() << kPython << " with safetensors is not available";
  auto dir = testing::fresh_dir("reference");
  auto path = (dir / "ours.safetensors").string();

  // Every dtype epk knows, odd shapes, a scalar and an empty tensor, in declared (not reference) order.
  std::vector<TensorSpec> specs;
  std::vector<std::vector<std::uint8_t>> data;
  for (int code = 0; code < kDTypeCount; ++code) {
    DType t = *dtype_from_code(static_cast<std::uint32_t>(code));
    std::vector<std::uint64_t> shape = {3, 8};  // 24 elements: whole bytes for F4 and F6 too
    specs.push_back({"t." + std::string(dtype_name(t)), t, shape});
    std::uint64_t nbytes = 24ull * static_cast<std::uint64_t>(dtype_bits(t)) / 8;
    std::vector<std::uint8_t> d(nbytes);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(i * 37 + code);
    data.push_back(std::move(d));
  }
  specs.push_back({"scalar", DType::kF32, {}});
  data.push_back({0, 0, 0x50, 0x40});
  specs.push_back({"empty", DType::kI32, {2, 0, 3}});
  data.push_back({});

  auto w = Writer::create(path, specs, {{"format", "pt"}, {"source", "epk"}}, Order::kAsDeclared);
  ASSERT_TRUE(w) << w.error().to_string();
  for (std::size_t i = 0; i < specs.size(); ++i) ASSERT_TRUE(w->write(specs[i].name, data[i]));
  ASSERT_TRUE(w->finish());

  // One line per tensor as the package reads it: name dtype shape sha256; then the metadata.
  std::string script =
      "import sys, hashlib\n"
      "from safetensors import deserialize, safe_open\n"
      "blob = open(sys.argv[1], 'rb').read()\n"
      "for name, v in sorted(deserialize(blob)):\n"
      "    print(name, v['dtype'], ','.join(map(str, v['shape'])), hashlib.sha256(bytes(v['data'])).hexdigest())\n"
      "with safe_open(sys.argv[1], 'np') as f: print(sorted(f.metadata().items()))\n";
  auto script_path = dir / "load.py";
  testing::write_bytes(script_path, script);
  std::string out;
  ASSERT_TRUE(run(std::string(kPython) + " " + script_path.string() + " " + path + " 2>&1", &out)) << out;

  std::vector<std::string> want;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string shape;
    for (std::size_t k = 0; k < specs[i].shape.size(); ++k) shape += (k ? "," : "") + std::to_string(specs[i].shape[k]);
    want.push_back(specs[i].name + " " + std::string(dtype_name(specs[i].dtype)) + " " + shape + " " +
                   testing::sha256_hex(data[i]));
  }
  std::sort(want.begin(), want.end());
  std::string want_text;
  for (const auto& l : want) want_text += l + "\n";
  want_text += "[('format', 'pt'), ('source', 'epk')]\n";
  EXPECT_EQ(out, want_text);
}

}  // namespace
}  // namespace epk::safetensors
