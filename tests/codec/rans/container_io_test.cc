// codec/rans/container_io: a lattice-rans tensor through the .epk container (FORMAT.md section 10), its zero-copy
// view, the stored-bytes count, and every malformed params field or buffer refused with file, tensor and field named.
#include "codec/rans/container_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "codec/common/bytes.h"
#include "codec/container/format.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"
#include "tests/support/scratch_dir.h"

namespace epk::rans {
namespace {

namespace fs = std::filesystem;

EncodedTensor encode_gaussian(std::uint32_t rows, std::uint32_t cols, double bpp, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = d(rng);
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  auto e = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, rows, cols, DType::kF32, o, "w");
  EXPECT_TRUE(e) << e.error().to_string();
  return std::move(e).value();
}

std::vector<float> decode_f32(const LatticeRansStream& s) {
  std::vector<float> out(std::size_t(s.rows) * s.cols);
  auto st = decode(s, "t", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  EXPECT_TRUE(st) << st.error().to_string();
  return out;
}

class ContainerIo : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = epk::test::test_scratch_file("epk_container_io", ".epk");
    tensor_ = encode_gaussian(37, 61, 4.0, 7);  // odd sizes: padded_cols 64
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Writes one lattice-rans tensor "blk.0.w" after letting mutate change its form.
  container::Reader write(const std::function<void(ContainerForm&)>& mutate = {}) {
    EncodingInfo info;
    info.target_bpp = 4.0;
    info.scale = 0.25;
    auto form = to_container(tensor_, "blk.0.w", info);
    if (mutate) mutate(form);
    auto w = container::Writer::create(path_, {});
    EXPECT_TRUE(w);
    auto st = w->add_tensor(form.spec, form.buffers);
    EXPECT_TRUE(st) << st.error().to_string();
    EXPECT_TRUE(w->finish());
    auto r = container::Reader::open(path_);
    EXPECT_TRUE(r) << r.error().to_string();
    return std::move(r).value();
  }

  std::string path_;
  EncodedTensor tensor_;
};

TEST_F(ContainerIo, RoundTripIsAViewIntoTheMappedFile) {
  auto r = write();
  ASSERT_EQ(r.tensors().size(), 1u);
  const auto& e = r.tensors()[0];
  EXPECT_EQ(e.encoding, container::Encoding::kLatticeRans);
  EXPECT_EQ(e.shape, (std::vector<std::uint64_t>{37, 61}));
  auto s = from_container(r, e);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(static_cast<const void*>(s->stream.payload.data()), static_cast<const void*>(r.buffer(e, 0).data()));
  EXPECT_EQ(static_cast<const void*>(s->stream.scales.data()), static_cast<const void*>(r.buffer(e, "scales")->data()));
  EXPECT_EQ(s->stream.prob_bits, tensor_.prob_bits);
  EXPECT_EQ(s->stream.padded_cols, 64u);
  EXPECT_EQ(s->dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(s->info.target_bpp, 4.0);
  EXPECT_DOUBLE_EQ(s->info.scale, 0.25);
  EXPECT_EQ(s->info.origin, "epk");
  EXPECT_EQ(decode_f32(s->stream), decode_f32(tensor_.view()));
  // The owning copy is the same tensor.
  auto owned = to_owned(*s);
  EXPECT_EQ(owned.payload, tensor_.payload);
  EXPECT_EQ(owned.freq_tables, tensor_.freq_tables);
  EXPECT_EQ(owned.scales, tensor_.scales);
}

TEST_F(ContainerIo, ProfileIsReferenceUnlessTheParamsSayNative) {
  auto r = write();
  auto s = from_container(r, r.tensors()[0]);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->info.profile, StreamProfile::kReference);
  EXPECT_EQ(r.tensors()[0].params_json.find("profile"), std::string::npos);  // reference files are unchanged
  auto named = write([](ContainerForm& f) {
    auto j = nlohmann::json::parse(f.spec.params_json);
    j["profile"] = "reference";
    f.spec.params_json = j.dump();
  });
  s = from_container(named, named.tensors()[0]);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->info.profile, StreamProfile::kReference);
  EXPECT_EQ(decode_f32(s->stream), decode_f32(tensor_.view()));
}

