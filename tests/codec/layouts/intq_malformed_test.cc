// Malformed intq entries: each row of the table breaks one field of a valid entry; the reader must refuse it with an
// error naming the file, the tensor and that field, and never crash (run under ASan+UBSan).
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "codec/layouts/intq_io.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::layouts {
namespace {

using nlohmann::json;

struct Mutation {
  const char* what;
  std::function<void(json&, intq::Encoded&)> apply;
  const char* field;  // must appear in the error
};

void drop_buffer(intq::Encoded& e, const std::string& name) {
  for (std::size_t i = 0; i < e.names.size(); ++i) {
    if (e.names[i] == name) {
      e.names.erase(e.names.begin() + static_cast<std::ptrdiff_t>(i));
      e.storage.erase(e.storage.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::vector<std::uint8_t>& storage_of(intq::Encoded& e, const std::string& name) {
  for (std::size_t i = 0; i < e.names.size(); ++i)
    if (e.names[i] == name) return e.storage[i];
  static std::vector<std::uint8_t> none;
  return none;
}

const std::vector<Mutation>& mutations() {
  static const std::vector<Mutation> m = {
      {"params not an object", [](json& j, intq::Encoded&) { j = json::array(); }, "params"},
      {"version 2", [](json& j, intq::Encoded&) { j["version"] = 2; }, "params.version"},
      {"unknown kind", [](json& j, intq::Encoded&) { j["kind"] = "fp8"; }, "params.kind"},
      {"bits 0", [](json& j, intq::Encoded&) { j["bits"] = 0; }, "params.bits"},
      {"bits 9", [](json& j, intq::Encoded&) { j["bits"] = 9; }, "params.bits"},
      {"bits a string", [](json& j, intq::Encoded&) { j["bits"] = "4"; }, "params.bits"},
      {"rows above padded", [](json& j, intq::Encoded&) { j["rows"] = 1000; }, "params.rows"},
      {"negative cols", [](json& j, intq::Encoded&) { j["cols"] = -1; }, "params.cols"},
      {"huge padded", [](json& j, intq::Encoded&) { j["padded_rows"] = std::int64_t{1} << 40; }, "params.padded_rows"},
      {"padded product overflow",
       [](json& j, intq::Encoded&) {
         j["padded_rows"] = std::int64_t{1} << 30;
         j["padded_cols"] = std::int64_t{1} << 30;
       },
       "params.padded_rows"},
      {"rows padding beyond a layout's",
       [](json& j, intq::Encoded&) { j["padded_rows"] = j["rows"].get<std::int64_t>() + 4097; }, "params.padded_rows"},
      {"cols padding beyond a layout's",
       [](json& j, intq::Encoded&) { j["padded_cols"] = j["cols"].get<std::int64_t>() + 4097; }, "params.padded_cols"},
      {"group size 0", [](json& j, intq::Encoded&) { j["group_size"] = 0; }, "params.group_size"},
      {"num_groups wrong", [](json& j, intq::Encoded&) { j["num_groups"] = 100; }, "params.num_groups"},
      {"scale dtype I32", [](json& j, intq::Encoded&) { j["scale_dtype"] = "I32"; }, "params.scale_dtype"},
      {"codes unknown", [](json& j, intq::Encoded&) { j["codes"] = "huffman"; }, "params.codes"},
      {"zeros unknown", [](json& j, intq::Encoded&) { j["zeros"] = "signed"; }, "params.zeros"},
      {"g_idx missing flag", [](json& j, intq::Encoded&) { j.erase("g_idx"); }, "params.g_idx"},
      {"source missing", [](json& j, intq::Encoded&) { j.erase("source"); }, "params.source"},
      {"shape vs params",
       [](json& j, intq::Encoded&) {
         j["cols"] = 9;
         j["padded_cols"] = 9;
       },
       "shape"},
      {"codes short", [](json&, intq::Encoded& e) { storage_of(e, "codes").pop_back(); }, "buffers.codes"},
      {"codes missing", [](json&, intq::Encoded& e) { drop_buffer(e, "codes"); }, "buffers.codes"},
      {"scales long", [](json&, intq::Encoded& e) { storage_of(e, "scales").push_back(0); }, "buffers.scales"},
      {"scale NaN", [](json&, intq::Encoded& e) { storage_of(e, "scales")[1] = 0x7E; }, "buffers.scales"},
      {"zeros missing", [](json&, intq::Encoded& e) { drop_buffer(e, "zeros"); }, "buffers.zeros"},
      {"zeros present though symmetric", [](json& j, intq::Encoded&) { j["zeros"] = "symmetric"; }, "buffers.zeros"},
      {"g_idx out of range", [](json&, intq::Encoded& e) { storage_of(e, "g_idx")[0] = 200; }, "buffers.g_idx"},
      {"g_idx negative", [](json&, intq::Encoded& e) { storage_of(e, "g_idx")[3] = 0x80; }, "buffers.g_idx"},
      {"g_idx flag without buffer", [](json&, intq::Encoded& e) { drop_buffer(e, "g_idx"); }, "buffers.g_idx"},
      {"perm repeats",
       [](json&, intq::Encoded& e) {
         auto& p = storage_of(e, "perm");
         std::copy(p.begin(), p.begin() + 4, p.begin() + 4);
       },
       "buffers.perm"},
      {"perm buffer without flag", [](json& j, intq::Encoded&) { j["perm"] = false; }, "buffers.perm"},
      {"unknown buffer",
       [](json&, intq::Encoded& e) {
         e.storage.push_back({1, 2, 3});
         e.names.push_back("extra");
       },
       "buffers.extra"},
      {"bits past the last code",
       [](json&, intq::Encoded& e) { storage_of(e, "codes").back() = 0xFF; },  // 3-bit stream ends mid-word
       "buffers.codes"},
  };
  return m;
}

// Writes `e` alone to a fresh file `dir_name`/bad.epk, opened into *file: read_int must refuse it with a message
// naming the file, the tensor and the field `m` breaks (a "params" row breaks the params as a whole: its message
// names the key instead).
void expect_refused(intq::Encoded e, const Mutation& m, const std::string& dir_name,
                    std::optional<container::Reader>* file) {
  std::vector<intq::Encoded> all;
  all.push_back(std::move(e));
  const auto dir = testing::scratch_dir(dir_name);
  auto r = testing::write_and_open((dir / "bad.epk").string(), all);
  ASSERT_TRUE(r) << r.error().message;
  file->emplace(std::move(*r));
  auto back = intq::read_int(**file, (*file)->tensors()[0]);
  ASSERT_FALSE(back) << m.what;
  const std::string& msg = back.error().message;
  EXPECT_NE(msg.find("bad.epk"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'bad.weight'"), std::string::npos) << msg;
  if (std::string_view(m.field) != "params") {
    EXPECT_NE(msg.find(m.field), std::string::npos) << m.what << ": " << msg;
  }
}

class IntqMalformed : public ::testing::TestWithParam<std::size_t> {};

TEST_P(IntqMalformed, RefusedNamingTheField) {
  const Mutation& m = mutations()[GetParam()];
  // 3-bit, 37 x 5, act-order, asymmetric, with a perm: every optional buffer is present.
  QuantTensor t = testing::random_intq_tensor(3, 37, 5, 16, false, true, true, 21);
  auto e = intq::encode_int(t, "bad.weight", DType::kF16, "gptq");
  ASSERT_TRUE(e);
  json j = json::parse(e->spec.params_json);
  m.apply(j, *e);
  e->spec.params_json = j.is_object() ? j.dump() : std::string("{}");
  if (!j.is_object()) e->spec.params_json = "{\"version\":1,\"x\":[]}";
  std::optional<container::Reader> r;
  ASSERT_NO_FATAL_FAILURE(expect_refused(std::move(*e), m, "bad" + std::to_string(GetParam()), &r));
  std::vector<std::uint8_t> dst(37 * 5 * 4);
  EXPECT_FALSE(intq::dequantize_intq(*r, r->tensors()[0], DType::kF32, dst)) << m.what;
}

INSTANTIATE_TEST_SUITE_P(Table, IntqMalformed, ::testing::Range<std::size_t>(0, 33));

// rANS-coded codes (FORMAT.md 11.5): the same rule, for the fields that form adds.
const std::vector<Mutation>& rans_mutations() {
  static const std::vector<Mutation> m = {
      {"packed params over a rans stream", [](json& j, intq::Encoded&) { j["codes"] = "packed"; }, "buffers.code"},
      {"prob bits 16", [](json& j, intq::Encoded&) { j["code_prob_bits"] = 16; }, "params.code_prob_bits"},
      {"prob bits missing", [](json& j, intq::Encoded&) { j.erase("code_prob_bits"); }, "params.code_prob_bits"},
      {"tile symbols 0", [](json& j, intq::Encoded&) { j["code_tile_symbols"] = 0; }, "params.code_tile_symbols"},
      {"tile symbols changed", [](json& j, intq::Encoded&) { j["code_tile_symbols"] = 7; }, "buffers.codes"},
      {"freqs missing", [](json&, intq::Encoded& e) { drop_buffer(e, "code_freqs"); }, "buffers.code_freqs"},
      {"freqs short", [](json&, intq::Encoded& e) { storage_of(e, "code_freqs").resize(14); }, "freqs"},
      {"freqs sum", [](json&, intq::Encoded& e) { storage_of(e, "code_freqs")[0] ^= 1; }, "freqs"},
      {"tiles missing", [](json&, intq::Encoded& e) { drop_buffer(e, "code_tiles"); }, "buffers.code_tiles"},
      {"tiles long", [](json&, intq::Encoded& e) { storage_of(e, "code_tiles").push_back(0); }, "tiles"},
      {"payload truncated", [](json&, intq::Encoded& e) { storage_of(e, "codes").pop_back(); }, "buffers.codes"},
      {"final state",
       [](json&, intq::Encoded& e) {
         auto& p = storage_of(e, "codes");
         p[p.size() / 2] ^= 0x10;
       },
       "tile"},
  };
  return m;
}

class IntqMalformedRans : public ::testing::TestWithParam<std::size_t> {};

TEST_P(IntqMalformedRans, RefusedNamingTheField) {
  const Mutation& m = rans_mutations()[GetParam()];
  QuantTensor t = testing::random_intq_tensor(3, 37, 5, 16, false, true, true, 21);
  auto e = intq::encode_int(t, "bad.weight", DType::kF16, "gptq", intq::CodeForm::kRans);
  ASSERT_TRUE(e);
  json j = json::parse(e->spec.params_json);
  ASSERT_EQ(j["codes"], "rans");
  m.apply(j, *e);
  e->spec.params_json = j.dump();
  std::optional<container::Reader> r;
  expect_refused(std::move(*e), m, "badrans" + std::to_string(GetParam()), &r);
}

INSTANTIATE_TEST_SUITE_P(Table, IntqMalformedRans, ::testing::Range<std::size_t>(0, 12));

TEST(IntqMalformedTable, CoversEveryRansRow) { EXPECT_EQ(rans_mutations().size(), 12u); }

TEST(IntqMalformedTable, CoversEveryRow) { EXPECT_EQ(mutations().size(), 33u); }

}  // namespace
}  // namespace epk::layouts
