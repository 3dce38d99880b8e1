// Round trips through Writer and Reader, alignment and padding, and crash safety of the writer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "tests/codec/container/test_util.h"

namespace epk::container {
namespace {

using testing::fresh_dir;
using testing::random_bytes;

std::uint64_t raw_bytes(const std::vector<std::uint64_t>& shape, DType t) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  std::uint64_t bits = n * static_cast<std::uint64_t>(dtype_bits(t));
  return (bits + 7) / 8;
}

struct Expected {
  TensorSpec spec;
  std::vector<std::string> names;
  std::vector<std::vector<std::uint8_t>> data;
};

Status add(Writer& w, const Expected& e) {
  std::vector<BufferData> bufs;
  for (std::size_t i = 0; i < e.names.size(); ++i) bufs.push_back({e.names[i], e.data[i]});
  return w.add_tensor(e.spec, bufs);
}

void expect_same(const Reader& r, const Expected& e) {
  const TensorEntry* t = r.find(e.spec.name);
  ASSERT_NE(t, nullptr) << e.spec.name;
  EXPECT_EQ(t->shape, e.spec.shape);
  EXPECT_EQ(t->dtype, e.spec.dtype);
  EXPECT_EQ(t->encoding, e.spec.encoding);
  EXPECT_EQ(t->params_json, e.spec.params_json.empty() ? "{}" : e.spec.params_json);
  ASSERT_EQ(t->buffers.size(), e.names.size());
  for (std::size_t i = 0; i < e.names.size(); ++i) {
    EXPECT_EQ(t->buffers[i].name, e.names[i]);
    EXPECT_EQ(t->buffers[i].offset % kBufferAlign, 0u);
    EXPECT_GE(t->buffers[i].offset, t->section_offset);
    auto bytes = r.buffer(*t, i);
    ASSERT_EQ(bytes.size(), e.data[i].size());
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), e.data[i].begin())) << e.spec.name << " buffer " << i;
    auto by_name = r.buffer(*t, e.names[i]);
    ASSERT_TRUE(by_name);
    EXPECT_EQ(by_name->data(), bytes.data());
  }
  EXPECT_EQ(t->section_offset % section_alignment(t->section_size), 0u);
  EXPECT_TRUE(r.verify(*t)) << e.spec.name;
}

