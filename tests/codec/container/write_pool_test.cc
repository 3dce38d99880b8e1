// Reserved places and the write pool: a file written through Writer::reserve_tensor / fill_tensor in any fill
// order, or through WritePool's threads, is byte for byte the file add_tensor writes in the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "codec/container/reader.h"
#include "codec/container/write_pool.h"
#include "codec/container/writer.h"
#include "tests/codec/container/test_util.h"

namespace epk::container {
namespace {

using testing::fresh_dir;
using testing::random_bytes;
using testing::slurp;

struct Tensor {
  TensorSpec spec;
  std::vector<std::string> names;
  std::vector<std::vector<std::uint8_t>> data;

  std::vector<BufferData> buffers() const {
    std::vector<BufferData> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], data[i]});
    return out;
  }
  std::vector<BufferShape> shapes() const { return buffer_shapes(buffers()); }
};

// Raw tensors of odd sizes (1 byte up to past the 1 MiB section threshold, where sections align to 4096) and
// multi-buffer lattice-rans-shaped ones, on a fixed seed.
std::vector<Tensor> make_tensors(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < n; ++i) {
    Tensor t;
    t.spec.name = "t" + std::to_string(i);
    if (i % 3 == 2) {
      t.spec.shape = {std::uint64_t(1 + rng() % 64), 8};
      t.spec.dtype = DType::kBF16;
      t.spec.encoding = Encoding::kLatticeRans;
      t.spec.params_json = "{\"k\":" + std::to_string(i) + "}";
      for (int b = 0; b < 3; ++b) {
        t.names.push_back("b" + std::to_string(b));
        t.data.push_back(random_bytes(1 + rng() % 5000, seed + 1000 * std::uint32_t(i) + std::uint32_t(b)));
      }
    } else {
      const std::uint64_t count = i == 4 ? (1u << 20) + 3 : 1 + rng() % 70000;
      t.spec.shape = {count};
      t.spec.dtype = DType::kU8;
      t.names.push_back("data");
      t.data.push_back(random_bytes(count, seed + 7 * std::uint32_t(i)));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::uint8_t> sequential_file(const std::filesystem::path& dir, const std::vector<Tensor>& ts) {
  auto w = Writer::create((dir / "seq.epk").string(), {{"k", "v"}});
  EXPECT_TRUE(w) << w.error().message;
  for (const auto& t : ts) {
    auto bufs = t.buffers();
    EXPECT_TRUE(w->add_tensor(t.spec, bufs));
  }
  EXPECT_TRUE(w->finish());
  return slurp(dir / "seq.epk");
}

TEST(Reservations, FilledInReverseOrderGiveTheSequentialFile) {
  const auto dir = fresh_dir("reserve_reverse");
  const auto ts = make_tensors(13, 11);
  const auto want = sequential_file(dir, ts);
  auto w = Writer::create((dir / "res.epk").string(), {{"k", "v"}});
  ASSERT_TRUE(w);
  std::vector<Writer::Reservation> places;
  for (const auto& t : ts) {
    auto shapes = t.shapes();
    auto r = w->reserve_tensor(t.spec, shapes);
    ASSERT_TRUE(r) << r.error().message;
    places.push_back(*r);
  }
  for (std::size_t i = ts.size(); i-- > 0;) {
    auto bufs = ts[i].buffers();
    ASSERT_TRUE(w->fill_tensor(places[i], bufs));
  }
  ASSERT_TRUE(w->finish());
  const auto got = slurp(dir / "res.epk");
  EXPECT_EQ(got, want);
  auto r = Reader::open((dir / "res.epk").string());
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->verify_all());
}

TEST(Reservations, FinishBeforeEveryFillIsRefused) {
  const auto dir = fresh_dir("reserve_unfilled");
  const auto ts = make_tensors(2, 3);
  auto w = Writer::create((dir / "f.epk").string(), {});
  ASSERT_TRUE(w);
  auto s0 = ts[0].shapes(), s1 = ts[1].shapes();
  auto r0 = w->reserve_tensor(ts[0].spec, s0);
  auto r1 = w->reserve_tensor(ts[1].spec, s1);
  ASSERT_TRUE(r0 && r1);
  auto b0 = ts[0].buffers();
  ASSERT_TRUE(w->fill_tensor(*r0, b0));
  auto st = w->finish();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInternal);
  EXPECT_FALSE(std::filesystem::exists(dir / "f.epk"));
}