TEST_F(ContainerIo, IndexEntryBytesIsWhatTheIndexSpends) {
  auto r = write();
  const auto& e = r.tensors()[0];
  std::ifstream f(path_, std::ios::binary);
  std::uint8_t h[container::kHeaderSize];
  f.read(reinterpret_cast<char*>(h), sizeof h);
  const auto index_size = load_le<std::uint64_t>(h + container::header::kIndexSizeAt);
  EXPECT_EQ(index_entry_bytes(e), index_size - 8);  // u64 tensor_count, then the one entry
  auto form = to_container(tensor_, "blk.0.w", EncodingInfo{4.0, 0, 0, true, 0.25});
  EXPECT_EQ(index_entry_bytes(form.spec, form.buffers), index_entry_bytes(e));
  std::uint64_t buffers = 0;
  for (const auto& b : e.buffers) buffers += b.size;
  EXPECT_EQ(stored_bytes(e), buffers + index_entry_bytes(e));
  EXPECT_EQ(buffers + 24, tensor_.buffer_bytes());  // the reference's layout i64[3] lives in params here
}

struct BadCase {
  const char* what;
  std::function<void(ContainerForm&)> mutate;
  const char* field;  // must appear in the message
  ErrorCode code = ErrorCode::kBadInput;
};

void set_param(ContainerForm& f, const std::string& key, const nlohmann::json& v) {
  auto j = nlohmann::json::parse(f.spec.params_json);
  if (v.is_null())
    j.erase(key);
  else
    j[key] = v;
  f.spec.params_json = j.dump();
}