TEST(ContainerRoundTrip, ManyTensorsOfEveryEncoding) {
  auto dir = fresh_dir("many");
  auto path = (dir / "m.epk").string();
  std::mt19937 rng(1234);
  std::vector<Expected> all;
  for (int i = 0; i < 301; ++i) {
    Expected e;
    e.spec.name = "model.layers." + std::to_string(i / 7) + ".w" + std::to_string(i % 7);
    e.spec.dtype = static_cast<DType>(rng() % kDTypeCount);
    int rank = static_cast<int>(rng() % 4);
    for (int d = 0; d < rank; ++d) e.spec.shape.push_back(1 + rng() % 37);
    if (i % 3 == 0) {
      e.spec.encoding = Encoding::kRaw;
      e.names = {"data"};
      e.data = {random_bytes(raw_bytes(e.spec.shape, e.spec.dtype), static_cast<std::uint32_t>(i))};
    } else {
      e.spec.encoding = i % 3 == 1 ? Encoding::kLatticeRans : Encoding::kIntq;
      if (e.spec.encoding == Encoding::kLatticeRans) e.spec.shape = {std::uint64_t(1 + rank), std::uint64_t(1 + i % 37)};
      e.spec.params_json = R"({"bits":)" + std::to_string(2 + i % 6) + "}";
      int nb = static_cast<int>(rng() % 6);
      for (int b = 0; b < nb; ++b) {
        e.names.push_back("buf" + std::to_string(b));
        e.data.push_back(random_bytes(rng() % 300, static_cast<std::uint32_t>(i * 16 + b)));
      }
    }
    all.push_back(std::move(e));
  }
  {
    auto w = Writer::create(path, {{"source", "synthetic"}, {"tool_version", "test"}});
    ASSERT_TRUE(w) << w.error().to_string();
    for (const auto& e : all) ASSERT_TRUE(add(*w, e)) << e.spec.name;
    EXPECT_EQ(w->tensor_count(), all.size());
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->tensors().size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(r->tensors()[i].name, all[i].spec.name);  // write order
  for (const auto& e : all) expect_same(*r, e);
  EXPECT_TRUE(r->verify_all());
  EXPECT_EQ(r->find("model.layers.0.w"), nullptr);
  EXPECT_EQ(r->find(""), nullptr);
  EXPECT_EQ(r->find("zzz"), nullptr);
  EXPECT_EQ(r->file_size(), std::filesystem::file_size(path));
  EXPECT_EQ(r->path(), path);
  std::filesystem::remove_all(dir);
}

TEST(ContainerRoundTrip, EmptyScalarAndBufferlessTensors) {
  auto dir = fresh_dir("edge");
  auto path = (dir / "e.epk").string();
  Expected empty{{"empty", {0, 7}, DType::kBF16, Encoding::kRaw, ""}, {"data"}, {{}}};
  Expected scalar{{"scalar", {}, DType::kF64, Encoding::kRaw, "{}"}, {"data"}, {random_bytes(8, 5)}};
  Expected f4{{"f4.odd", {3}, DType::kF4, Encoding::kRaw, "{}"}, {"data"}, {random_bytes(2, 6)}};  // 12 bits -> 2 bytes
  Expected none{{"nobuffers", {4, 4}, DType::kF16, Encoding::kIntq, R"({"group_size":128})"}, {}, {}};
  Expected empty_bufs{{"emptybufs", {1, 2}, DType::kF32, Encoding::kLatticeRans, "{}"}, {"a", "b"}, {{}, {}}};
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    for (const auto* e : {&empty, &scalar, &f4, &none, &empty_bufs}) ASSERT_TRUE(add(*w, *e)) << e->spec.name;
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  for (const auto* e : {&empty, &scalar, &f4, &none, &empty_bufs}) expect_same(*r, *e);
  EXPECT_EQ(r->find("scalar")->element_count(), 1u);
  EXPECT_EQ(r->find("empty")->element_count(), 0u);
  EXPECT_EQ(r->find("empty")->section_size, 0u);
  EXPECT_EQ(r->find("nobuffers")->section_size, 0u);
  EXPECT_TRUE(r->metadata().empty());
  std::filesystem::remove_all(dir);
}

TEST(ContainerRoundTrip, EmptyFileHasNoTensors) {
  auto dir = fresh_dir("nothing");
  auto path = (dir / "n.epk").string();
  {
    auto w = Writer::create(path, {{"k", "v"}});
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->tensors().empty());
  EXPECT_EQ(r->metadata().at("k"), "v");
  EXPECT_TRUE(r->verify_all());
  std::filesystem::remove_all(dir);
}

TEST(ContainerRoundTrip, LargeSectionsStartAt4096SmallAt64) {
  auto dir = fresh_dir("align");
  auto path = (dir / "a.epk").string();
  Expected tiny{{"tiny", {3}, DType::kU8, Encoding::kRaw, "{}"}, {"data"}, {random_bytes(3, 1)}};
  Expected below{{"below", {kLargeSectionThreshold - 1}, DType::kU8, Encoding::kRaw, "{}"},
                 {"data"},
                 {random_bytes(kLargeSectionThreshold - 1, 2)}};
  Expected tiny2{{"tiny2", {1}, DType::kU8, Encoding::kRaw, "{}"}, {"data"}, {random_bytes(1, 3)}};
  Expected at{{"at", {kLargeSectionThreshold}, DType::kU8, Encoding::kRaw, "{}"},
              {"data"},
              {random_bytes(kLargeSectionThreshold, 4)}};
  // Buffers of 524289 and 524287 bytes: the 64-byte gap between them pushes the section over 1 MiB.
  Expected crossing{{"crossing", {1, 8}, DType::kBF16, Encoding::kLatticeRans, "{}"},
                    {"payload", "offsets"},
                    {random_bytes(524289, 5), random_bytes(524287, 6)}};
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    for (const auto* e : {&tiny, &below, &tiny2, &at, &crossing}) ASSERT_TRUE(add(*w, *e));
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  for (const auto* e : {&tiny, &below, &tiny2, &at, &crossing}) expect_same(*r, *e);
  EXPECT_EQ(r->find("tiny")->section_offset, kHeaderSize);  // packed right after the header
  EXPECT_EQ(r->find("below")->section_offset, kHeaderSize + 64);
  EXPECT_NE(r->find("tiny2")->section_offset % 4096, 0u);  // small sections are not pushed to a page
  EXPECT_EQ(r->find("at")->section_offset % 4096, 0u);
  const auto* c = r->find("crossing");
  EXPECT_EQ(c->section_size, 524352u + 524287u);
  EXPECT_EQ(c->section_offset % 4096, 0u);
  EXPECT_EQ(c->buffers[1].offset - c->section_offset, 524352u);
  std::filesystem::remove_all(dir);
}

// The writer hashes in 4 MiB chunks while writing; the stored checksum must equal the one-shot XXH3-64.
TEST(ContainerRoundTrip, ChunkedHashEqualsOneShot) {
  auto dir = fresh_dir("chunks");
  auto path = (dir / "c.epk").string();
  auto data = random_bytes((9u << 20) + 5, 11);
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->add_tensor({"w", {data.size()}, DType::kU8, Encoding::kRaw, "{}"}, {{"data", data}}));
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->tensors()[0].buffers[0].xxh3, xxh3_64(data));
  auto bytes = r->buffer(r->tensors()[0], 0);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data.begin(), data.end()));
  std::filesystem::remove_all(dir);
}