TEST(Reservations, AFillUnlikeItsReservationIsRefused) {
  const auto dir = fresh_dir("reserve_mismatch");
  const auto ts = make_tensors(3, 5);
  auto w = Writer::create((dir / "m.epk").string(), {});
  ASSERT_TRUE(w);
  auto shapes = ts[2].shapes();  // three buffers
  auto r = w->reserve_tensor(ts[2].spec, shapes);
  ASSERT_TRUE(r);
  auto bufs = ts[2].buffers();
  bufs[1].bytes = bufs[1].bytes.first(bufs[1].bytes.size() - 1);
  auto st = w->fill_tensor(*r, bufs);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInternal);
  EXPECT_NE(st.error().message.find("'b1'"), std::string::npos) << st.error().message;
}

TEST(Reservations, ABadSpecIsRefusedAsAddTensorRefusesIt) {
  const auto dir = fresh_dir("reserve_bad");
  auto w = Writer::create((dir / "b.epk").string(), {});
  ASSERT_TRUE(w);
  TensorSpec spec{"x", {10}, DType::kU8, Encoding::kRaw, "{}"};
  std::vector<BufferShape> wrong{{"data", 9}};
  auto r = w->reserve_tensor(spec, wrong);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("10"), std::string::npos) << r.error().message;
  std::vector<std::uint8_t> ten(10, 7);
  EXPECT_TRUE(w->add_tensor(spec, {BufferData{"data", ten}}));  // still usable
  EXPECT_TRUE(w->finish());
}

TEST(WritePool, ManyThreadsGiveTheSequentialFileAndReleaseWhatTheyKeep) {
  const auto dir = fresh_dir("pool");
  auto ts = make_tensors(40, 29);
  const auto want = sequential_file(dir, ts);
  for (int threads : {1, 4}) {
    auto w = Writer::create((dir / "pool.epk").string(), {{"k", "v"}});
    ASSERT_TRUE(w);
    std::vector<std::weak_ptr<const void>> kept;
    {
      WritePool pool(*w, threads, 3);
      for (auto& t : ts) {
        // Each job owns a copy of its bytes, as compress's encoded tensors are owned by their job.
        auto copy = std::make_shared<std::vector<std::vector<std::uint8_t>>>(t.data);
        std::vector<BufferData> bufs;
        for (std::size_t i = 0; i < t.names.size(); ++i) bufs.push_back({t.names[i], (*copy)[i]});
        kept.push_back(copy);
        ASSERT_TRUE(pool.add(t.spec, std::move(bufs), std::move(copy)));
      }
      ASSERT_TRUE(pool.finish());
    }
    for (const auto& k : kept) EXPECT_TRUE(k.expired());
    EXPECT_EQ(slurp(dir / "pool.epk"), want) << threads << " threads";
  }
}

TEST(WritePool, ABadTensorIsRefusedAtAddAndTheRestIsWritten) {
  const auto dir = fresh_dir("pool_bad");
  const auto ts = make_tensors(5, 2);
  const auto want = sequential_file(dir, ts);
  auto w = Writer::create((dir / "pb.epk").string(), {{"k", "v"}});
  ASSERT_TRUE(w);
  WritePool pool(*w, 2, 2);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    ASSERT_TRUE(pool.add(ts[i].spec, ts[i].buffers(), nullptr));
    if (i == 1) {
      auto dup = pool.add(ts[0].spec, ts[0].buffers(), nullptr);  // a name already added
      ASSERT_FALSE(dup);
      EXPECT_EQ(dup.error().code, ErrorCode::kInvalidArgument);
    }
  }
  ASSERT_TRUE(pool.finish());
  EXPECT_EQ(slurp(dir / "pb.epk"), want);
}

}  // namespace
}  // namespace epk::container
