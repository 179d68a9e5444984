#include "engine/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

namespace quartet::engine {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, under gtest's temp dir.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("quartet_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string f32_le(std::vector<float> values) {
  std::string s(values.size() * 4, '\0');
  std::memcpy(s.data(), values.data(), s.size());  // the tests run on little-endian hosts
  return s;
}

// Length prefix + header (space-padded to 8 as the Python writer does) + data.
std::string safetensors_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

// Writes a file with one tensor entry `entry` (the JSON object) named "t" and `data`.
std::string one_entry_file(const std::string& entry, const std::string& data) {
  return safetensors_bytes(R"({"t":)" + entry + "}", data);
}

template <class Fn>
std::string thrown_message(Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

std::vector<float> iota(int64_t n, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = start++;
  return v;
}

TEST_F(Safetensors, RoundTripKeepsNamesShapesAndValues) {
  NamedTensors saved{
      {"conv.weight", Tensor::from_vector({2, 1, 2, 2}, iota(8, 0.5f))},
      {"scalar", Tensor::from_vector({1}, {-3.25f})},
      {"volume", Tensor::from_vector({1, 2, 1, 2, 3}, iota(12, -6.0f))},
      {"empty", Tensor::empty({0, 4})},
      {"fc.bias", Tensor::from_vector({3}, {1e-30f, 3.4e38f, -0.0f})},
  };
  save_safetensors(path("w.safetensors"), saved);
  NamedTensors loaded = load_safetensors(path("w.safetensors"));
  ASSERT_EQ(loaded.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(loaded[i].first, saved[i].first);
    EXPECT_EQ(loaded[i].second.shape(), saved[i].second.shape()) << saved[i].first;
    EXPECT_EQ(loaded[i].second.to_vector(), saved[i].second.to_vector()) << saved[i].first;
  }
}

TEST_F(Safetensors, MetadataRoundTrips) {
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"arm", "ddp-4"}, {"note", "héllo \"q\""}};
  save_safetensors(path("m.safetensors"), {{"w", Tensor::from_vector({2}, {1, 2})}}, meta);
  SafetensorsFile f = read_safetensors(path("m.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "w");
}

TEST_F(Safetensors, SavedDataStartsEightByteAlignedAfterSpacePadding) {
  save_safetensors(path("a.safetensors"), {{"abc", Tensor::from_vector({3}, {1, 2, 3})}});
  const std::string bytes = read_bytes(path("a.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_EQ(bytes.size(), 8 + n + 12);
  EXPECT_EQ(bytes.substr(8 + n), f32_le({1, 2, 3}));
}

TEST_F(Safetensors, LoadsAFileWrittenAsPyTorchWritesIt) {
  // As safetensors.torch.save_file writes it: keys sorted, format metadata, data laid
  // out in an order of its own (here bias before weight), space padding.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})";
  write_bytes(path("pt.safetensors"),
              safetensors_bytes(header, f32_le({0.5f, -0.5f}) + f32_le({1, 2, 3, 4, 5, 6})));
  SafetensorsFile f = read_safetensors(path("pt.safetensors"));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "fc.bias");
  EXPECT_EQ(f.tensors[0].second.to_vector(), (std::vector<float>{0.5f, -0.5f}));
  EXPECT_EQ(f.tensors[1].first, "fc.weight");
  EXPECT_EQ(f.tensors[1].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.tensors[1].second.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(Safetensors, LoadedTensorsAreChargedToTheCurrentMemTag) {
  save_safetensors(path("t.safetensors"), {{"w", Tensor::from_vector({2}, {1, 2})}});
  MemTagScope scope(MemTag::parameters);
  NamedTensors loaded = load_safetensors(path("t.safetensors"));
  EXPECT_EQ(loaded[0].second.mem_tag(), MemTag::parameters);
}

TEST_F(Safetensors, RefusesDtypeOtherThanF32NamingIt) {
  write_bytes(path("bf16.safetensors"),
              one_entry_file(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,4]})", std::string(4, '\0')));
  const std::string msg = thrown_message([&] { load_safetensors(path("bf16.safetensors")); });
  EXPECT_NE(msg.find("BF16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16.safetensors"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesFileShorterThanEightBytes) {
  write_bytes(path("short"), "abc");
  EXPECT_THROW(load_safetensors(path("short")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesHeaderTruncatedByEndOfFile) {
  write_bytes(path("trunc"), u64_le(100) + R"({"t":{"dtype")");
  const std::string msg = thrown_message([&] { load_safetensors(path("trunc")); });
  EXPECT_NE(msg.find("past the end of the file"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesHugeHeaderLengthBeforeAllocating) {
  write_bytes(path("huge"), u64_le(uint64_t{1} << 62) + "{}");
  const std::string msg = thrown_message([&] { load_safetensors(path("huge")); });
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesHeaderThatIsNotJson) {
  write_bytes(path("notjson"), safetensors_bytes("{not json", ""));
  const std::string msg = thrown_message([&] { load_safetensors(path("notjson")); });
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesHeaderThatIsNotAnObject) {
  write_bytes(path("array"), safetensors_bytes("[1, 2]", ""));
  EXPECT_THROW(load_safetensors(path("array")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesDeeplyNestedHeader) {
  write_bytes(path("deep"), safetensors_bytes(std::string(100000, '[') + std::string(100000, ']'), ""));
  EXPECT_THROW(load_safetensors(path("deep")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesEntryWithoutDataOffsets) {
  write_bytes(path("nooff"), one_entry_file(R"({"dtype":"F32","shape":[1]})", f32_le({1})));
  const std::string msg = thrown_message([&] { load_safetensors(path("nooff")); });
  EXPECT_NE(msg.find("data_offsets"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesNegativeShape) {
  write_bytes(path("neg"), one_entry_file(R"({"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]})", ""));
  EXPECT_THROW(load_safetensors(path("neg")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesMoreThanFiveDims) {
  write_bytes(path("6d"),
              one_entry_file(R"({"dtype":"F32","shape":[1,1,1,1,1,1],"data_offsets":[0,4]})", f32_le({1})));
  EXPECT_THROW(load_safetensors(path("6d")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesShapeWhoseSizeOverflows) {
  write_bytes(path("big"), one_entry_file(
      R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})", ""));
  EXPECT_THROW(load_safetensors(path("big")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesDataOffsetsPastTheDataSection) {
  write_bytes(path("past"), one_entry_file(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", f32_le({1})));
  const std::string msg = thrown_message([&] { load_safetensors(path("past")); });
  EXPECT_NE(msg.find("'t'"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesDataOffsetsThatDisagreeWithShape) {
  write_bytes(path("size"), one_entry_file(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", f32_le({1, 2})));
  EXPECT_THROW(load_safetensors(path("size")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesBeginAfterEnd) {
  write_bytes(path("rev"), one_entry_file(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})", f32_le({1})));
  EXPECT_THROW(load_safetensors(path("rev")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesHoleBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  write_bytes(path("hole"), safetensors_bytes(header, f32_le({1, 2, 3})));
  const std::string msg = thrown_message([&] { load_safetensors(path("hole")); });
  EXPECT_NE(msg.find("[4, 8)"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesTrailingBytesNoTensorOwns) {
  write_bytes(path("tail"), one_entry_file(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})", f32_le({1, 2})));
  EXPECT_THROW(load_safetensors(path("tail")), std::invalid_argument);
}

TEST_F(Safetensors, RefusesOverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  write_bytes(path("overlap"), safetensors_bytes(header, f32_le({1, 2, 3})));
  const std::string msg = thrown_message([&] { load_safetensors(path("overlap")); });
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
}

TEST_F(Safetensors, RefusesTensorNamedTwiceInHeader) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  write_bytes(path("twice"), safetensors_bytes(header, f32_le({1, 2})));
  const std::string msg = thrown_message([&] { load_safetensors(path("twice")); });
  EXPECT_NE(msg.find("'a' twice"), std::string::npos) << msg;
}

// A header of `n` zero-size tensors ("t0" … ), each {"dtype":"F32","shape":[0],...}.
std::string zero_size_tensors(int64_t n) {
  std::string header = "{";
  for (int64_t i = 0; i < n; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  return safetensors_bytes(header + "}", "");
}

// Entries are checked as they are parsed, not inserted one by one into an ordered map (a
// linear search each: 100,000 entries took 116 s), so many of them parse in one pass.
TEST_F(Safetensors, ManyTensorsParseInOnePass) {
  write_bytes(path("many"), zero_size_tensors(60000));
  const SafetensorsFile f = read_safetensors(path("many"));
  ASSERT_EQ(f.tensors.size(), 60000u);
  EXPECT_EQ(f.tensors[0].first, "t0");
  EXPECT_EQ(f.tensors.back().first, "t59999");
}

using SafetensorsHostile = Safetensors;

// More entries than any model and optimizer state hold: refused once the parser passes
// the limit, naming it.
TEST_F(SafetensorsHostile, MoreTensorsThanTheLimitAreRefused) {
  write_bytes(path("too_many"), zero_size_tensors(kMaxSafetensorsTensors + 1));
  const std::string msg = thrown_message([&] { read_safetensors(path("too_many")); });
  EXPECT_NE(msg.find("too_many: header lists more than 65536 tensors; allowed: at most that many"), std::string::npos)
      << msg;
}

// Weights that are not numbers gave exit 0 and garbage out; they are refused at load,
// naming the tensor, how many values and where the first is.
TEST_F(SafetensorsHostile, NonFiniteWeightsAreRefusedNamingTheTensor) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    save_safetensors(path("w.safetensors"),
                     {{"fc.bias", Tensor::from_vector({2}, {1, 2})}, {"fc.weight", Tensor::from_vector({3}, {0, bad, 1})}});
    const std::string msg = thrown_message([&] { read_safetensors(path("w.safetensors")); });
    EXPECT_NE(msg.find("tensor 'fc.weight' holds 1 of 3 values that are not finite (NaN or infinite; the first at "
                       "index 1 is "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("allowed: finite weights only"), std::string::npos) << msg;
  }
}

TEST_F(Safetensors, MissingFileErrorNamesThePath) {
  const std::string msg = thrown_message([&] { load_safetensors(path("nope.safetensors")); });
  EXPECT_NE(msg.find("nope.safetensors"), std::string::npos) << msg;
}

TEST_F(Safetensors, SaveRefusesDuplicateNames) {
  Tensor t = Tensor::from_vector({1}, {1});
  EXPECT_THROW(save_safetensors(path("dup"), {{"w", t}, {"w", t}}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(path("dup")));
}

TEST_F(Safetensors, SaveIntoMissingDirectoryNamesThePath) {
  const std::string target = path("no/such/dir/w.safetensors");
  const std::string msg = thrown_message([&] { save_safetensors(target, {{"w", Tensor::zeros({1})}}); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
}

TEST_F(Safetensors, SaveLeavesNoTemporaryFileBehind) {
  save_safetensors(path("w.safetensors"), {{"w", Tensor::zeros({4})}});
  save_safetensors(path("w.safetensors"), {{"w", Tensor::zeros({8})}});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"w.safetensors"}));
  EXPECT_EQ(load_safetensors(path("w.safetensors"))[0].second.numel(), 8);
}

TEST_F(Safetensors, FailedSaveKeepsTheOldFileWhole) {
  save_safetensors(path("w.safetensors"), {{"old", Tensor::full({4}, 7.0f)}});
  const std::string before = read_bytes(path("w.safetensors"));

  // Make the write fail half way: a file-size limit turns it into EFBIG.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    save_safetensors(path("w.safetensors"), {{"new", Tensor::full({1 << 20}, 1.0f)}});
  } catch (const std::runtime_error&) {
    threw = true;
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_TRUE(threw);
  EXPECT_EQ(read_bytes(path("w.safetensors")), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// conv (O, I, H, W) then linear (out, in): "0.weight", "0.bias", "1.weight", "1.bias".
std::shared_ptr<Sequential> small_model(uint64_t seed, int64_t conv_out = 4) {
  Generator gen(seed);
  MemTagScope scope(MemTag::parameters);
  auto m = std::make_shared<Sequential>();
  m->emplace<Conv2d>(1, conv_out, 3, ConvOptions{}, gen);
  m->emplace<Linear>(6, 2, gen);
  return m;
}

TEST_F(Safetensors, LoadStateDictCopiesValuesIntoTheModelsTensors) {
  auto a = small_model(1), b = small_model(2);
  save_safetensors(path("a.safetensors"), a->state_dict());
  const Tensor b_weight = b->state_dict()[0].second;
  load_state_dict(*b, path("a.safetensors"));
  const NamedTensors sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sb[i].second.to_vector(), sa[i].second.to_vector());
  EXPECT_TRUE(sb[0].second.same(b_weight));  // values copied in, tensors kept
  EXPECT_TRUE(sb[0].second.requires_grad());
}

TEST_F(Safetensors, LoadStateDictRefusesMissingTensor) {
  auto m = small_model(1);
  NamedTensors sd = m->state_dict();
  sd.pop_back();  // drop "1.bias"
  const std::string msg = thrown_message([&] { load_state_dict(*m, sd); });
  EXPECT_NE(msg.find("1.bias: missing"), std::string::npos) << msg;
}

TEST_F(Safetensors, LoadStateDictRefusesUnexpectedTensor) {
  auto m = small_model(1);
  NamedTensors sd = m->state_dict();
  sd.emplace_back("2.weight", Tensor::zeros({3}));
  const std::string msg = thrown_message([&] { load_state_dict(*m, sd); });
  EXPECT_NE(msg.find("2.weight"), std::string::npos) << msg;
}

TEST_F(Safetensors, LoadStateDictShapeMismatchNamesTensorAndBothShapes) {
  auto wide = small_model(1, 8), narrow = small_model(2, 4);
  save_safetensors(path("wide.safetensors"), wide->state_dict());
  const std::string msg = thrown_message([&] { load_state_dict(*narrow, path("wide.safetensors")); });
  EXPECT_NE(msg.find("0.weight: file has shape [8, 1, 3, 3], model expects [4, 1, 3, 3]"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("wide.safetensors"), std::string::npos) << msg;
}

TEST_F(Safetensors, LoadStateDictChangesNothingWhenAnyTensorIsWrong) {
  auto m = small_model(1);
  const std::vector<float> before = m->state_dict()[0].second.to_vector();
  NamedTensors sd;
  for (const auto& [name, t] : m->state_dict()) sd.emplace_back(name, Tensor::full(t.shape(), 9.0f));
  sd.back().second = Tensor::zeros({5});  // last one wrong: earlier ones must not be copied
  EXPECT_THROW(load_state_dict(*m, sd), std::invalid_argument);
  EXPECT_EQ(m->state_dict()[0].second.to_vector(), before);
}

}  // namespace
}  // namespace quartet::engine