TEST(ContainerRoundTrip, MetadataSurvivesWithUtf8AndLongValues) {
  auto dir = fresh_dir("meta");
  auto path = (dir / "m.epk").string();
  std::map<std::string, std::string> meta = {
      {"source", "/models/Llama-3-8B/model-00001-of-00004.safetensors"},
      {"tool_version", "epk 0.1.0"},
      {"settings", R"({"bpp":4.0,"tile_symbols":4096})"},
      {"caf\xC3\xA9", std::string(100000, 'x')},
      {"\xC3\xA9t\xC3\xA9", "sorts after ASCII keys: keys compare as unsigned bytes"},
      {"empty", ""}};
  {
    auto w = Writer::create(path, meta);
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->metadata(), meta);
  std::filesystem::remove_all(dir);
}

TEST(ContainerRoundTrip, MissingBufferNameIsNotFound) {
  auto dir = fresh_dir("bufname");
  auto path = (dir / "b.epk").string();
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    auto data = random_bytes(40, 9);
    ASSERT_TRUE(w->add_tensor({"w", {10}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", data}}));
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r);
  auto missing = r->buffer(r->tensors()[0], "scales");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find(path), std::string::npos);
  EXPECT_NE(missing.error().message.find("scales"), std::string::npos);
  EXPECT_TRUE(r->buffer(r->tensors()[0], 1).empty());  // index past the buffers: empty, not a crash
  Reader moved = std::move(*r);
  EXPECT_EQ(moved.tensors().size(), 1u);
  EXPECT_TRUE(moved.verify_all());
  std::filesystem::remove_all(dir);
}

// A realistic mix: 200 small tensors of about 1 KB (norms, biases) beside a few MB-sized matrices.
TEST(ContainerPadding, UnderOnePercentForRealisticMix) {
  auto dir = fresh_dir("padding");
  auto path = (dir / "p.epk").string();
  std::uint64_t payload = 0;
  {
    auto w = Writer::create(path, {{"source", "mix"}});
    ASSERT_TRUE(w);
    auto small = random_bytes(1100, 7);
    auto large = random_bytes(3 * 1000 * 1000 + 17, 8);
    for (int i = 0; i < 200; ++i) {
      std::uint64_t n = 1000 + static_cast<std::uint64_t>(i % 13) * 7;  // odd sizes
      ASSERT_TRUE(w->add_tensor({"norm." + std::to_string(i), {n}, DType::kU8, Encoding::kRaw, "{}"},
                                {{"data", std::span<const std::uint8_t>(small).first(n)}}));
      payload += n;
      if (i % 50 == 25) {  // 4 large tensors spread among the small ones
        std::uint64_t m = large.size() - static_cast<std::uint64_t>(i);
        ASSERT_TRUE(w->add_tensor({"proj." + std::to_string(i), {m}, DType::kU8, Encoding::kRaw, "{}"},
                                  {{"data", std::span<const std::uint8_t>(large).first(m)}}));
        payload += m;
      }
    }
    ASSERT_TRUE(w->finish());
  }
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  std::uint64_t buffers = 0;
  for (const auto& t : r->tensors())
    for (const auto& b : t.buffers) buffers += b.size;
  EXPECT_EQ(buffers, payload);
  double share = static_cast<double>(r->padding_bytes()) / static_cast<double>(r->file_size());
  std::printf("padding %llu of %llu bytes (%.4f%%)\n", static_cast<unsigned long long>(r->padding_bytes()),
              static_cast<unsigned long long>(r->file_size()), share * 100);
  EXPECT_GT(r->padding_bytes(), 0u);
  EXPECT_LT(share, 0.01);
  std::filesystem::remove_all(dir);
}

TEST(ContainerWriter, DestroyedWithoutFinishLeavesNothing) {
  auto dir = fresh_dir("crash");
  auto path = (dir / "c.epk").string();
  {
    auto w = Writer::create(path, {{"source", "x"}});
    ASSERT_TRUE(w);
    auto data = random_bytes(4096, 1);
    ASSERT_TRUE(w->add_tensor({"w", {1024}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", data}}));
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_EQ(testing::file_count(dir), 1u);  // the temporary file
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(testing::file_count(dir), 0u);
  std::filesystem::remove_all(dir);
}

// A process killed while writing (here: _exit without destructors) leaves only its temporary file, never the final
// name.
TEST(ContainerWriter, ProcessDyingMidWriteLeavesNoFinalFile) {
  auto dir = fresh_dir("die");
  auto path = (dir / "d.epk").string();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = Writer::create(path, {});
    if (!w) ::_exit(2);
    auto data = random_bytes(100000, 2);
    if (!w->add_tensor({"w", {data.size()}, DType::kU8, Encoding::kRaw, "{}"}, {{"data", data}})) ::_exit(3);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_EQ(testing::file_count(dir), 1u);
  auto leftover = std::filesystem::directory_iterator(dir)->path().filename().string();
  EXPECT_EQ(leftover.rfind("d.epk.tmp.", 0), 0u) << leftover;
  std::filesystem::remove_all(dir);
}

TEST(ContainerWriter, MoveAssignAbandonsTheOverwrittenWriter) {
  auto dir = fresh_dir("moveassign");
  auto a = Writer::create((dir / "a.epk").string(), {});
  auto b = Writer::create((dir / "b.epk").string(), {});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(testing::file_count(dir), 2u);
  *a = std::move(*b);  // a's temporary file goes
  EXPECT_EQ(testing::file_count(dir), 1u);
  EXPECT_FALSE(b->finish());  // moved from: refused, no crash
  ASSERT_TRUE(a->finish());
  EXPECT_TRUE(std::filesystem::exists(dir / "b.epk"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a.epk"));
  std::filesystem::remove_all(dir);
}

TEST(ContainerWriter, ExistingFileIsReplacedOnlyAtFinish) {
  auto dir = fresh_dir("replace");
  auto path = (dir / "r.epk").string();
  testing::spit(path, {1, 2, 3});
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    EXPECT_EQ(testing::slurp(path).size(), 3u);
  }
  EXPECT_EQ(testing::slurp(path).size(), 3u);  // abandoned: the old file stands
  auto w = Writer::create(path, {});
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->finish());
  EXPECT_TRUE(Reader::open(path));
  std::filesystem::remove_all(dir);
}

// An I/O error in the middle of a tensor (the file-size limit, EFBIG) fails the writer for good; nothing appears.
TEST(ContainerWriter, WriteErrorAbandonsTheFile) {
  auto dir = fresh_dir("efbig");
  auto path = (dir / "e.epk").string();
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    struct rlimit lim = old;
    lim.rlim_cur = 1 << 20;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    auto data = random_bytes(2 << 20, 12);
    auto s = w->add_tensor({"w", {data.size()}, DType::kU8, Encoding::kRaw, "{}"}, {{"data", data}});
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kIo) << s.error().to_string();
    auto small = random_bytes(4, 13);
    auto again = w->add_tensor({"v", {4}, DType::kU8, Encoding::kRaw, "{}"}, {{"data", small}});
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, ErrorCode::kIo);
    EXPECT_FALSE(w->finish());
  }
  ::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(testing::file_count(dir), 0u);
  std::filesystem::remove_all(dir);
}

// A checkpoint-sized index: every name found, and the time open() takes to validate it.
TEST(ContainerRoundTrip, TwentyThousandTensorsIndex) {
  auto dir = fresh_dir("bigindex");
  auto path = (dir / "i.epk").string();
  constexpr int kTensors = 20000;
  auto data = random_bytes(96, 14);
  {
    auto w = Writer::create(path, {});
    ASSERT_TRUE(w);
    for (int i = 0; i < kTensors; ++i) {
      auto n = static_cast<std::size_t>(1 + i % 96);
      ASSERT_TRUE(
          w->add_tensor({"model.layers." + std::to_string(i) + ".weight", {n}, DType::kU8, Encoding::kRaw, "{}"},
                        {{"data", std::span<const std::uint8_t>(data).first(n)}}));
    }
    ASSERT_TRUE(w->finish());
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = Reader::open(path);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(r) << r.error().to_string();
  std::printf("open() of %d tensors, %llu-byte file: %.2f ms\n", kTensors,
              static_cast<unsigned long long>(r->file_size()),
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  ASSERT_EQ(r->tensors().size(), static_cast<std::size_t>(kTensors));
  for (int i = 0; i < kTensors; ++i) {
    const auto* t = r->find("model.layers." + std::to_string(i) + ".weight");
    ASSERT_NE(t, nullptr) << i;
    EXPECT_EQ(t, &r->tensors()[static_cast<std::size_t>(i)]);
  }
  EXPECT_TRUE(r->verify_all());
  std::filesystem::remove_all(dir);
}

struct BadSpec {
  const char* what;
  TensorSpec spec;
  std::vector<BufferData> buffers;
};

TEST(ContainerWriter, RefusesWhatAReaderWouldRefuseAndStaysUsable) {
  auto dir = fresh_dir("refuse");
  auto path = (dir / "f.epk").string();
  auto w = Writer::create(path, {});
  ASSERT_TRUE(w);
  auto data = random_bytes(64, 3);
  std::span<const std::uint8_t> d16 = std::span<const std::uint8_t>(data).first(16);
  ASSERT_TRUE(w->add_tensor({"w", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}));
  const std::uint64_t written = w->bytes_written();
  std::vector<BadSpec> bad = {
      {"duplicate name", {"w", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}},
      {"empty name", {"", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}},
      {"name not UTF-8", {"\xFF", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}},
      {"rank 9", {"r", {1, 1, 1, 1, 1, 1, 1, 1, 4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}},
      {"shape overflow", {"o", {1ull << 32, 1ull << 32}, DType::kF32, Encoding::kLatticeRans, "{}"}, {}},
      {"bit overflow", {"o", {1ull << 62}, DType::kF32, Encoding::kLatticeRans, "{}"}, {}},
      {"lattice cols 2^32", {"c", {1, 1ull << 32}, DType::kF32, Encoding::kLatticeRans, "{}"}, {}},
      {"lattice rank 1", {"c", {16}, DType::kF32, Encoding::kLatticeRans, "{}"}, {}},
      {"unknown dtype", {"d", {4}, static_cast<DType>(99), Encoding::kIntq, "{}"}, {}},
      {"unknown encoding", {"e", {4}, DType::kF32, static_cast<Encoding>(9), "{}"}, {}},
      {"raw size", {"s", {5}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}},
      {"raw name", {"n", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"payload", d16}}},
      {"raw two buffers", {"t", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}, {"x", d16}}},
      {"params not JSON", {"p", {4}, DType::kF32, Encoding::kIntq, "{bits:4"}, {}},
      {"params not object", {"p", {4}, DType::kF32, Encoding::kIntq, "[4]"}, {}},
      {"duplicate buffer", {"b", {4}, DType::kF32, Encoding::kIntq, "{}"}, {{"codes", d16}, {"codes", d16}}},
      {"empty buffer name", {"b", {4}, DType::kF32, Encoding::kIntq, "{}"}, {{"", d16}}},
  };
  for (const auto& b : bad) {
    auto s = w->add_tensor(b.spec, b.buffers);
    ASSERT_FALSE(s) << b.what;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << b.what;
    EXPECT_NE(s.error().message.find(path), std::string::npos) << b.what << ": " << s.error().message;
    EXPECT_EQ(w->bytes_written(), written) << b.what;
  }
  std::vector<BufferData> many(kMaxBuffers + 1);
  for (std::size_t i = 0; i < many.size(); ++i) many[i].name = "b" + std::to_string(i);
  EXPECT_FALSE(w->add_tensor({"many", {1}, DType::kU8, Encoding::kIntq, "{}"}, many));
  ASSERT_TRUE(w->finish());
  EXPECT_FALSE(w->finish());  // once only
  EXPECT_FALSE(w->add_tensor({"late", {4}, DType::kF32, Encoding::kRaw, "{}"}, {{"data", d16}}));
  auto r = Reader::open(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->tensors().size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(ContainerWriter, RefusesBadMetadataAndUnwritableDirectory) {
  auto dir = fresh_dir("badmeta");
  auto e1 = Writer::create((dir / "a.epk").string(), {{"", "v"}});
  ASSERT_FALSE(e1);
  EXPECT_EQ(e1.error().code, ErrorCode::kInvalidArgument);
  auto e2 = Writer::create((dir / "a.epk").string(), {{"k", "\xC3"}});
  ASSERT_FALSE(e2);
  EXPECT_EQ(e2.error().code, ErrorCode::kInvalidArgument);
  auto e3 = Writer::create((dir / "missing" / "a.epk").string(), {});
  ASSERT_FALSE(e3);
  EXPECT_EQ(e3.error().code, ErrorCode::kIo);
  EXPECT_EQ(testing::file_count(dir), 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace epk::container