TEST_F(ContainerIo, MalformedFieldsAreRefusedNamingFileTensorAndField) {
  static std::vector<std::uint16_t> odd_payload(3);
  static std::vector<std::uint32_t> short_states(5);
  static std::vector<std::uint8_t> three_meta(48);
  static std::vector<std::uint16_t> bad_freq;
  static std::vector<float> bad_scales;
  const std::vector<BadCase> cases = {
      {"rows missing", [](auto& f) { set_param(f, "rows", nullptr); }, "params.rows"},
      {"rows a string", [](auto& f) { set_param(f, "rows", "37"); }, "params.rows"},
      {"cols negative", [](auto& f) { set_param(f, "cols", -61); }, "params.cols"},
      {"rows too large", [](auto& f) { set_param(f, "rows", 1ull << 33); }, "params.rows"},
      {"rows against shape", [](auto& f) { set_param(f, "rows", 36); }, "shape"},
      {"padded_cols", [](auto& f) { set_param(f, "padded_cols", 61); }, "params.padded_cols"},
      {"prob_bits 0", [](auto& f) { set_param(f, "prob_bits", 0); }, "params.prob_bits"},
      {"prob_bits 16", [](auto& f) { set_param(f, "prob_bits", 16); }, "params.prob_bits"},
      {"tile_symbols 0", [](auto& f) { set_param(f, "tile_symbols", 0); }, "params.tile_symbols"},
      {"tiles", [](auto& f) { set_param(f, "tiles", 99); }, "params.tiles"},
      {"target_bpp", [](auto& f) { set_param(f, "target_bpp", "four"); }, "params.target_bpp"},
      {"encoder", [](auto& f) { set_param(f, "encoder", 3); }, "params.encoder"},
      {"encoder.scale",
       [](auto& f) {
         set_param(f, "encoder", {{"scale", "x"}});
       },
       "params.encoder.scale"},
      {"encoder.coarsened",
       [](auto& f) {
         set_param(f, "encoder", {{"coarsened", 1}});
       },
       "params.encoder.coarsened"},
      {"a buffer missing", [](auto& f) { f.buffers.pop_back(); }, "buffers"},
      {"a buffer renamed", [](auto& f) { f.buffers[5].name = "row_scales"; }, "scales"},
      {"payload odd bytes",
       [](auto& f) {
         f.buffers[0].bytes = {reinterpret_cast<const std::uint8_t*>(odd_payload.data()), 5};
       },
       "payload"},
      {"states short",
       [](auto& f) {
         f.buffers[2].bytes = {reinterpret_cast<const std::uint8_t*>(short_states.data()), 20};
       },
       "states"},
      {"stream_meta 3 rows",
       [](auto& f) {
         f.buffers[3].bytes = {three_meta.data(), three_meta.size()};
       },
       "stream_meta"},
      {"frequencies not summing to 2^pb",
       [this](auto& f) {
         bad_freq = tensor_.freq_tables;
         bad_freq[0] = std::uint16_t(bad_freq[0] + 1);
         f.buffers[4].bytes = {reinterpret_cast<const std::uint8_t*>(bad_freq.data()), bad_freq.size() * 2};
       },
       "blk.0.w"},
      {"a negative row scale",
       [this](auto& f) {
         bad_scales = tensor_.scales;
         bad_scales[3] = -1.0f;
         f.buffers[5].bytes = {reinterpret_cast<const std::uint8_t*>(bad_scales.data()), bad_scales.size() * 4};
       },
       "blk.0.w"},
      {"a dtype the encoder never takes", [](auto& f) { f.spec.dtype = DType::kU8; }, "dtype", ErrorCode::kUnsupported},
      {"a shape other than params rows x cols", [](auto& f) { f.spec.shape = {f.spec.shape[1], f.spec.shape[0]}; },
       "shape"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto r = write(c.mutate);
    ASSERT_EQ(r.tensors().size(), 1u);
    auto s = from_container(r, r.tensors()[0]);
    ASSERT_FALSE(s);
    const std::string msg = s.error().message;
    EXPECT_NE(msg.find(path_), std::string::npos) << msg;
    EXPECT_NE(msg.find("blk.0.w"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    if (c.code != ErrorCode::kBadInput) {
      EXPECT_EQ(s.error().code, c.code) << msg;
    }
  }
}

// Rule 10.1 is the container's (codec/container/shape_rules.h): a 1-D lattice-rans entry never reaches a file.
TEST_F(ContainerIo, AOneDimensionalShapeIsRefusedByTheWriter) {
  auto form = to_container(tensor_, "blk.0.w", {});
  form.spec.shape = {37 * 61};
  auto w = container::Writer::create(path_, {});
  ASSERT_TRUE(w);
  auto st = w->add_tensor(form.spec, form.buffers);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("'blk.0.w': rank: 1, but a lattice-rans tensor has rank 2"), std::string::npos)
      << st.error().message;
}

TEST_F(ContainerIo, ARawTensorIsNotALatticeRansOne) {
  const std::vector<std::uint8_t> data(16);
  auto w = container::Writer::create(path_, {});
  ASSERT_TRUE(w);
  container::BufferData b{"data", data};
  ASSERT_TRUE(w->add_tensor({"norm", {4}, DType::kF32, container::Encoding::kRaw, "{}"}, {b}));
  ASSERT_TRUE(w->finish());
  auto r = container::Reader::open(path_);
  ASSERT_TRUE(r);
  auto s = from_container(*r, r->tensors()[0]);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(s.error().message.find("norm"), std::string::npos);
}

}  // namespace
}  // namespace epk::rans

namespace epk::rans {
namespace {

// The native profile through a real file: written, read, expanded, decoded like the reference form of the same
// tensor; its params and buffers refused by name when malformed.
class NativeContainer : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = epk::test::test_scratch_file("epk_native_container", ".epk");
    tensor_ = encode_gaussian(37, 61, 4.0, 7);
    ASSERT_TRUE(round_scales_to_native(tensor_.scales).has_value());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  Result<container::Reader> write(const std::function<void(ContainerForm&)>& mutate = {}) {
    EncodingInfo info;
    info.profile = StreamProfile::kNative;
    auto native = to_container_as(tensor_, "blk.0.w", info);
    EXPECT_TRUE(native) << native.error().to_string();
    ContainerForm& form = native->form;
    if (mutate) mutate(form);
    auto w = container::Writer::create(path_, {});
    EXPECT_TRUE(w);
    EXPECT_TRUE(w->add_tensor(form.spec, form.buffers));
    EXPECT_TRUE(w->finish());
    return container::Reader::open(path_);
  }

  std::string path_;
  EncodedTensor tensor_;
};

TEST_F(NativeContainer, DecodesAsTheReferenceFormOfTheSameTensor) {
  auto r = write();
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& e = r->tensors()[0];
  EXPECT_EQ(e.buffers.size(), std::size_t(kNativeBuffers));
  auto s = from_container(*r, e);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->info.profile, StreamProfile::kNative);
  ASSERT_NE(s->expanded, nullptr);
  // The payload is still a view of the file; the rest is owned.
  EXPECT_EQ(static_cast<const void*>(s->stream.payload.data()), static_cast<const void*>(r->buffer(e, 0).data()));
  EXPECT_EQ(static_cast<const void*>(s->stream.states.data()), static_cast<const void*>(s->expanded->states.data()));
  EXPECT_EQ(decode_f32(s->stream), decode_f32(tensor_.view()));
  const EncodedTensor owned = to_owned(*s);  // export's reference form
  EXPECT_EQ(owned.offsets, tensor_.offsets);
  EXPECT_EQ(owned.states, tensor_.states);
  EXPECT_EQ(owned.scales, tensor_.scales);
  // Lighter than the reference form of the same tensor.
  const ContainerForm ref = to_container(tensor_, "blk.0.w", EncodingInfo{});
  std::uint64_t ref_bytes = index_entry_bytes(ref.spec, ref.buffers);
  for (const auto& b : ref.buffers) ref_bytes += b.bytes.size();
  EXPECT_LT(stored_bytes(e), ref_bytes);
  // The rate search's count is the file's, in both profiles.
  EncodingInfo native_info;
  native_info.profile = StreamProfile::kNative;
  EXPECT_EQ(stored_bytes_as(tensor_, "blk.0.w", native_info), stored_bytes(e));
  EXPECT_EQ(stored_bytes_as(tensor_, "blk.0.w", EncodingInfo{}), ref_bytes);
  // A copy of the stream outlives the first StoredStream's other copies through its shared arrays.
  StoredStream kept = *s;
  s = make_error(ErrorCode::kInternal, "dropped");
  EXPECT_EQ(decode_f32(kept.stream), decode_f32(tensor_.view()));
}

TEST_F(NativeContainer, MalformedParamsAndBuffersAreNamed) {
  auto expect_bad = [&](const std::function<void(ContainerForm&)>& mutate, const std::string& what) {
    auto r = write(mutate);
    ASSERT_TRUE(r) << r.error().to_string();
    auto s = from_container(*r, r->tensors()[0]);
    ASSERT_FALSE(s) << what;
    EXPECT_EQ(s.error().code, ErrorCode::kBadInput);
    EXPECT_NE(s.error().message.find(path_), std::string::npos);
    EXPECT_NE(s.error().message.find(what), std::string::npos) << s.error().message;
  };
  auto set_param = [](const char* key, nlohmann::json v) {
    return [key, v](ContainerForm& f) {
      auto j = nlohmann::json::parse(f.spec.params_json);
      j[key] = v;
      f.spec.params_json = j.dump();
    };
  };
  expect_bad(set_param("profile", "fast"), "params.profile");
  expect_bad(set_param("count_bits", 40), "params.count_bits");
  expect_bad(set_param("scale_shift", "x"), "params.scale_shift");
  expect_bad(set_param("coset1_vectors", 1 << 20), "coset1_vectors");
  expect_bad(set_param("tiles", 99), "params.tiles");
  expect_bad([](ContainerForm& f) {
    auto j = nlohmann::json::parse(f.spec.params_json);
    j.erase("count_bits");
    f.spec.params_json = j.dump();
  }, "params.count_bits");
  expect_bad([](ContainerForm& f) { f.buffers.pop_back(); }, "buffers");
  expect_bad([](ContainerForm& f) { f.buffers[2].bytes = f.buffers[2].bytes.first(f.buffers[2].bytes.size() - 1); },
             "states");
}

}  // namespace
}  // namespace epk::rans
